//! 2-D batch normalisation over (N, H, W) per channel, as PyTorch's `nn.BatchNorm2d`.
//!
//! Training mode normalises with the batch statistics (biased variance) and returns the
//! updated running statistics (unbiased variance, momentum) as new tensors, leaving the
//! old ones untouched: no hidden side effects. Inference mode uses the running statistics.

use candle_core::Tensor;

use crate::error::{CandleContext, OpError, Result};
use crate::shape::nchw;

const OP: &str = "batch_norm";

/// The settings of a batch norm layer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchNorm2dParams {
    /// Added to the variance before the square root.
    pub eps: f64,
    /// Weight of the new batch statistic in the running statistics (PyTorch's `momentum`).
    pub momentum: f64,
}

impl Default for BatchNorm2dParams {
    fn default() -> Self {
        BatchNorm2dParams {
            eps: 1e-5,
            momentum: 0.1,
        }
    }
}

/// What a training-mode forward returns.
#[derive(Debug, Clone)]
pub struct BatchNormOutput {
    /// The normalised, scaled and shifted output, contiguous, shape of the input.
    pub y: Tensor,
    /// The batch mean per channel, shape [C] (saved for the backward pass).
    pub mean: Tensor,
    /// 1 / sqrt(biased batch variance + eps) per channel, shape [C] (saved for the backward pass).
    pub inv_std: Tensor,
    /// The running mean after this batch's update.
    pub running_mean: Tensor,
    /// The running variance after this batch's update (with the unbiased batch variance).
    pub running_var: Tensor,
}

/// The gradients of a batch norm layer.
#[derive(Debug, Clone)]
pub struct BatchNormGrads {
    /// Gradient of the input.
    pub x: Tensor,
    /// Gradient of the scale (gamma).
    pub weight: Tensor,
    /// Gradient of the shift (beta).
    pub bias: Tensor,
}

impl BatchNorm2dParams {
    /// Checks an input shape against the per-channel parameter shapes and returns the
    /// output shape (the input's).
    pub fn output_shape(
        &self,
        input: &[usize],
        channel_params: &[(&str, &[usize])],
    ) -> Result<[usize; 4]> {
        let dims = nchw(OP, "input", input)?;
        for (name, shape) in channel_params {
            if *shape != [dims[1]] {
                return Err(OpError::invalid(
                    OP,
                    format!(
                        "{name} must have shape [{}] for input {input:?}, got {shape:?}",
                        dims[1]
                    ),
                ));
            }
        }
        if self.eps.is_nan() || self.eps <= 0.0 {
            return Err(OpError::invalid(
                OP,
                format!("eps must be positive, got {}", self.eps),
            ));
        }
        Ok(dims)
    }

    /// FLOPs of the forward pass (statistics, normalisation, scale and shift): about 8 per element.
    pub fn flops(&self, input: &[usize]) -> u64 {
        8 * input.iter().product::<usize>() as u64
    }
}

fn per_channel(t: &Tensor, c: usize) -> Result<Tensor> {
    t.reshape((1, c, 1, 1)).ctx(OP)
}

/// Batch norm forward in training mode (`BatchNormForwardTraining`).
pub fn batch_norm_train(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    running_mean: &Tensor,
    running_var: &Tensor,
    p: &BatchNorm2dParams,
) -> Result<BatchNormOutput> {
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
    if m < 2 {
        return Err(OpError::invalid(
            OP,
            format!(
                "training mode needs more than one value per channel, input {:?}",
                x.dims()
            ),
        ));
    }
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

/// Batch norm forward in inference mode (`BatchNormForwardInference`): normalises with
/// the running statistics.
pub fn batch_norm_eval(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    running_mean: &Tensor,
    running_var: &Tensor,
    p: &BatchNorm2dParams,
) -> Result<Tensor> {
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

/// Batch norm backward after a training-mode forward (`BatchNormBackward`), from the
/// saved batch `mean` and `inv_std`.
pub fn batch_norm_train_backward(
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

/// Batch norm backward after an inference-mode forward: the statistics are constants.
pub fn batch_norm_eval_backward(
    grad_y: &Tensor,
    x: &Tensor,
    weight: &Tensor,
    running_mean: &Tensor,
    running_var: &Tensor,
    p: &BatchNorm2dParams,
) -> Result<BatchNormGrads> {
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
