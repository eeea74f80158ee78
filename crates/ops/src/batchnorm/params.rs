//! Batch norm's settings, outputs and gradients, the shape checks every path shares, and
//! one layer's checked tensors ([`Layer`]) with the statistics a backward pass reads
//! ([`Stats`]).

use candle_core::Tensor;

use crate::error::Result;
use crate::shape::nchw;

pub(crate) const OP: &str = "batch_norm";

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
    /// The batch mean per channel, shape `[C]` (saved for the backward pass).
    pub mean: Tensor,
    /// 1 / sqrt(biased batch variance + eps) per channel, shape `[C]` (saved for the backward pass).
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
        check_per_channel(input, channel_params)?;
        if self.eps.is_nan() || self.eps <= 0.0 {
            return Err(crate::invalid!(
                OP,
                "eps must be positive, got {}",
                self.eps
            ));
        }
        Ok(dims)
    }

    /// Checks that a training-mode input has more than one value per channel (N, H and W
    /// multiply to more than 1): with one, the batch variance is 0 and the unbiased
    /// estimate that updates `running_var` divides by zero. PyTorch refuses the same inputs.
    pub fn check_training_input(&self, input: &[usize]) -> Result<()> {
        let [n, _, h, w] = nchw(OP, "input", input)?;
        if n * h * w <= 1 {
            return Err(crate::invalid!(OP, "training needs more than one value per channel (N x H x W > 1) to estimate the variance, got input {input:?}"));
        }
        Ok(())
    }

    /// FLOPs of the forward pass (statistics, normalisation, scale and shift): about 8 per element.
    pub fn flops(&self, input: &[usize]) -> u64 {
        crate::shape::flop_count(8, input)
    }

    /// FLOPs of the backward pass (two per-channel sums, then the input gradient): about 8
    /// per element, counted like the forward pass.
    pub fn backward_flops(&self, input: &[usize]) -> u64 {
        self.flops(input)
    }
}

/// Whether wick's CUDA kernels take `x`'s dtype (f32, f64, and bf16 and f16 computed in
/// float).
#[cfg(feature = "cuda")]
pub(crate) fn has_cuda_kernel(x: &Tensor) -> bool {
    crate::gpu::cuda::has_kernel_with_16_bit(x.dtype())
}

/// Checks that `input` is NCHW and each named per-channel shape is `[C]`.
pub(crate) fn check_per_channel(
    input: &[usize],
    channel_params: &[(&str, &[usize])],
) -> Result<()> {
    let c = nchw(OP, "input", input)?[1];
    match channel_params.iter().find(|(_, shape)| *shape != [c]) {
        Some((name, shape)) => Err(crate::invalid!(
            OP,
            "{name} must have shape [{c}] for input {input:?}, got {shape:?}"
        )),
        None => Ok(()),
    }
}

/// A batch norm layer's per-channel tensors and settings, as the implementations take them.
#[derive(Clone, Copy)]
pub(crate) struct Layer<'a> {
    pub(crate) weight: &'a Tensor,
    pub(crate) bias: &'a Tensor,
    pub(crate) running_mean: &'a Tensor,
    pub(crate) running_var: &'a Tensor,
    pub(crate) p: &'a BatchNorm2dParams,
}

impl<'a> Layer<'a> {
    /// The layer, after checking the input `x` against its per-channel tensors, and the
    /// input's dims.
    pub(crate) fn checked(
        x: &Tensor,
        [weight, bias, running_mean, running_var]: [&'a Tensor; 4],
        p: &'a BatchNorm2dParams,
    ) -> Result<(Self, [usize; 4])> {
        let channel = [
            ("weight", weight.dims()),
            ("bias", bias.dims()),
            ("running_mean", running_mean.dims()),
            ("running_var", running_var.dims()),
        ];
        let dims = p.output_shape(x.dims(), &channel)?;
        let layer = Layer {
            weight,
            bias,
            running_mean,
            running_var,
            p,
        };
        Ok((layer, dims))
    }
}

/// The output gradient batch norm's backward reads: `grad`, passing only where a fused
/// ReLU's output `relu_out` is positive when that is given.
#[derive(Clone, Copy)]
pub(crate) struct OutputGrad<'a> {
    pub(crate) grad: &'a Tensor,
    pub(crate) relu_out: Option<&'a Tensor>,
}

impl<'a> OutputGrad<'a> {
    /// A gradient no ReLU masks.
    pub(crate) fn plain(grad: &'a Tensor) -> Self {
        OutputGrad {
            grad,
            relu_out: None,
        }
    }
}

/// The statistics a forward pass normalised by, as its backward pass needs them.
#[derive(Clone, Copy)]
pub(crate) enum Stats<'a> {
    /// The batch's own (training): their gradient flows into the input's.
    Batch {
        mean: &'a Tensor,
        inv_std: &'a Tensor,
    },
    /// The layer's running statistics (inference): constants.
    Running(&'a Layer<'a>),
}
