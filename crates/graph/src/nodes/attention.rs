//! `scaled_dot_product_attention`, fused: recording, backward rule, execution (kernels
//! in `wick_ops::attention`). The node keeps the output and one log-sum-exp per query
//! row; its backward draws the probabilities again from them.

use std::sync::Arc;

use candle_core::DType;

use wick_ops::attention::{
    scaled_dot_product_attention, scaled_dot_product_attention_backward, Attention,
    AttentionOutput, AttentionShape,
};
use wick_ops::Kernel;

use crate::builder::{GraphBuilder, Mode};
use crate::error::{GraphError, Result};
use crate::ir::{arg, args, BackwardCtx, Inputs, KernelResult, NodeOp, ValueId};

const OP: &str = "scaled_dot_product_attention";

/// Fused attention. in: q, k, v, then the mask if `masked`, then the step counter if
/// dropout is on; out: the output `[.., L, Ev]` and the log-sum-exp `[.., L]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaledDotProductAttention {
    /// The operands' shapes.
    pub shape: AttentionShape,
    /// Scale, causal rule, dropout.
    pub attention: Attention,
    /// Whether a mask is among the inputs.
    pub masked: bool,
}

/// Its gradients. in: q, k, v, output, log-sum-exp, the output's gradient, then the
/// mask and the step counter as the forward's; out: the gradients of q, k and v.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaledDotProductAttentionBackward {
    /// The forward's settings.
    pub forward: ScaledDotProductAttention,
}

impl ScaledDotProductAttention {
    /// The mask and the step among `inputs` from index `first` on.
    fn extras<'a>(
        &self,
        inputs: &Inputs<'a>,
        first: usize,
    ) -> wick_ops::Result<(Option<&'a candle_core::Tensor>, u64)> {
        let mask = if self.masked {
            Some(arg(inputs, first, OP)?)
        } else {
            None
        };
        let step = if self.attention.dropout_p > 0.0 {
            let at = first + usize::from(self.masked);
            wick_ops::dropout::read_step(arg(inputs, at, OP)?)?
        } else {
            0
        };
        Ok((mask, step))
    }
}

impl GraphBuilder {
    /// `F.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p,
    /// is_causal, scale)`: `softmax(q·kᵀ·scale + mask)·v` over `q` `[.., L, E]`, `k`
    /// `[.., S, E]`, `v` `[.., S, Ev]`, in one fused node that stores O(L) per head
    /// instead of the L×S probabilities. `attn_mask` broadcasts to `[.., L, S]`: a `u8`
    /// mask where nonzero means "may attend" (PyTorch's boolean mask), or a float mask
    /// added to the scores (it gets no gradient). `is_causal` lets query `i` see keys
    /// `j ≤ i` and excludes a mask, as in PyTorch. `scale` defaults to `1/√E`. Dropout
    /// on the attention weights applies in training graphs only; a query row that sees
    /// no key gives zeros.
    ///
    /// # Examples
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let q = b.input("q", &[2, 4, 16, 8], DType::F32)?;
    /// let k = b.input("k", &[2, 4, 16, 8], DType::F32)?;
    /// let v = b.input("v", &[2, 4, 16, 8], DType::F32)?;
    /// let y = b.scaled_dot_product_attention(q, k, v, None, 0.0, true, None)?;
    /// assert_eq!(b.shape(y), &[2, 4, 16, 8]);
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    #[allow(clippy::too_many_arguments)]
    pub fn scaled_dot_product_attention(
        &mut self,
        query: ValueId,
        key: ValueId,
        value: ValueId,
        attn_mask: Option<ValueId>,
        dropout_p: f64,
        is_causal: bool,
        scale: Option<f64>,
    ) -> Result<ValueId> {
        self.forward_only(OP)?;
        self.expect_float(OP, "query", query)?;
        self.expect_same_dtype(OP, query, key)?;
        self.expect_same_dtype(OP, query, value)?;
        let dtype = self.dtype_of(query);
        let shape = AttentionShape::new(self.shape(query), self.shape(key), self.shape(value))
            .map_err(self.build_err(OP))?;
        let dropout_p = if self.module_mode() == Mode::Eval {
            0.0
        } else {
            dropout_p
        };
        let attention = Attention {
            scale: scale.unwrap_or(1.0 / (shape.qk_dim.max(1) as f64).sqrt()),
            causal: is_causal,
            dropout_p,
            seed: self.seed ^ (self.graph.nodes.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            // Autocast computes attention's products in 16 bits, as PyTorch's lists it.
            products: if dtype == DType::F32 {
                self.precision().products()
            } else {
                Default::default()
            },
        };
        attention
            .check(attn_mask.is_some())
            .map_err(self.build_err(OP))?;
        let mut inputs = vec![query, key, value];
        if let Some(m) = attn_mask {
            shape
                .check_mask(self.shape(m), self.dtype_of(m), dtype)
                .map_err(self.build_err(OP))?;
            inputs.push(m);
        }
        if attention.dropout_p > 0.0 {
            inputs.push(self.step_counter()?);
        }
        let new = vec![
            ("attention", shape.out(), dtype),
            (
                "attention.lse",
                shape.lse(),
                wick_ops::attention::lse_dtype(dtype),
            ),
        ];
        let flops = shape.forward_flops(is_causal);
        let op = ScaledDotProductAttention {
            shape,
            attention,
            masked: attn_mask.is_some(),
        };
        Ok(self.push(Arc::new(op), inputs, new, vec![], flops)[0])
    }
}

impl NodeOp for ScaledDotProductAttention {
    fn kernel(&self) -> Kernel {
        Kernel::AttentionForward
    }

