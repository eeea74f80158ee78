//! Linear layers on the CPU through wick's GEMM (`cpu::gemm_*`), or in float32 with few
//! rows through `linear_few_rows`: the forward's bias is
//! written first and the product accumulated onto it (no second pass over the output) for
//! deep products, and
//! the weight gradient is computed transposed, column-major, which the `gemm` crate runs
//! faster for the tall, narrow operands of a linear layer over many rows.

use candle_core::{DType, Tensor};

use crate::broadcast::BinaryOp;
use crate::cpu::{self, Float};
use crate::error::Result;
use crate::linear_few_rows;

const OP: &str = "linear";

/// From this depth the forward writes the bias first and accumulates the product onto it;
/// shallower products (few flops per output) store the product and add the bias in a
/// second pass, which measured faster (`cargo bench --bench transformer_layers -- linear`:
/// 121 against 98 GFLOP/s at 8192x96->384, 166 against 142 at 8192x384->96).
const ACCUMULATE_BIAS_FROM: usize = 256;

/// `y [m, n] = x [m, k] · weightᵀ (+ bias)`, `weight` `[n, k]`.
pub(crate) fn forward<T: Float>(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
) -> Result<Tensor> {
    let (m, k) = (x.dims()[0], x.dims()[1]);
    let n = weight.dims()[0];
    if x.dtype() == DType::F32 && linear_few_rows::takes_few_rows_path(m, n, k) {
        let y = cpu::with_slices::<f32, _>(OP, x, weight, |xd, wd| {
            Ok(linear_few_rows::forward(xd, wd, m, n, k))
        })?;
        let y = cpu::tensor(OP, y, (m, n))?;
        return match bias {
            Some(b) => crate::broadcast::forward(BinaryOp::Add, &y, b),
            None => Ok(y),
        };
    }
    let y = cpu::with_slices::<T, _>(OP, x, weight, |xd, wd| {
        // weightᵀ's element (j, c) is weight[c][j]: strides (1, k).
        let (lhs, rhs) = ((xd, (k, 1)), (wd, (1, k)));
        let mut y = Vec::with_capacity(m * n);
        match bias.filter(|_| k >= ACCUMULATE_BIAS_FROM) {
            Some(b) => cpu::with_slice::<T, _>(OP, b, |bd| {
                for _ in 0..m {
                    y.extend_from_slice(bd);
                }
                cpu::gemm_strided(m, n, k, (&mut y, (n, 1)), true, lhs, rhs, true);
                Ok(())
            })?,
            None => {
                cpu::gemm_uninit(m, n, k, y.spare_capacity_mut(), lhs, rhs, true);
                // SAFETY: gemm_uninit wrote all m * n slots.
                unsafe { y.set_len(m * n) };
            }
        }
        Ok(y)
    })?;
    let y = cpu::tensor(OP, y, (m, n))?;
    match bias.filter(|_| k < ACCUMULATE_BIAS_FROM) {
        Some(b) => crate::broadcast::forward(BinaryOp::Add, &y, b),
        None => Ok(y),
    }
}

/// `(grad_x [m, k], grad_weight [n, k])` for `grad_y [m, n]`, `x [m, k]`, `weight [n, k]`.
pub(crate) fn backward<T: Float>(
    grad_y: &Tensor,
    x: &Tensor,
    weight: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let (m, k) = (x.dims()[0], x.dims()[1]);
    let n = weight.dims()[0];
    let (dx, dw) = cpu::with_slices::<T, _>(OP, grad_y, x, |gd, xd| {
        cpu::with_slice::<T, _>(OP, weight, |wd| {
            let mut dx = Vec::with_capacity(m * k);
            let (gy, w) = ((gd, (n, 1)), (wd, (k, 1)));
            cpu::gemm_uninit(m, k, n, dx.spare_capacity_mut(), gy, w, true);
            // SAFETY: gemm_uninit wrote all m * k slots.
            unsafe { dx.set_len(m * k) };
            // grad_weightᵀ [k, n] = xᵀ · grad_y, stored column-major: grad_weight's
            // rows, as its [n, k] layout wants.
            let mut dw = vec![T::ZERO; n * k];
            let (xt, gy) = ((xd, (1, k)), (gd, (n, 1)));
            cpu::gemm_strided(k, n, m, (&mut dw, (1, k)), false, xt, gy, true);
            Ok((dx, dw))
        })
    })?;
    Ok((cpu::tensor(OP, dx, (m, k))?, cpu::tensor(OP, dw, (n, k))?))
}
