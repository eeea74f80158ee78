//! The device-generic batch norm: candle's tensor ops, on every device (and on the CPU
//! under [`KernelPath::Generic`](crate::KernelPath)).

use candle_core::Tensor;

use super::{BatchNorm2dParams, BatchNormGrads, BatchNormOutput, Layer, OP};
use crate::error::{CandleContext, Result};
use crate::shape::nchw;

fn per_channel(t: &Tensor, c: usize) -> Result<Tensor> {
    t.reshape((1, c, 1, 1)).ctx(OP)
}

pub(super) fn train(x: &Tensor, layer: &Layer<'_>) -> Result<BatchNormOutput> {
    let (weight, bias, p) = (layer.weight, layer.bias, layer.p);
    let (running_mean, running_var) = (layer.running_mean, layer.running_var);
    let [n, c, h, w] = p.output_shape(
        x.dims(),
        &[
            ("weight", weight.dims()),
            ("bias", bias.dims()),
            ("running_mean", running_mean.dims()),
            ("running_var", running_var.dims()),
        ],
    )?;
    let m = n * h * w;
    let mean = (x.sum((0, 2, 3)).ctx(OP)? / m as f64).ctx(OP)?;
    let centered = x.broadcast_sub(&per_channel(&mean, c)?).ctx(OP)?;
    let sum_sq = centered.sqr().ctx(OP)?.sum((0, 2, 3)).ctx(OP)?;
    let var = (&sum_sq / m as f64).ctx(OP)?;
    let inv_std = (var + p.eps).ctx(OP)?.sqrt().ctx(OP)?.recip().ctx(OP)?;
    let scale = (weight * &inv_std).ctx(OP)?;
    let y = centered
        .broadcast_mul(&per_channel(&scale, c)?)
        .ctx(OP)?
        .broadcast_add(&per_channel(bias, c)?)
        .ctx(OP)?;
    let unbiased = (&sum_sq / (m - 1) as f64).ctx(OP)?;
    let mom = p.momentum;
    let running_mean = ((running_mean * (1.0 - mom)).ctx(OP)? + (&mean * mom).ctx(OP)?).ctx(OP)?;
    let running_var = ((running_var * (1.0 - mom)).ctx(OP)? + (unbiased * mom).ctx(OP)?).ctx(OP)?;
    Ok(BatchNormOutput {
        y,
        mean,
        inv_std,
        running_mean,
        running_var,
    })
}

pub(super) fn eval(x: &Tensor, layer: &Layer<'_>) -> Result<Tensor> {
    let (weight, bias, p) = (layer.weight, layer.bias, layer.p);
    let (running_mean, running_var) = (layer.running_mean, layer.running_var);
    let [_, c, _, _] = p.output_shape(
        x.dims(),
        &[
            ("weight", weight.dims()),
            ("bias", bias.dims()),
            ("running_mean", running_mean.dims()),
            ("running_var", running_var.dims()),
        ],
    )?;
    let (scale, shift) = eval_scale_shift(weight, bias, running_mean, running_var, p)?;
    x.broadcast_mul(&per_channel(&scale, c)?)
        .ctx(OP)?
        .broadcast_add(&per_channel(&shift, c)?)
        .ctx(OP)
}

/// The per-channel `scale` and `shift` with which inference-mode batch norm is `x*scale + shift`.
fn eval_scale_shift(
    weight: &Tensor,
    bias: &Tensor,
    running_mean: &Tensor,
    running_var: &Tensor,
    p: &BatchNorm2dParams,
) -> Result<(Tensor, Tensor)> {
    let inv_std = (running_var + p.eps)
        .ctx(OP)?
        .sqrt()
        .ctx(OP)?
        .recip()
        .ctx(OP)?;
    let scale = (weight * &inv_std).ctx(OP)?;
    let shift = (bias - (running_mean * &scale).ctx(OP)?).ctx(OP)?;
    Ok((scale, shift))
}

pub(super) fn train_backward(
    grad_y: &Tensor,
    x: &Tensor,
    weight: &Tensor,
    mean: &Tensor,
    inv_std: &Tensor,
) -> Result<BatchNormGrads> {
    let [n, c, h, w] = nchw(OP, "input", x.dims())?;
    crate::shape::same(OP, "output gradient", grad_y.dims(), "input", x.dims())?;
    let m = (n * h * w) as f64;
    let x_hat = x
        .broadcast_sub(&per_channel(mean, c)?)
        .ctx(OP)?
        .broadcast_mul(&per_channel(inv_std, c)?)
        .ctx(OP)?;
    let d_bias = grad_y.sum((0, 2, 3)).ctx(OP)?;
    let d_weight = (grad_y * &x_hat).ctx(OP)?.sum((0, 2, 3)).ctx(OP)?;
    // dx = gamma * inv_std / m * (m*dy - sum(dy) - x_hat * sum(dy*x_hat))
    let k = ((weight * inv_std).ctx(OP)? / m).ctx(OP)?;
    let dx = ((grad_y * m)
        .ctx(OP)?
        .broadcast_sub(&per_channel(&d_bias, c)?)
        .ctx(OP)?
        - x_hat.broadcast_mul(&per_channel(&d_weight, c)?).ctx(OP)?)
    .ctx(OP)?
    .broadcast_mul(&per_channel(&k, c)?)
    .ctx(OP)?;
    Ok(BatchNormGrads {
        x: dx,
        weight: d_weight,
        bias: d_bias,
    })
}

pub(super) fn eval_backward(
    grad_y: &Tensor,
    x: &Tensor,
    layer: &Layer<'_>,
) -> Result<BatchNormGrads> {
    let (weight, p) = (layer.weight, layer.p);
    let (running_mean, running_var) = (layer.running_mean, layer.running_var);
    let [_, c, _, _] = nchw(OP, "input", x.dims())?;
    crate::shape::same(OP, "output gradient", grad_y.dims(), "input", x.dims())?;
    let inv_std = (running_var + p.eps)
        .ctx(OP)?
        .sqrt()
        .ctx(OP)?
        .recip()
        .ctx(OP)?;
    let x_hat = x
        .broadcast_sub(&per_channel(running_mean, c)?)
        .ctx(OP)?
        .broadcast_mul(&per_channel(&inv_std, c)?)
        .ctx(OP)?;
    let d_bias = grad_y.sum((0, 2, 3)).ctx(OP)?;
    let d_weight = (grad_y * &x_hat).ctx(OP)?.sum((0, 2, 3)).ctx(OP)?;
    let scale = (weight * &inv_std).ctx(OP)?;
    let dx = grad_y.broadcast_mul(&per_channel(&scale, c)?).ctx(OP)?;
    Ok(BatchNormGrads {
        x: dx,
        weight: d_weight,
        bias: d_bias,
    })
}
