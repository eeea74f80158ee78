//! Global average pooling on the CPU: one mean per image plane (summed in f64), and its
//! gradient, each plane filled with its output gradient over the plane's size.

use candle_core::Tensor;
use rayon::prelude::*;

use super::params::GAP;
use crate::cpu::{self, Float};
use crate::error::Result;

/// `[N, C, H, W]` → `[N, C, 1, 1]`.
pub(super) fn forward<T: Float>(x: &Tensor, [n, c, h, w]: [usize; 4]) -> Result<Tensor> {
    let hw = h * w;
    let means = cpu::with_slice::<T, _>(GAP, x, |xs| {
        Ok(xs
            .par_chunks(hw)
            .map(|plane| T::from_f64(plane.iter().map(|v| v.to_f64()).sum::<f64>() / hw as f64))
            .collect::<Vec<T>>())
    })?;
    cpu::tensor(GAP, means, (n, c, 1, 1))
}

/// The gradient of an input of `[n, c, h, w]` from the pooled output's `grad_y`.
pub(super) fn backward<T: Float>(grad_y: &Tensor, [n, c, h, w]: [usize; 4]) -> Result<Tensor> {
    let hw = h * w;
    let scale = T::from_f64(1.0 / hw as f64);
    let mut dx = vec![T::ZERO; n * c * hw];
    cpu::with_slice::<T, _>(GAP, grad_y, |gs| {
        dx.par_chunks_mut(hw)
            .zip(gs.par_iter())
            .for_each(|(plane, g)| plane.fill(*g * scale));
        Ok(())
    })?;
    cpu::tensor(GAP, dx, (n, c, h, w))
}
