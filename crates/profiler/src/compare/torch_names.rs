//! PyTorch's op names in wick's vocabulary: a top-level aten op of the forward pass, or
//! an autograd function of the backward pass, as the wick [`Kernel`] that does the same
//! work, so that a PyTorch run and a wick run of one model line up per op type.
//!
//! Where wick splits what PyTorch does in one op (a convolution's data and filter
//! gradients), [`comparable_type`] merges wick's rows for the comparison instead.

use wick_ops::{Activation, Kernel, KernelClass, KernelVariant};

/// One op of an imported trace, as wick names it.
#[derive(Debug, Clone, PartialEq)]
pub struct TorchOp {
    /// wick's kernel name, or PyTorch's own name when wick has no counterpart.
    pub name: String,
    /// Its class (element-wise for an op wick has no counterpart of).
    pub class: KernelClass,
    /// A convolution's kind (depthwise, grouped, 1x1).
    pub variant: Option<KernelVariant>,
}

impl TorchOp {
    fn kernel(kernel: Kernel) -> Self {
        TorchOp {
            name: kernel.name(wick_ops::DeviceKind::Cpu).into(),
            class: kernel.class(),
            variant: None,
        }
    }

    fn unmatched(name: &str) -> Self {
        TorchOp {
            name: name.into(),
            class: KernelClass::Elementwise,
            variant: None,
        }
    }

    fn with_variant(mut self, variant: Option<KernelVariant>) -> Self {
        self.variant = variant;
        self
    }
}

/// The name of wick's merged convolution gradient row (data, filter and bias gradients,
/// which PyTorch computes in one `convolution_backward`).
pub const CONV_BACKWARD: &str = "ConvBackward";

/// A convolution's kind from its input `[N, C, H, W]` and weight `[O, C/groups, KH, KW]`
/// shapes, by wick's rule ([`Conv2dParams::variant`](wick_ops::Conv2dParams::variant)).
pub fn conv_variant(shapes: &[Vec<usize>]) -> Option<KernelVariant> {
    let (input, weight) = (shapes.first()?, shapes.get(1)?);
    let (&channels, &per_group) = (input.get(1)?, weight.get(1)?);
    let groups = channels / per_group.max(1);
    match weight.as_slice() {
        [_, 1, _, _] if groups > 1 => Some(KernelVariant::DepthwiseConv),
        _ if groups > 1 => Some(KernelVariant::GroupedConv),
        [_, _, 1, 1] => Some(KernelVariant::PointwiseConv),
        _ => None,
    }
}

