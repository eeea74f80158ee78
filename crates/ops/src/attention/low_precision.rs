//! Autocast's attention on candle's ops (the generic path: devices and shapes wick's
//! kernels do not take), as that path runs autocast's convolutions and linear layers:
//! float32 `q`, `k`, `v` (and, in the backward, the output gradient) with 16-bit
//! products are rounded to that 16-bit dtype's values and kept in float32, and the
//! float32 path runs on them. So `q·kᵀ`, `p·v`'s `v`, and the backward's `dO` are the
//! 16-bit values autocast would cast them to; the probabilities and the scores' gradient,
//! which candle's ops multiply as they are, and everything else (the softmax, its
//! log-sum-exp, the outputs) stay float32.
//!
//! wick's CPU and CUDA kernels do not take this path: they round each operand as their
//! products read it, the probabilities and the scores' gradient included.

use candle_core::{DType, Tensor};

use super::params::{Attention, OP};
use crate::error::Result;

/// The 16-bit dtype whose values a float32 attention multiplies under `a.products`.
pub(super) fn dtype(q: &Tensor, a: &Attention) -> Option<DType> {
    (q.dtype() == DType::F32)
        .then(|| a.products.low_dtype())
        .flatten()
}

/// `a` with float32 products: the call the rounded operands take.
pub(super) fn native(a: &Attention) -> Attention {
    Attention {
        products: Default::default(),
        ..a.clone()
    }
}

/// `tensors` rounded to `low`'s values, kept as float32 (exact).
pub(super) fn rounded<const N: usize>(tensors: [&Tensor; N], low: DType) -> Result<[Tensor; N]> {
    let rounded = tensors
        .iter()
        .map(|t| crate::bf16::rounded_f32(OP, t, low))
        .collect::<Result<Vec<_>>>()?;
    Ok(rounded.try_into().expect("one rounded tensor per operand"))
}
