//! The shapes, settings and results of one attention, apart from its kernels.

use candle_core::{DType, Tensor};

use crate::bf16::Products;
use crate::error::{OpError, Result};

pub(super) const OP: &str = "scaled_dot_product_attention";

/// The shapes of one attention: `q` `[.., L, E]`, `k` `[.., S, E]`, `v` `[.., S, Ev]`
/// with the same leading (batch, head) dimensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttentionShape {
    /// The leading dimensions (batch, heads, ...), the same for `q`, `k` and `v`.
    pub lead: Vec<usize>,
    /// Query rows `L`.
    pub queries: usize,
    /// Key (and value) rows `S`.
    pub keys: usize,
    /// The query and key width `E`.
    pub qk_dim: usize,
    /// The value width `Ev`.
    pub v_dim: usize,
}

impl AttentionShape {
    /// The shapes of `q`, `k` and `v`, or an error naming all three.
    pub fn new(q: &[usize], k: &[usize], v: &[usize]) -> Result<Self> {
        let bad = |why: &str| {
            Err(crate::invalid!(
                OP,
                "query {q:?}, key {k:?}, value {v:?}: {why}"
            ))
        };
        if q.len() < 2 || q.len() != k.len() || q.len() != v.len() {
            return bad(
                "all three need the same rank, at least 2 ([.., L, E], [.., S, E], [.., S, Ev])",
            );
        }
        let r = q.len();
        if q[..r - 2] != k[..r - 2] || q[..r - 2] != v[..r - 2] {
            return bad("the leading (batch, head) dimensions differ");
        }
        if q[r - 1] != k[r - 1] {
            return bad("the query and key widths E differ");
        }
        if k[r - 2] != v[r - 2] {
            return bad("the key and value rows S differ");
        }
        Ok(AttentionShape {
            lead: q[..r - 2].to_vec(),
            queries: q[r - 2],
            keys: k[r - 2],
            qk_dim: q[r - 1],
            v_dim: v[r - 1],
        })
    }

    /// `(heads, queries, keys, qk_dim, v_dim)`: the slices and the four sizes.
    pub fn dims(&self) -> (usize, usize, usize, usize, usize) {
        let s = self;
        (s.heads(), s.queries, s.keys, s.qk_dim, s.v_dim)
    }

    /// Checks a mask of `dims` and `mask_dtype` for queries of `dtype`: `u8` (boolean)
    /// or `dtype` (additive), broadcasting to the scores `[.., L, S]`.
    pub fn check_mask(&self, dims: &[usize], mask_dtype: DType, dtype: DType) -> Result<()> {
        if mask_dtype != DType::U8 && mask_dtype != dtype {
            return Err(crate::invalid!(OP, "attn_mask has dtype {mask_dtype:?}: it must be U8 (a boolean mask, nonzero = may attend) or the query's {dtype:?} (added to the scores)"));
        }
        self.mask_strides(OP, dims).map(|_| ())
    }

    /// The scores' shape `[.., L, S]`.
    pub fn scores(&self) -> Vec<usize> {
        let mut s = self.lead.clone();
        s.extend([self.queries, self.keys]);
        s
    }

    /// A mask's element strides over the scores' dimensions (0 where it broadcasts), or
    /// an error naming both shapes.
    pub(super) fn mask_strides(&self, op: &'static str, dims: &[usize]) -> Result<Vec<usize>> {
        let full = self.scores();
        if dims.len() > full.len() {
            return Err(crate::invalid!(
                op,
                "attn_mask {dims:?} has more dimensions than the scores {full:?}"
            ));
        }
        let offset = full.len() - dims.len();
        let mut out = vec![0; full.len()];
        let mut stride = 1;
        for (i, &d) in dims.iter().enumerate().rev() {
            let want = full[offset + i];
            if d != want && d != 1 {
                return Err(crate::invalid!(
                    op,
                    "attn_mask {dims:?} does not broadcast to the scores {full:?}"
                ));
            }
            if d != 1 {
                out[offset + i] = stride;
            }
            stride *= d;
        }
        Ok(out)
    }

    /// The number of (batch, head) slices: the product of the leading dimensions.
    pub fn heads(&self) -> usize {
        self.lead.iter().product()
    }

    /// The output's shape `[.., L, Ev]`.
    pub fn out(&self) -> Vec<usize> {
        let mut s = self.lead.clone();
        s.extend([self.queries, self.v_dim]);
        s
    }

    /// The shape of the saved log-sum-exp, one per query row: `[.., L]`.
    pub fn lse(&self) -> Vec<usize> {
        let mut s = self.lead.clone();
        s.push(self.queries);
        s
    }

    /// The (query, key) pairs that take part: all `L·S`, or under a causal mask those
    /// with key index ≤ query index.
    pub fn pairs(&self, causal: bool) -> u64 {
        let (l, s) = (self.queries as u64, self.keys as u64);
        let per_head = if causal {
            (0..l).map(|i| (i + 1).min(s)).sum()
        } else {
            l * s
        };
        per_head * self.heads() as u64
    }

