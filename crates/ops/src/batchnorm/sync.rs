//! Synchronised batch norm's pieces (PyTorch's `SyncBatchNorm`): each data-parallel
//! replica computes per-channel partial sums over its shard, the caller sums them over the
//! replicas (a collective this crate knows nothing about), and the normalisation or the
//! input gradient is then computed from the sums over the whole batch. With one replica
//! these give [`batch_norm_train`](super::batch_norm_train)'s results.
//!
//! Device-generic (candle's tensor ops); the sums are `[C]` tensors.

use candle_core::{DType, Tensor};

use super::params::{
    check_per_channel, BatchNorm2dParams, BatchNormGrads, BatchNormOutput, Layer, OP,
};
use crate::error::{CandleContext, OpError, Result};
use crate::shape::nchw;

/// A `[C]` tensor as `[1, C, 1, 1]`.
fn per_channel(t: &Tensor) -> Result<Tensor> {
    t.reshape((1, t.elem_count(), 1, 1)).ctx(OP)
}

/// Values per channel in `x` (N·H·W).
pub fn count_per_channel(x: &Tensor) -> Result<usize> {
    let [n, _, h, w] = nchw(OP, "input", x.dims())?;
    Ok(n * h * w)
}

/// Σ x per channel, shape `[C]`.
pub fn channel_sums(x: &Tensor) -> Result<Tensor> {
    nchw(OP, "input", x.dims())?;
    x.sum((0, 2, 3)).ctx(OP)
}

/// Σ (x - mean)² per channel, for the whole batch's `mean`.
pub fn centered_square_sums(x: &Tensor, mean: &Tensor) -> Result<Tensor> {
    check_per_channel(x.dims(), &[("mean", mean.dims())])?;
    x.broadcast_sub(&per_channel(mean)?)
        .ctx(OP)?
        .sqr()
        .ctx(OP)?
        .sum((0, 2, 3))
        .ctx(OP)
}

/// The whole batch's statistics, as the replicas' summed partial sums give them.
#[derive(Debug, Clone)]
pub struct GlobalStats {
    /// The mean per channel over every replica's shard.
    pub mean: Tensor,
    /// The biased variance per channel over every replica's shard.
    pub var: Tensor,
    /// Values per channel over every replica (N·H·W summed); more than 1.
    pub count: usize,
}

/// Forward in training mode from the whole batch's statistics: `x` normalised, scaled and
/// shifted (then ReLU with `relu`), and the running statistics updated with them, as
/// [`batch_norm_train`](super::batch_norm_train) does for one replica.
pub fn train_from_stats(
    x: &Tensor,
    [weight, bias, running_mean, running_var]: [&Tensor; 4],
    p: &BatchNorm2dParams,
    stats: &GlobalStats,
    relu: bool,
) -> Result<BatchNormOutput> {
    let (layer, _) = Layer::checked(x, [weight, bias, running_mean, running_var], p)?;
    check_per_channel(
        x.dims(),
        &[("mean", stats.mean.dims()), ("var", stats.var.dims())],
    )?;
    if stats.count < 2 {
        return Err(crate::invalid!(
            OP,
            "training mode needs more than one value per channel over all replicas, got {}",
            stats.count
        ));
    }
    let inv_std = (&stats.var + p.eps)
        .ctx(OP)?
        .sqrt()
        .ctx(OP)?
        .recip()
        .ctx(OP)?;
    let scale = (weight * &inv_std).ctx(OP)?;
    let y = x
        .broadcast_sub(&per_channel(&stats.mean)?)
        .ctx(OP)?
        .broadcast_mul(&per_channel(&scale)?)
        .ctx(OP)?
        .broadcast_add(&per_channel(bias)?)
        .ctx(OP)?;
    let y = if relu { crate::relu::relu(&y)? } else { y };
    let n = stats.count as f64;
    let unbiased = (&stats.var * (n / (n - 1.0))).ctx(OP)?;
    let blend = |running: &Tensor, batch: &Tensor| -> Result<Tensor> {
        ((running * (1.0 - p.momentum)).ctx(OP)? + (batch * p.momentum).ctx(OP)?).ctx(OP)
    };
    Ok(BatchNormOutput {
        y: y.contiguous().ctx(OP)?,
        running_mean: blend(layer.running_mean, &stats.mean)?,
        running_var: blend(layer.running_var, &unbiased)?,
        mean: stats.mean.clone(),
        inv_std,
    })
}

