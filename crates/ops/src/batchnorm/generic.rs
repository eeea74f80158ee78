//! The device-generic batch norm: candle's tensor ops, on every device (and on the CPU
//! under [`KernelPath::Generic`](crate::KernelPath)). The public functions in `mod.rs`
//! have checked every shape before these run.

use candle_core::Tensor;

use super::params::{BatchNormGrads, BatchNormOutput, Layer, Stats, OP};
use crate::error::{CandleContext, Result};

/// A `[C]` tensor as `[1, C, 1, 1]`, to broadcast over an NCHW tensor.
fn per_channel(t: &Tensor) -> Result<Tensor> {
    t.reshape((1, t.elem_count(), 1, 1)).ctx(OP)
}

/// `1 / sqrt(var + eps)`.
fn inv_std(var: &Tensor, eps: f64) -> Result<Tensor> {
    (var + eps).ctx(OP)?.sqrt().ctx(OP)?.recip().ctx(OP)
}

/// `x * scale + shift`, per channel.
fn affine(x: &Tensor, scale: &Tensor, shift: &Tensor) -> Result<Tensor> {
    x.broadcast_mul(&per_channel(scale)?)
        .ctx(OP)?
        .broadcast_add(&per_channel(shift)?)
        .ctx(OP)
}

/// `(1 - momentum) * running + momentum * batch`.
fn blend(running: &Tensor, batch: &Tensor, momentum: f64) -> Result<Tensor> {
    ((running * (1.0 - momentum)).ctx(OP)? + (batch * momentum).ctx(OP)?).ctx(OP)
}

pub(super) fn train(x: &Tensor, layer: &Layer<'_>) -> Result<BatchNormOutput> {
    let (p, dims) = (layer.p, x.dims());
    let m = dims[0] * dims[2] * dims[3];
    let mean = (x.sum((0, 2, 3)).ctx(OP)? / m as f64).ctx(OP)?;
    let centered = x.broadcast_sub(&per_channel(&mean)?).ctx(OP)?;
    let sum_sq = centered.sqr().ctx(OP)?.sum((0, 2, 3)).ctx(OP)?;
    let inv_std = inv_std(&(&sum_sq / m as f64).ctx(OP)?, p.eps)?;
    let scale = (layer.weight * &inv_std).ctx(OP)?;
    let y = affine(&centered, &scale, layer.bias)?;
    let unbiased = (&sum_sq / (m - 1) as f64).ctx(OP)?;
    Ok(BatchNormOutput {
        y,
        running_mean: blend(layer.running_mean, &mean, p.momentum)?,
        running_var: blend(layer.running_var, &unbiased, p.momentum)?,
        mean,
        inv_std,
    })
}

/// `(x - running_mean) * scale + bias`, centred as the training form: the expanded
/// `x * scale + (bias - running_mean * scale)` rounds terms as large as `|x|`, not `|x - mean|`.
pub(super) fn eval(x: &Tensor, layer: &Layer<'_>) -> Result<Tensor> {
    let inv_std = inv_std(layer.running_var, layer.p.eps)?;
    let scale = (layer.weight * &inv_std).ctx(OP)?;
    let centered = x.broadcast_sub(&per_channel(layer.running_mean)?).ctx(OP)?;
    affine(&centered, &scale, layer.bias)
}

/// The gradients for normalisation by the batch's or the running statistics.
pub(super) fn backward(
    grad_y: &Tensor,
    x: &Tensor,
    weight: &Tensor,
    stats: Stats<'_>,
) -> Result<BatchNormGrads> {
    let running_inv_std;
    let (mean, inv_std, batch_stats) = match stats {
        Stats::Batch { mean, inv_std } => (mean, inv_std, true),
        Stats::Running(layer) => {
            running_inv_std = inv_std(layer.running_var, layer.p.eps)?;
            (layer.running_mean, &running_inv_std, false)
        }
    };
    let x_hat = x
        .broadcast_sub(&per_channel(mean)?)
        .ctx(OP)?
        .broadcast_mul(&per_channel(inv_std)?)
        .ctx(OP)?;
    let d_bias = grad_y.sum((0, 2, 3)).ctx(OP)?;
    let d_weight = (grad_y * &x_hat).ctx(OP)?.sum((0, 2, 3)).ctx(OP)?;
    let scale = (weight * inv_std).ctx(OP)?;
    let dx = if batch_stats {
        // dx = gamma * inv_std / m * (m*dy - sum(dy) - x_hat * sum(dy*x_hat))
        let dims = x.dims();
        let m = (dims[0] * dims[2] * dims[3]) as f64;
        ((grad_y * m)
            .ctx(OP)?
            .broadcast_sub(&per_channel(&d_bias)?)
            .ctx(OP)?
            - x_hat.broadcast_mul(&per_channel(&d_weight)?).ctx(OP)?)
        .ctx(OP)?
        .broadcast_mul(&per_channel(&(scale / m).ctx(OP)?)?)
        .ctx(OP)?
    } else {
        grad_y.broadcast_mul(&per_channel(&scale)?).ctx(OP)?
    };
    Ok(BatchNormGrads {
        x: dx,
        weight: d_weight,
        bias: d_bias,
    })
}
