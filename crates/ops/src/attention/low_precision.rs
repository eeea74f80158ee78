//! Autocast's attention off the CPU (CUDA and the generic path), as those paths run
//! autocast's convolutions and linear layers: float32 `q`, `k`, `v` (and, in the
//! backward, the output gradient) with 16-bit products are rounded to that 16-bit
//! dtype's values and kept in float32, and the float32 path runs on them. So `q·kᵀ`,
//! `p·v`'s `v`, and the backward's `dO` are the 16-bit values autocast would cast them
//! to, and everything else (the softmax, its log-sum-exp, the outputs) stays float32.
//!
//! The CPU kernel does not take this path: it rounds each tile's operands as its GEMMs
//! read them, the probabilities and the scores' gradient included.

use candle_core::{DType, Tensor};

use super::params::{Attention, AttentionGrads, AttentionOutput, Call, OP};
use crate::error::Result;

/// The 16-bit dtype whose values a float32 attention multiplies under `a.products`.
pub(super) fn dtype(q: &Tensor, a: &Attention) -> Option<DType> {
    (q.dtype() == DType::F32)
        .then(|| a.products.low_dtype())
        .flatten()
}

/// The float32 call on the operands rounded: float32 products of 16-bit values.
fn native(a: &Attention) -> Attention {
    Attention {
        products: Default::default(),
        ..a.clone()
    }
}

fn rounded(t: &Tensor, low: DType) -> Result<Tensor> {
    crate::bf16::rounded_f32(OP, t, low)
}

/// The forward of `c` with `q`, `k` and `v` rounded to `low`'s values.
pub(super) fn forward(low: DType, c: &Call<'_>) -> Result<AttentionOutput> {
    let (_, [q, k, v], mask, a, step) = c.parts();
    let (q, k, v) = (rounded(q, low)?, rounded(k, low)?, rounded(v, low)?);
    super::scaled_dot_product_attention(&q, &k, &v, mask, &native(a), step)
}

/// The backward of `c` with `q`, `k`, `v` and the output gradient `dy` rounded to `low`'s
/// values.
pub(super) fn backward(
    low: DType,
    c: &Call<'_>,
    y: &AttentionOutput,
    dy: &Tensor,
) -> Result<AttentionGrads> {
    let (_, [q, k, v], mask, a, step) = c.parts();
    let (q, k, v, dy) = (
        rounded(q, low)?,
        rounded(k, low)?,
        rounded(v, low)?,
        rounded(dy, low)?,
    );
    super::scaled_dot_product_attention_backward(&q, &k, &v, y, &dy, mask, &native(a), step)
}