/// The output gradient that reaches batch norm: `grad_y`, or with a fused ReLU's output
/// `relu_out`, `grad_y` where `relu_out > 0` and 0 elsewhere.
pub fn masked_grad(grad_y: &Tensor, relu_out: Option<&Tensor>) -> Result<Tensor> {
    match relu_out {
        Some(z) => {
            crate::shape::same(
                OP,
                "ReLU output",
                z.dims(),
                "output gradient",
                grad_y.dims(),
            )?;
            crate::relu::relu_backward(grad_y, z)
        }
        None => Ok(grad_y.clone()),
    }
}

/// This replica's partial sums for the backward pass: Σ dy and Σ dy·x̂ per channel, with
/// x̂ = (x - mean)·inv_std from the whole batch's statistics. `grad_y` is the output
/// gradient after any ReLU mask ([`masked_grad`]). Returns `(Σ dy, Σ dy·x̂)`; they are
/// also this replica's bias and weight gradients.
pub fn backward_sums(
    grad_y: &Tensor,
    x: &Tensor,
    mean: &Tensor,
    inv_std: &Tensor,
) -> Result<(Tensor, Tensor)> {
    crate::shape::same(OP, "output gradient", grad_y.dims(), "input", x.dims())?;
    check_per_channel(
        x.dims(),
        &[("mean", mean.dims()), ("inv_std", inv_std.dims())],
    )?;
    let x_hat = x_hat(x, mean, inv_std)?;
    let sum_dy = grad_y.sum((0, 2, 3)).ctx(OP)?;
    let sum_dy_xhat = (grad_y * &x_hat).ctx(OP)?.sum((0, 2, 3)).ctx(OP)?;
    Ok((sum_dy, sum_dy_xhat))
}

fn x_hat(x: &Tensor, mean: &Tensor, inv_std: &Tensor) -> Result<Tensor> {
    x.broadcast_sub(&per_channel(mean)?)
        .ctx(OP)?
        .broadcast_mul(&per_channel(inv_std)?)
        .ctx(OP)
}

/// The sums of [`backward_sums`] over every replica, and the values per channel over
/// every replica.
#[derive(Debug, Clone)]
pub struct GlobalGradSums {
    /// Σ dy per channel over every replica.
    pub sum_dy: Tensor,
    /// Σ dy·x̂ per channel over every replica.
    pub sum_dy_xhat: Tensor,
    /// Values per channel over every replica.
    pub count: usize,
}

/// The gradients of this replica: the input's from the whole batch's sums (PyTorch
/// SyncBatchNorm's rule, `dx = w·inv_std·(dy - Σdy/M - x̂·Σdy·x̂/M)`), and the weight's and
/// bias's as this replica's own partial sums (`local`), which the data-parallel gradient
/// all-reduce then averages like every other parameter gradient.
pub fn backward_from_sums(
    grad_y: &Tensor,
    x: &Tensor,
    weight: &Tensor,
    mean: &Tensor,
    inv_std: &Tensor,
    local: (Tensor, Tensor),
    global: &GlobalGradSums,
) -> Result<BatchNormGrads> {
    check_per_channel(
        x.dims(),
        &[
            ("weight", weight.dims()),
            ("Σ dy", global.sum_dy.dims()),
            ("Σ dy·x̂", global.sum_dy_xhat.dims()),
        ],
    )?;
    if global.count == 0 {
        return Err(OpError::invalid(
            OP,
            "no values per channel over all replicas",
        ));
    }
    let m = global.count as f64;
    let x_hat = x_hat(x, mean, inv_std)?;
    let scale = (weight * inv_std).ctx(OP)?;
    let dx = grad_y
        .broadcast_sub(&per_channel(&(&global.sum_dy / m).ctx(OP)?)?)
        .ctx(OP)?
        .sub(
            &x_hat
                .broadcast_mul(&per_channel(&(&global.sum_dy_xhat / m).ctx(OP)?)?)
                .ctx(OP)?,
        )
        .ctx(OP)?
        .broadcast_mul(&per_channel(&scale)?)
        .ctx(OP)?;
    let (bias, weight) = local;
    Ok(BatchNormGrads {
        x: dx,
        weight,
        bias,
    })
}

/// A `[C]` f32 tensor's values, for a collective.
pub fn to_host(t: &Tensor) -> Result<Vec<f32>> {
    t.to_dtype(DType::F32).ctx(OP)?.to_vec1::<f32>().ctx(OP)
}

/// `[C]` values from a collective as a tensor like `like` (its dtype and device).
pub fn from_host(values: &[f32], like: &Tensor) -> Result<Tensor> {
    Tensor::from_slice(values, values.len(), like.device())
        .ctx(OP)?
        .to_dtype(like.dtype())
        .ctx(OP)
}
