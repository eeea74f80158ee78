//! The sequence layers, with PyTorch's parameter names and initialisation:
//! `nn.Embedding` and `nn.MultiheadAttention` (`batch_first=True`).

use wick_graph::ValueId;
use wick_ops::tensor::mask::Comparison;

use super::{Init, LayerResult, Layers, TensorRole};

impl Layers<'_> {
    /// `nn.Embedding(num_embeddings, dim, padding_idx)` as layer `path`: `path.weight`
    /// `[num_embeddings, dim]`, `N(0, 1)` as PyTorch's; `indices` of any shape give
    /// `[.., dim]`. The row `padding_idx` gets no gradient.
    pub fn embedding(
        &mut self,
        path: &str,
        indices: ValueId,
        num_embeddings: usize,
        dim: usize,
        padding_idx: Option<usize>,
    ) -> LayerResult {
        self.scope(path, |nn| {
            let shape = [num_embeddings, dim];
            let w = nn.param(
                "weight",
                &shape,
                TensorRole::FcWeight,
                Init::Normal(1.0),
                dim,
            )?;
            nn.builder().embedding(indices, w, padding_idx)
        })
    }

    /// `nn.MultiheadAttention(dim, heads, batch_first=True)` as layer `path`, self-
    /// attention over `x` `[N, T, dim]`: `path.in_proj_weight` `[3·dim, dim]` (Xavier
    /// uniform) and `path.in_proj_bias` (zeros), `path.out_proj.weight` (PyTorch's linear
    /// default) and `path.out_proj.bias` (zeros). `attn_mask` is a `u8` `[T, T]` mask, 1
    /// where a query may not attend (PyTorch's boolean mask: the causal mask of a GPT is
    /// 1 above the diagonal). Returns `[N, T, dim]`.
    ///
    /// # Examples
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    /// use wick_models::nn::Layers;
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let x = b.input("x", &[2, 5, 16], DType::F32)?;
    /// let causal = b.input("causal_mask", &[5, 5], DType::U8)?;
    /// let mut nn = Layers::new(&mut b);
    /// let y = nn.multi_head_attention("attn", x, 16, 4, Some(causal))?;
    /// assert_eq!(nn.builder().shape(y), &[2, 5, 16]);
    /// assert_eq!(nn.specs()[0].name, "attn.in_proj_weight");
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn multi_head_attention(
        &mut self,
        path: &str,
        x: ValueId,
        dim: usize,
        heads: usize,
        attn_mask: Option<ValueId>,
    ) -> LayerResult {
        if heads == 0 || !dim.is_multiple_of(heads) {
            return Err(wick_graph::GraphError::Usage(format!(
                "multi_head_attention `{path}`: dim {dim} is not a multiple of {heads} heads"
            )));
        }
        self.scope(path, |nn| {
            let xavier = (6.0 / (dim + 3 * dim) as f64).sqrt();
            let w_in = nn.param(
                "in_proj_weight",
                &[3 * dim, dim],
                TensorRole::FcWeight,
                Init::Uniform(xavier),
                dim,
            )?;
            let b_in = nn.param(
                "in_proj_bias",
                &[3 * dim],
                TensorRole::FcBias,
                Init::Constant(0.0),
                dim,
            )?;
            let (w_out, b_out) = nn.scope("out_proj", |nn| {
                let w = nn.param(
                    "weight",
                    &[dim, dim],
                    TensorRole::FcWeight,
                    Init::LinearDefault,
                    dim,
                )?;
                let b = nn.param("bias", &[dim], TensorRole::FcBias, Init::Constant(0.0), dim)?;
                Ok((w, b))
            })?;
            let b = nn.builder();
            let shape = b.shape(x).to_vec();
            let (n, t) = (shape[0], shape[1]);
            let qkv = project(b, x, w_in, b_in)?;
            let parts = b.chunk(qkv, 3, -1)?;
            let head_dim = dim / heads;
            let split_heads = |b: &mut wick_graph::GraphBuilder, v| {
                let v = b.reshape(v, &[n, t, heads, head_dim])?;
                b.permute(v, &[0, 2, 1, 3])
            };
            let q = split_heads(b, parts[0])?;
            let k = split_heads(b, parts[1])?;
            let v = split_heads(b, parts[2])?;
            // nn.MultiheadAttention's mask says where a query may not attend; the
            // fused op's boolean mask, where it may.
            let allowed = match attn_mask {
                Some(m) => Some(b.compare_scalar(Comparison::Eq, m, 0.0)?),
                None => None,
            };
            let y = b.scaled_dot_product_attention(q, k, v, allowed, 0.0, false, None)?;
            let y = b.permute(y, &[0, 2, 1, 3])?;
            let y = b.reshape(y, &[n, t, dim])?;
            project(b, y, w_out, b_out)
        })
    }
}

/// `x @ wᵀ + bias` over the last dimension of `x` (any rank): one linear node over the
/// flattened rows (its GEMM reads `w` transposed in place).
fn project(b: &mut wick_graph::GraphBuilder, x: ValueId, w: ValueId, bias: ValueId) -> LayerResult {
    let shape = b.shape(x).to_vec();
    let (cin, cout) = (shape[shape.len() - 1], b.shape(w)[0]);
    let flat = b.reshape(x, &[shape.iter().product::<usize>() / cin.max(1), cin])?;
    let y = b.linear(flat, w, Some(bias))?;
    let mut out = shape;
    *out.last_mut().expect("rank >= 1") = cout;
    b.reshape(y, &out)
}