/// A top-level aten op of the forward pass (`aten::conv2d`) with its input shapes and
/// the text of its scalar arguments (the trace's "Concrete Inputs", empty when absent).
pub fn forward_op(name: &str, shapes: &[Vec<usize>], scalars: &[String]) -> TorchOp {
    use Kernel as K;
    let op = name.strip_prefix("aten::").unwrap_or(name);
    let activation = |a: Activation| TorchOp::kernel(K::Activation(a));
    // An add of fewer than two tensors with dimensions (a batch norm's
    // `num_batches_tracked += 1`) is bookkeeping, not the model's addition.
    let tensors = shapes.iter().filter(|s| !s.is_empty()).count();
    match op.trim_end_matches('_') {
        "conv2d" | "convolution" | "_convolution" => {
            TorchOp::kernel(K::ConvForward).with_variant(conv_variant(shapes))
        }
        "batch_norm" => match scalars.get(5).map(String::as_str) {
            Some("False") => TorchOp::kernel(K::BatchNormForwardInference),
            _ => TorchOp::kernel(K::BatchNormForwardTraining),
        },
        "relu" => TorchOp::kernel(K::ReLU),
        "hardtanh" => activation(Activation::Relu6),
        "gelu" => activation(Activation::Gelu),
        "silu" => activation(Activation::Silu),
        "sigmoid" => activation(Activation::Sigmoid),
        "tanh" => activation(Activation::Tanh),
        "hardswish" => activation(Activation::Hardswish),
        "hardsigmoid" => activation(Activation::Hardsigmoid),
        "leaky_relu" => activation(Activation::LeakyRelu),
        "max_pool2d" | "avg_pool2d" => TorchOp::kernel(K::PoolingForward),
        "adaptive_avg_pool2d" if scalars.get(1).map(String::as_str) == Some("[1, 1]") => {
            TorchOp::kernel(K::GlobalAvgPoolForward)
        }
        "adaptive_avg_pool2d" => TorchOp::kernel(K::PoolingForward),
        "add" if tensors >= 2 => TorchOp::kernel(K::Add),
        "flatten" | "view" | "reshape" => TorchOp::kernel(K::Reshape),
        "linear" => TorchOp::kernel(K::LinearForward),
        "cross_entropy_loss" => TorchOp::kernel(K::SoftmaxCrossEntropyForward),
        "dropout" | "native_dropout" => TorchOp::kernel(K::Dropout),
        "layer_norm" => TorchOp::kernel(K::LayerNormForward),
        // Its backward on the CPU is the composite's chain (pow, mean, rsqrt, mul).
        "rms_norm" => TorchOp::kernel(K::RMSNormForward),
        "group_norm" => TorchOp::kernel(K::GroupNormForward),
        "softmax" => TorchOp::kernel(K::SoftmaxForward),
        "cat" => TorchOp::kernel(K::Concat),
        "permute" => TorchOp::kernel(K::Permute),
        "scaled_dot_product_attention" => TorchOp::kernel(K::AttentionForward),
        _ => TorchOp::unmatched(name),
    }
}

/// A top-level op of the backward pass: an autograd function (`ConvolutionBackward0`,
/// with the shapes of the forward op it differentiates, for a convolution's kind), or an
/// aten op the engine runs between them.
pub fn backward_op(name: &str, forward_shapes: &[Vec<usize>]) -> TorchOp {
    use Kernel as K;
    let function = name
        .strip_prefix("autograd::engine::evaluate_function: ")
        .unwrap_or(name);
    let activation = |a: Activation| TorchOp::kernel(K::ActivationBackward(a));
    match function.trim_end_matches(char::is_numeric) {
        "ConvolutionBackward" | "MkldnnConvolutionBackward" => TorchOp {
            name: CONV_BACKWARD.into(),
            class: KernelClass::Convolution,
            variant: conv_variant(forward_shapes),
        },
        "NativeBatchNormBackward" | "CudnnBatchNormBackward" => {
            TorchOp::kernel(K::BatchNormBackward)
        }
        "ReluBackward" | "ThresholdBackward" => TorchOp::kernel(K::ReLUBackward),
        "HardtanhBackward" => activation(Activation::Relu6),
        "GeluBackward" => activation(Activation::Gelu),
        "SiluBackward" => activation(Activation::Silu),
        "SigmoidBackward" => activation(Activation::Sigmoid),
        "TanhBackward" => activation(Activation::Tanh),
        "HardswishBackward" => activation(Activation::Hardswish),
        "HardsigmoidBackward" => activation(Activation::Hardsigmoid),
        "LeakyReluBackward" => activation(Activation::LeakyRelu),
        "MaxPool2DWithIndicesBackward" | "AvgPool2DBackward" => TorchOp::kernel(K::PoolingBackward),
        "MeanBackward" | "AdaptiveAvgPool2DBackward" => TorchOp::kernel(K::GlobalAvgPoolBackward),
        "ViewBackward" | "ReshapeAliasBackward" | "UnsafeViewBackward" => {
            TorchOp::kernel(K::Reshape)
        }
        "AddmmBackward" | "TBackward" | "MmBackward" => TorchOp::kernel(K::LinearBackward),
        "NllLossBackward" | "LogSoftmaxBackward" => TorchOp::kernel(K::SoftmaxCrossEntropyBackward),
        "NativeDropoutBackward" => TorchOp::kernel(K::DropoutBackward),
        "NativeLayerNormBackward" => TorchOp::kernel(K::LayerNormBackward),
        "NativeGroupNormBackward" => TorchOp::kernel(K::GroupNormBackward),
        "SoftmaxBackward" => TorchOp::kernel(K::SoftmaxBackward),
        "CatBackward" => TorchOp::kernel(K::ConcatBackward),
        "PermuteBackward" => TorchOp::kernel(K::Permute),
        // The engine's sum of two gradients of one value (a residual's fan-out).
        _ if function == "aten::add" || function == "aten::add_" => {
            TorchOp::kernel(K::AccumulateGrad)
        }
        // The backward pass's root gradient, ones of the loss's shape.
        _ if function == "aten::ones_like" => TorchOp::kernel(K::LossGradSeed),
        _ => TorchOp::unmatched(function),
    }
}