    fn compute_dtype(&self) -> Option<DType> {
        self.attention.products.low_dtype()
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [q, k, v] = args(inputs, OP)?;
        let (mask, step) = self.extras(inputs, 3)?;
        let y = scaled_dot_product_attention(q, k, v, mask, &self.attention, step)?;
        Ok(vec![Some(y.out), Some(y.lse)])
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let Some(gy) = ctx.grad_output(0) else {
            return Ok(());
        };
        if self.masked && ctx.needs_grad(ctx.input(3)) {
            return Err(GraphError::Usage(format!(
                "OP_ID{} ({OP}): the float attn_mask needs a gradient, which the fused op does not give; detach it",
                ctx.op_id()
            )));
        }
        let mut inputs = vec![ctx.input(0), ctx.input(1), ctx.input(2)];
        inputs.extend([ctx.output(0), ctx.output(1), gy]);
        inputs.extend((3..ctx.num_inputs()).map(|i| ctx.input(i)));
        let dtype = ctx.dtype();
        let new = (0..3)
            .map(|i| ("grad.attention", ctx.shape(ctx.input(i)), dtype))
            .collect();
        let op = ScaledDotProductAttentionBackward {
            forward: self.clone(),
        };
        let flops = self.shape.backward_flops(self.attention.causal);
        let grads = ctx.record(op, inputs, new, flops);
        ctx.contribute_to_inputs(&grads);
        Ok(())
    }
}

impl NodeOp for ScaledDotProductAttentionBackward {
    fn kernel(&self) -> Kernel {
        Kernel::AttentionBackward
    }

    fn compute_dtype(&self) -> Option<DType> {
        self.forward.compute_dtype()
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [q, k, v, out, lse, grad_out] = args(inputs, OP)?;
        let saved = AttentionOutput {
            out: out.clone(),
            lse: lse.clone(),
        };
        let (mask, step) = self.forward.extras(inputs, 6)?;
        let a = &self.forward.attention;
        let g = scaled_dot_product_attention_backward(q, k, v, &saved, grad_out, mask, a, step)?;
        Ok(vec![Some(g.q), Some(g.k), Some(g.v)])
    }
}
