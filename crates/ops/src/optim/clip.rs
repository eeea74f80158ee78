//! Gradient clipping by the global norm, as PyTorch's `clip_grad_norm_`.

use candle_core::{DType, Tensor};

use crate::error::{CandleContext, Result};

/// The factor `clip_grad_norm_` multiplies every gradient by: `min(1, max_norm / (‖g‖ + 1e-6))`
/// with `‖g‖` the L2 norm of all the gradients together (accumulated in f64). Returns the
/// total norm and the factor.
pub fn clip_factor(grads: &[&Tensor], max_norm: f64) -> Result<(f64, f64)> {
    const CLIP: &str = "clip_grad_norm";
    if !(max_norm.is_finite() && max_norm > 0.0) {
        return Err(crate::invalid!(
            CLIP,
            "max_norm must be positive, got {max_norm}"
        ));
    }
    let mut sum = 0.0f64;
    for g in grads {
        let sq = g
            .to_dtype(DType::F64)
            .ctx(CLIP)?
            .sqr()
            .ctx(CLIP)?
            .sum_all()
            .ctx(CLIP)?
            .to_scalar::<f64>()
            .ctx(CLIP)?;
        sum += sq;
    }
    let total = sum.sqrt();
    let coef = (max_norm / (total + 1e-6)).min(1.0);
    Ok((total, coef))
}
