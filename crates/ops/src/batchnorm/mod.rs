//! 2-D batch normalisation over (N, H, W) per channel, as PyTorch's `nn.BatchNorm2d`.
//!
//! Training mode normalises with the batch statistics (biased variance) and returns the
//! updated running statistics (unbiased variance, momentum) as new tensors, leaving the
//! old ones untouched: no hidden side effects. Inference mode uses the running statistics.
//!
//! `params` holds the settings and shape checks, this file the public functions; `cpu`
//! holds wick's CPU kernels and `generic` the device-generic path (candle's tensor ops).

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
mod generic;
mod params;
pub mod sync;

#[cfg(feature = "cuda")]
use params::has_cuda_kernel;
use params::{check_per_channel, Layer, OutputGrad, Stats, OP};
pub use params::{BatchNorm2dParams, BatchNormGrads, BatchNormOutput};

use candle_core::{DType, Tensor};

use crate::error::{CandleContext, Result};
use crate::route::{route, Route};

/// Batch norm forward in training mode (`BatchNormForwardTraining`).
pub fn batch_norm_train(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    running_mean: &Tensor,
    running_var: &Tensor,
    p: &BatchNorm2dParams,
) -> Result<BatchNormOutput> {
    train(x, [weight, bias, running_mean, running_var], p, false)
}

/// Batch norm then ReLU in training mode (`BatchNormReLUForwardTraining`): the output
/// pass writes `relu(bn(x))` directly (`y` holds it), saving ReLU's separate pass. The
/// statistics are batch norm's, as without the ReLU.
pub fn batch_norm_relu_train(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    running_mean: &Tensor,
    running_var: &Tensor,
    p: &BatchNorm2dParams,
) -> Result<BatchNormOutput> {
    train(x, [weight, bias, running_mean, running_var], p, true)
}

fn train(
    x: &Tensor,
    per_channel: [&Tensor; 4],
    p: &BatchNorm2dParams,
    relu: bool,
) -> Result<BatchNormOutput> {
    let (layer, [n, _, h, w]) = Layer::checked(x, per_channel, p)?;
    if n * h * w < 2 {
        return Err(crate::invalid!(
            OP,
            "training mode needs more than one value per channel, input {:?}",
            x.dims()
        ));
    }
    match route(x.device()) {
        Route::Cpu => cpu::train(x, &layer, relu),
        #[cfg(feature = "cuda")]
        Route::Cuda if has_cuda_kernel(x) => cuda::batch_norm_train(
            OP,
            x,
            [
                layer.weight,
                layer.bias,
                layer.running_mean,
                layer.running_var,
            ],
            layer.p,
            relu,
        ),
        Route::Cuda | Route::Generic => {
            let mut out = generic::train(x, &layer)?;
            if relu {
                out.y = crate::relu::relu(&out.y)?;
            }
            Ok(out)
        }
    }
}

/// Folds an inference-mode batch norm into the convolution before it (no conv bias):
/// `bn(conv(x, w)) = conv(x, w * s) + (bias - running_mean * s)` per output channel, with
/// `s = weight / sqrt(running_var + eps)`. Computed in f64, then cast to the weight's
/// dtype: the folded weights and bias are the exact ones rounded once. Returns the folded
/// weight and the bias.
pub fn fold_into_conv(
    conv_weight: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    running_mean: &Tensor,
    running_var: &Tensor,
    p: &BatchNorm2dParams,
) -> Result<(Tensor, Tensor)> {
    let c = conv_weight.dims().first().copied().unwrap_or(0);
    let shape = [c, 1, 1, 1];
    p.output_shape(
        &[1, c, 1, 1],
        &[
            ("weight", weight.dims()),
            ("bias", bias.dims()),
            ("running_mean", running_mean.dims()),
            ("running_var", running_var.dims()),
        ],
    )?;
    let f64_ = |t: &Tensor| t.to_dtype(DType::F64).ctx(OP);
    let scale = f64_(weight)?
        .div(
            &f64_(running_var)?
                .affine(1.0, p.eps)
                .ctx(OP)?
                .sqrt()
                .ctx(OP)?,
        )
        .ctx(OP)?;
    let folded = f64_(conv_weight)?
        .broadcast_mul(&scale.reshape(shape.as_slice()).ctx(OP)?)
        .ctx(OP)?
        .to_dtype(conv_weight.dtype())
        .ctx(OP)?;
    let shift = f64_(bias)?
        .sub(&f64_(running_mean)?.mul(&scale).ctx(OP)?)
        .ctx(OP)?
        .to_dtype(conv_weight.dtype())
        .ctx(OP)?;
    Ok((folded, shift))
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
    let (layer, _) = Layer::checked(x, [weight, bias, running_mean, running_var], p)?;
    match route(x.device()) {
        Route::Cpu => cpu::eval(x, &layer),
        #[cfg(feature = "cuda")]
        Route::Cuda if has_cuda_kernel(x) => cuda::batch_norm_eval(
            OP,
            x,
            [
                layer.weight,
                layer.bias,
                layer.running_mean,
                layer.running_var,
            ],
            layer.p.eps,
        ),
        Route::Cuda | Route::Generic => generic::eval(x, &layer),
    }
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
    let stats = batch_stats(x, weight, mean, inv_std)?;
    backward(OutputGrad::plain(grad_y), x, weight, stats)
}