    /// Forward FLOPs: the two products (`2·E` and `2·Ev` per pair) and the softmax (about
    /// 5 per pair: scale, max, subtract, exponential, sum), over the pairs that take part.
    pub fn forward_flops(&self, causal: bool) -> u64 {
        self.pairs(causal) * (2 * (self.qk_dim + self.v_dim) as u64 + 5)
    }

    /// Backward FLOPs: the scores again, `dV`, `dP`, `dQ` and `dK` (`2·(3E + 2Ev)` per
    /// pair) and the softmax's gradient (about 8 per pair).
    pub fn backward_flops(&self, causal: bool) -> u64 {
        self.pairs(causal) * (2 * (3 * self.qk_dim + 2 * self.v_dim) as u64 + 8)
    }
}

/// The settings of one attention, PyTorch's arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct Attention {
    /// The factor on `q·kᵀ`; PyTorch's default is `1/√E`.
    pub scale: f64,
    /// `is_causal`: query `i` sees keys `j ≤ i` (the mask's top-left corner, as PyTorch).
    pub causal: bool,
    /// The probability of dropping an attention weight (0 in evaluation).
    pub dropout_p: f64,
    /// The dropout draws' seed (the graph node's).
    pub seed: u64,
    /// (float32 operands) The products: [`Products::Bf16`] or [`Products::F16`] round
    /// every CPU tile's `q`, `k`, `v`, weights and gradients to that 16-bit float as its
    /// GEMMs read them, with float32 sums, as autocast's attention computes; the softmax
    /// and the outputs stay float32. On CUDA and the generic path, `q`, `k`, `v` and the
    /// output gradient are rounded to the 16-bit values before the float32 kernels run.
    pub products: Products,
}

impl Attention {
    /// Checks the settings against the shapes and the mask: a finite scale, a drop
    /// probability in `[0, 1)`, and a mask that is either given or causal, not both.
    pub fn check(&self, has_mask: bool) -> Result<()> {
        if !self.scale.is_finite() {
            return Err(crate::invalid!(
                OP,
                "scale must be finite, got {}",
                self.scale
            ));
        }
        crate::dropout::check_probability(self.dropout_p).map_err(|_| {
            crate::invalid!(OP, "dropout_p must be in [0, 1), got {}", self.dropout_p)
        })?;
        if has_mask && self.causal {
            return Err(OpError::invalid(
                OP,
                "attn_mask and is_causal are exclusive (as in PyTorch): put the causal rule into the mask",
            ));
        }
        Ok(())
    }
}

/// The output of an attention forward.
#[derive(Debug, Clone)]
pub struct AttentionOutput {
    /// `[.., L, Ev]`.
    pub out: Tensor,
    /// The log-sum-exp of each query row's scaled scores, `[.., L]` (−∞ for a row that
    /// sees no key; its output is 0, as PyTorch's), kept for the backward, in
    /// [`lse_dtype`] of the query's dtype.
    pub lse: Tensor,
}

/// The dtype of attention's saved log-sum-exp for queries of `dtype`: float32 for bf16
/// and f16 (as PyTorch's fused attention keeps it: a bf16 log-sum-exp of 8 would be off by
/// up to 1/32, and every probability the backward draws again by 3%), else `dtype`.
pub fn lse_dtype(dtype: DType) -> DType {
    match dtype {
        DType::BF16 | DType::F16 => DType::F32,
        other => other,
    }
}

/// The gradients of `q`, `k` and `v`.
#[derive(Debug, Clone)]
pub struct AttentionGrads {
    /// `∂/∂q`, `q`'s shape.
    pub q: Tensor,
    /// `∂/∂k`, `k`'s shape.
    pub k: Tensor,
    /// `∂/∂v`, `v`'s shape.
    pub v: Tensor,
}

/// One call as the backends take it: the checked shape, the operands, the mask, the
/// settings and the step the dropout draws for.
#[derive(Clone, Copy)]
pub(super) struct Call<'a> {
    pub(super) shape: &'a AttentionShape,
    /// `[q, k, v]`.
    pub(super) operands: [&'a Tensor; 3],
    pub(super) mask: Option<&'a Tensor>,
    pub(super) a: &'a Attention,
    pub(super) step: u64,
}

impl<'a> Call<'a> {
    pub(super) fn new(
        shape: &'a AttentionShape,
        operands: [&'a Tensor; 3],
        mask: Option<&'a Tensor>,
        a: &'a Attention,
        step: u64,
    ) -> Self {
        Call {
            shape,
            operands,
            mask,
            a,
            step,
        }
    }

    /// The call's parts: shape, `[q, k, v]`, mask, settings, step.
    #[allow(clippy::type_complexity)]
    pub(super) fn parts(
        &self,
    ) -> (
        &'a AttentionShape,
        [&'a Tensor; 3],
        Option<&'a Tensor>,
        &'a Attention,
        u64,
    ) {
        let c = *self;
        (c.shape, c.operands, c.mask, c.a, c.step)
    }
}
