//! The fused inference convolution that the graph passes make: a convolution with its
//! epilogue (bias, or a batch norm folded into its weights; a residual add; ReLU) in one
//! node (kernel `ConvBiasActivationForward`, in `wick_ops::conv::conv2d_fused`). It is
//! never recorded directly: see [`passes`](crate::passes).

use std::sync::Mutex;

use candle_core::{Tensor, TensorId};
use wick_ops::batchnorm::{self, BatchNorm2dParams};
use wick_ops::conv::{self, Conv2dParams, Epilogue};
use wick_ops::Kernel;

use crate::ir::{arg, one, Inputs, KernelResult, NodeOp};

const OP: &str = "conv2d_fused";

/// Where a fused convolution's per-channel bias comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BiasSource {
    /// No bias.
    None,
    /// The convolution's own bias: input 2.
    Bias,
    /// An inference batch norm folded into the weights: inputs 2..6 are its weight, bias,
    /// running mean and running variance.
    FoldedBatchNorm(BatchNorm2dParams),
}

impl BiasSource {
    /// How many inputs it takes after the weight.
    pub fn inputs(&self) -> usize {
        match self {
            BiasSource::None => 0,
            BiasSource::Bias => 1,
            BiasSource::FoldedBatchNorm(_) => 4,
        }
    }
}

/// A convolution with its epilogue, forward only. in: x, weight, the bias source's inputs,
/// then the residual if any; out: `relu?(conv(x, weight) + bias + residual)`.
///
/// A folded batch norm's weights are computed once and kept until one of the five tensors
/// they come from is replaced (the executor's `set` makes a new tensor, with a new id).
#[derive(Debug)]
pub struct ConvBiasActivation {
    /// Stride, padding, dilation, groups.
    pub params: Conv2dParams,
    /// Where the bias comes from.
    pub bias: BiasSource,
    /// Whether the residual (the last input) is added.
    pub residual: bool,
    /// Whether ReLU is applied last.
    pub relu: bool,
    /// The dtype a folded batch norm's weight is cast to after folding (autocast's
    /// bf16: the fold runs on the f32 master weight, then rounds once).
    pub folded_weight_dtype: Option<candle_core::DType>,
    folded: Mutex<Option<Folded>>,
}

/// A batch norm folded into a convolution, and the tensors it was computed from.
#[derive(Debug)]
struct Folded {
    from: [TensorId; 5],
    weight: Tensor,
    bias: Tensor,
}

impl ConvBiasActivation {
    /// A fused convolution with these settings.
    pub fn new(params: Conv2dParams, bias: BiasSource, residual: bool, relu: bool) -> Self {
        ConvBiasActivation {
            params,
            bias,
            residual,
            relu,
            folded_weight_dtype: None,
            folded: Mutex::new(None),
        }
    }

    /// The same convolution and bias with a residual and ReLU as given.
    pub fn with_epilogue(&self, residual: bool, relu: bool) -> Self {
        ConvBiasActivation {
            folded_weight_dtype: self.folded_weight_dtype,
            ..ConvBiasActivation::new(self.params, self.bias, residual, relu)
        }
    }

    /// The weight and bias to convolve with: the inputs, or the folded batch norm's.
    fn weight_and_bias(
        &self,
        inputs: &Inputs<'_>,
    ) -> std::result::Result<(Tensor, Option<Tensor>), wick_ops::OpError> {
        let w = arg(inputs, 1, OP)?;
        match self.bias {
            BiasSource::None => Ok((w.clone(), None)),
            BiasSource::Bias => Ok((w.clone(), Some(arg(inputs, 2, OP)?.clone()))),
            BiasSource::FoldedBatchNorm(p) => {
                let bn = |i| arg(inputs, i, OP);
                let (g, b, m, v) = (bn(2)?, bn(3)?, bn(4)?, bn(5)?);
                let from = [w.id(), g.id(), b.id(), m.id(), v.id()];
                let mut cache = self.folded.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(f) = cache.as_ref().filter(|f| f.from == from) {
                    return Ok((f.weight.clone(), Some(f.bias.clone())));
                }
                let (mut weight, bias) = batchnorm::fold_into_conv(w, g, b, m, v, &p)?;
                if let Some(dtype) = self.folded_weight_dtype {
                    weight = wick_ops::bf16::cast(&weight, dtype)?;
                }
                *cache = Some(Folded {
                    from,
                    weight: weight.clone(),
                    bias: bias.clone(),
                });
                Ok((weight, Some(bias)))
            }
        }
    }
}

impl NodeOp for ConvBiasActivation {
    fn kernel(&self) -> Kernel {
        Kernel::ConvBiasActivationForward
    }

    fn variant(&self, input_shapes: &[Vec<usize>]) -> Option<wick_ops::KernelVariant> {
        self.params.variant(input_shapes.get(1)?)
    }

    /// A folded batch norm keeps its folded weight (the convolution's size) and bias (the
    /// batch norm's bias's size).
    fn held_bytes(&self, input_bytes: &[u64]) -> u64 {
        match self.bias {
            BiasSource::FoldedBatchNorm(_) => {
                let at = |i: usize| input_bytes.get(i).copied().unwrap_or(0);
                at(1).saturating_add(at(3))
            }
            BiasSource::None | BiasSource::Bias => 0,
        }
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let (weight, bias) = self.weight_and_bias(inputs)?;
        let residual = if self.residual {
            Some(arg(inputs, 2 + self.bias.inputs(), OP)?)
        } else {
            None
        };
        let epilogue = Epilogue {
            bias: bias.as_ref(),
            residual,
            relu: self.relu,
        };
        one(conv::conv2d_fused(
            arg(inputs, 0, OP)?,
            &weight,
            &epilogue,
            &self.params,
        )?)
    }
}