/// The saved batch statistics, checked against the input and the weight.
fn batch_stats<'a>(
    x: &Tensor,
    weight: &Tensor,
    mean: &'a Tensor,
    inv_std: &'a Tensor,
) -> Result<Stats<'a>> {
    check_per_channel(
        x.dims(),
        &[
            ("weight", weight.dims()),
            ("mean", mean.dims()),
            ("inv_std", inv_std.dims()),
        ],
    )?;
    Ok(Stats::Batch { mean, inv_std })
}

/// The backward of [`batch_norm_relu_train`] (`BatchNormReLUBackward`): ReLU's mask
/// folded into batch norm's backward. `grad_z` is the gradient of the ReLU output `z`;
/// where `z <= 0` no gradient passes (as [`relu_backward`](crate::relu::relu_backward),
/// so exactly 0 passes none), read on the fly instead of written out by a separate pass.
pub fn batch_norm_relu_train_backward(
    grad_z: &Tensor,
    z: &Tensor,
    x: &Tensor,
    weight: &Tensor,
    mean: &Tensor,
    inv_std: &Tensor,
) -> Result<BatchNormGrads> {
    let stats = batch_stats(x, weight, mean, inv_std)?;
    crate::shape::same(OP, "ReLU output", z.dims(), "input", x.dims())?;
    let gz = OutputGrad {
        grad: grad_z,
        relu_out: Some(z),
    };
    backward(gz, x, weight, stats)
}

/// Batch norm backward after an inference-mode forward (`BatchNormBackward`): the
/// statistics are constants.
pub fn batch_norm_eval_backward(
    grad_y: &Tensor,
    x: &Tensor,
    weight: &Tensor,
    running_mean: &Tensor,
    running_var: &Tensor,
    p: &BatchNorm2dParams,
) -> Result<BatchNormGrads> {
    // The backward does not read the bias; the weight stands in for its shape check.
    let (layer, _) = Layer::checked(x, [weight, weight, running_mean, running_var], p)?;
    backward(OutputGrad::plain(grad_y), x, weight, Stats::Running(&layer))
}

/// Checks the output gradient against the input and runs the backward kernel.
fn backward(
    gy: OutputGrad<'_>,
    x: &Tensor,
    weight: &Tensor,
    stats: Stats<'_>,
) -> Result<BatchNormGrads> {
    crate::shape::same(OP, "output gradient", gy.grad.dims(), "input", x.dims())?;
    match route(x.device()) {
        Route::Cpu => cpu::backward(gy, x, weight, stats),
        #[cfg(feature = "cuda")]
        Route::Cuda if has_cuda_kernel(x) && matches!(stats, Stats::Batch { .. }) => {
            let Stats::Batch { mean, inv_std } = stats else {
                unreachable!("matched above")
            };
            cuda::batch_norm_train_backward(OP, gy.grad, gy.relu_out, x, weight, mean, inv_std)
        }
        // The ReLU's mask applied first, as its own pass.
        Route::Cuda | Route::Generic => match gy.relu_out {
            Some(z) => {
                let masked = crate::relu::relu_backward(gy.grad, z)?;
                generic::backward(&masked, x, weight, stats)
            }
            None => generic::backward(gy.grad, x, weight, stats),
        },
    }
}