/// An optimizer step (`Optimizer.step#SGD.step`) as wick's update kernel.
pub fn optimizer_op(name: &str) -> TorchOp {
    let class = name
        .strip_prefix("Optimizer.step#")
        .and_then(|s| s.split('.').next())
        .unwrap_or(name);
    match class {
        "SGD" => TorchOp::kernel(Kernel::SgdUpdate),
        "Adam" | "AdamW" => TorchOp::kernel(Kernel::AdamUpdate),
        _ => TorchOp {
            class: KernelClass::Optimizer,
            ..TorchOp::unmatched(name)
        },
    }
}

/// A wick op type's row name when compared with an imported PyTorch run: the
/// convolution's gradients as one row (with the kind's label kept), and a multi-tensor
/// update as the update it merges.
pub fn comparable_type(type_name: &str) -> String {
    for part in ["ConvBackwardData", "ConvBackwardFilter", "ConvBackwardBias"] {
        if let Some(rest) = type_name.strip_prefix(part) {
            return format!("{CONV_BACKWARD}{rest}");
        }
    }
    match type_name.strip_suffix("MultiTensor") {
        Some(update) => update.to_string(),
        None => type_name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn convolutions_keep_their_kind_and_their_gradients_merge() {
        let dw = forward_op(
            "aten::conv2d",
            &[vec![8, 32, 16, 16], vec![32, 1, 3, 3]],
            &[],
        );
        assert_eq!(dw.name, "ConvForward");
        assert_eq!(dw.variant, Some(KernelVariant::DepthwiseConv));
        let pw = backward_op(
            "autograd::engine::evaluate_function: ConvolutionBackward0",
            &[vec![8, 32, 16, 16], vec![64, 32, 1, 1]],
        );
        assert_eq!(
            (pw.name.as_str(), pw.variant),
            (CONV_BACKWARD, Some(KernelVariant::PointwiseConv))
        );
        assert_eq!(
            comparable_type("ConvBackwardFilter (1x1)"),
            "ConvBackward (1x1)"
        );
        assert_eq!(comparable_type("SgdUpdateMultiTensor"), "SgdUpdate");
        assert_eq!(comparable_type("ReLU"), "ReLU");
    }

    #[test]
    fn bookkeeping_and_unknown_ops_keep_their_torch_names() {
        let counter = forward_op("aten::add_", &[vec![], vec![], vec![]], &[]);
        assert_eq!(counter.name, "aten::add_");
        let residual = forward_op("aten::add_", &[vec![2, 8], vec![2, 8], vec![]], &[]);
        assert_eq!(residual.name, "Add");
        assert_eq!(backward_op("AddBackward0", &[]).name, "AddBackward0");
        assert_eq!(forward_op("aten::hardtanh_", &[vec![1]], &[]).name, "ReLU6");
        assert_eq!(optimizer_op("Optimizer.step#SGD.step").name, "SgdUpdate");
        assert_eq!(
            optimizer_op("Optimizer.step#Lion.step").class,
            KernelClass::Optimizer
        );
    }
}
