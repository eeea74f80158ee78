//! Kernel names: what a profiler prints for each op, per device.
//!
//! On the CPU the names are plain (`ConvForward`, `ReLU`, `PoolingForward`); on CUDA the
//! ops that cuDNN runs carry cuDNN-style names (`cudnnConvForward`) and wick's own GPU
//! kernels `Gpu...` names (`GpuBatchNormForwardTraining`), as in SINGA's documented output.

use candle_core::Device;

use crate::activation::Activation;
use crate::broadcast::BinaryOp;
use crate::device_kind::DeviceKind;
pub use crate::kernel_class::{KernelClass, KernelPhase, KernelVariant};
use crate::regression_loss::ElementwiseLoss;
use crate::tensor::TensorKernel;

/// Every kernel wick-ops runs. A graph node carries one; [`Kernel::name`] gives the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// Convolution forward.
    ConvForward,
    /// Convolution forward with its epilogue fused: bias (batch norm folded in), residual
    /// add, ReLU (inference graphs after passes).
    ConvBiasActivationForward,
    /// Convolution input gradient.
    ConvBackwardData,
    /// Convolution weight gradient.
    ConvBackwardFilter,
    /// Convolution bias gradient.
    ConvBackwardBias,
    /// Batch norm forward with batch statistics (and running-statistics update).
    BatchNormForwardTraining,
    /// Batch norm forward with running statistics.
    BatchNormForwardInference,
    /// Batch norm input, weight and bias gradients.
    BatchNormBackward,
    /// Batch norm forward in training mode with ReLU fused into its output pass.
    BatchNormReLUForwardTraining,
    /// Batch norm backward with the fused ReLU's mask.
    BatchNormReLUBackward,
    /// Element-wise addition then ReLU, one pass.
    AddReLU,
    /// Communication: a bucket of gradients' sum over the data-parallel ranks, started.
    DistAllReduce,
    /// Communication: waiting for a bucket's all-reduce (the part backward did not hide).
    DistWait,
    /// Batch norm forward with statistics synchronised over the data-parallel ranks.
    SyncBatchNormForwardTraining,
    /// Batch norm backward with gradient sums synchronised over the data-parallel ranks.
    SyncBatchNormBackward,
    /// ReLU forward.
    ReLU,
    /// ReLU backward.
    ReLUBackward,
    /// Element-wise addition.
    Add,
    /// Max or average pooling forward.
    PoolingForward,
    /// Max or average pooling backward.
    PoolingBackward,
    /// Global average pooling forward.
    GlobalAvgPoolForward,
    /// Global average pooling backward.
    GlobalAvgPoolBackward,
    /// A reshape (flatten) or its inverse; no data moves.
    Reshape,
    /// Fully connected layer forward (x·Wᵀ + b).
    LinearForward,
    /// Fully connected layer input, weight and bias gradients.
    LinearBackward,
    /// Softmax cross-entropy loss forward.
    SoftmaxCrossEntropyForward,
    /// Softmax cross-entropy loss backward.
    SoftmaxCrossEntropyBackward,
    /// Gradient accumulation (sum of two gradients of one value).
    AccumulateGrad,
    /// Fused SGD update (weight decay, momentum, parameter step) of one parameter.
    SgdUpdate,
    /// The same SGD update of many parameters in one node (one launch on CUDA).
    SgdUpdateMultiTensor,
    /// An activation beyond ReLU (sigmoid, GELU, hardswish...).
    Activation(Activation),
    /// An activation's gradient.
    ActivationBackward(Activation),
    /// A bias add over the last dimension and an activation, fused by a pass.
    BiasActivation(Activation),
    /// Its gradient: the input's and the bias's.
    BiasActivationBackward(Activation),
    /// Element-wise arithmetic with broadcasting.
    Binary(BinaryOp),
    /// One operand's gradient of a broadcasting binary op.
    BinaryBackward(BinaryOp),
    /// Multiplication by a constant (forward, and its own gradient).
    Scale,
    /// Dropout forward (mask drawn and applied).
    Dropout,
    /// Dropout backward (the mask applied to the gradient).
    DropoutBackward,
    /// Concatenation along a dimension.
    Concat,
    /// One input's slice of a concatenation's gradient.
    ConcatBackward,
    /// A permutation of the dimensions (a copy in the new order).
    Permute,
    /// Softmax along a dimension.
    SoftmaxForward,
    /// Softmax's gradient.
    SoftmaxBackward,
    /// Layer norm forward.
    LayerNormForward,
    /// Layer norm's input, weight and bias gradients.
    LayerNormBackward,
    /// RMS norm forward.
    RMSNormForward,
    /// RMS norm's input and weight gradients.
    RMSNormBackward,
    /// Group norm forward.
    GroupNormForward,
    /// Group norm's input, weight and bias gradients.
    GroupNormBackward,
    /// A mean-reduced element-wise loss (MSE, BCE with logits).
    Loss(ElementwiseLoss),
    /// An element-wise loss's gradient.
    LossBackward(ElementwiseLoss),
    /// The gradient of the backward pass's root: ones of the loss's shape.
    LossGradSeed,
    /// Fused Adam or AdamW update of one parameter.
    AdamUpdate,
    /// The same Adam or AdamW update of many parameters in one node (one launch on CUDA).
    AdamUpdateMultiTensor,
    /// Global-norm gradient clipping over every gradient.
    ClipGradNorm,
    /// Dynamic loss scaling's unscale of every gradient, its non-finite check and its
    /// scale update (PyTorch's `GradScaler.unscale_` and `update`).
    UnscaleGradients,
    /// Transposed convolution forward.
    ConvTransposeForward,
    /// Transposed convolution input gradient (a convolution).
    ConvTransposeBackwardData,
    /// Transposed convolution weight gradient.
    ConvTransposeBackwardFilter,
    /// Upsampling (nearest or bilinear) forward.
    UpsampleForward,
    /// Upsampling backward.
    UpsampleBackward,
    /// Gradient accumulation: one micro-batch's gradient added to its accumulator.
    AccumulateMicroBatch,
    /// Gradient accumulation: the optimizer's update count from the step counter.
    UpdateCount,
    /// A user's own op, recorded through the public API.
    Custom(CustomKernel),
    /// An op of the tensor language (matmul, reductions, indexing, masks, ...).
    Tensor(TensorKernel),
    /// Fused scaled dot-product attention forward (output and log-sum-exp).
    AttentionForward,
    /// Fused scaled dot-product attention backward (the query, key and value gradients).
    AttentionBackward,
}

/// A user-defined kernel: its name (printed by profilers on every device), class and phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CustomKernel {
    /// The name profilers print, such as `"MyAttentionForward"`.
    pub name: &'static str,
    /// How profilers group it and advise on it.
    pub class: KernelClass,
    /// The part of the step it serves.
    pub phase: KernelPhase,
}

impl CustomKernel {
    /// A custom kernel named `name`, which may be made at run time (a `String`): each
    /// distinct name is interned once for the life of the process, so that [`Kernel`]
    /// stays `Copy` and hashable.
    pub fn new(name: impl AsRef<str>, class: KernelClass, phase: KernelPhase) -> Self {
        CustomKernel {
            name: intern(name.as_ref()),
            class,
            phase,
        }
    }
}

/// `name` as a `&'static str`, kept once per distinct name.
fn intern(name: &str) -> &'static str {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(known) = names.get(name) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.to_string().into_boxed_str());
    names.insert(leaked);
    leaked
}

impl Kernel {
    /// How many of candle's generic tensor ops the kernel runs on the CPU, for a kernel
    /// that wick runs as such a chain instead of a kernel of its own; each op reads and
    /// writes its tensors in a pass of its own. `None` for wick's own kernels (and for
    /// custom kernels, whose make-up wick cannot see).
    pub fn cpu_generic_ops(self) -> Option<u32> {
        match self {
            Kernel::GroupNormForward => Some(crate::norm::GROUP_NORM_OPS),
            Kernel::GroupNormBackward => Some(crate::norm::GROUP_NORM_BACKWARD_OPS),
            _ => None,
        }
    }

    /// The kernel's class.
    pub fn class(self) -> KernelClass {
        use Kernel::*;
        use KernelClass as C;
        match self {
            ConvForward | ConvBiasActivationForward => C::Convolution,
            ConvBackwardData | ConvBackwardFilter | ConvBackwardBias => C::Convolution,
            LinearForward | LinearBackward => C::Linear,
            BatchNormForwardTraining | BatchNormForwardInference => C::Normalization,
            BatchNormBackward | BatchNormReLUBackward => C::Normalization,
            BatchNormReLUForwardTraining => C::Normalization,
            // Synchronised batch norm waits for the other ranks' statistics.
            SyncBatchNormForwardTraining | SyncBatchNormBackward => C::Communication,
            DistAllReduce | DistWait => C::Communication,
            ReLU | ReLUBackward | Add | AddReLU | AccumulateGrad => C::Elementwise,
            PoolingForward | PoolingBackward => C::Pooling,
            GlobalAvgPoolForward | GlobalAvgPoolBackward => C::Pooling,
            Reshape => C::Reshape,
            SoftmaxCrossEntropyForward | SoftmaxCrossEntropyBackward => C::Loss,
            SgdUpdate | SgdUpdateMultiTensor | ClipGradNorm => C::Optimizer,
            AccumulateMicroBatch | UpdateCount | UnscaleGradients => C::Optimizer,
            AdamUpdate | AdamUpdateMultiTensor => C::Optimizer,
            Activation(_) | ActivationBackward(_) | Scale => C::Elementwise,
            BiasActivation(_) | BiasActivationBackward(_) => C::Elementwise,
            Binary(_) | BinaryBackward(_) => C::Elementwise,
            Dropout | DropoutBackward => C::Elementwise,
            Concat | ConcatBackward | Permute => C::Reshape,
            SoftmaxForward | SoftmaxBackward => C::Softmax,
            LayerNormForward | LayerNormBackward => C::LayerNorm,
            RMSNormForward | RMSNormBackward => C::LayerNorm,
            GroupNormForward | GroupNormBackward => C::Normalization,
            Loss(_) | LossBackward(_) | LossGradSeed => C::Loss,
            ConvTransposeForward | ConvTransposeBackwardData | ConvTransposeBackwardFilter => {
                C::Convolution
            }
            UpsampleForward | UpsampleBackward => C::Pooling,
            AttentionForward | AttentionBackward => C::Attention,
            Custom(k) => k.class,
            Tensor(t) => t.class(),
        }
    }

    /// The part of the training step the kernel serves; `None` for a view change
    /// ([`Kernel::Reshape`]), which serves forward and backward alike.
    pub fn phase(self) -> Option<KernelPhase> {
        use Kernel::*;
        Some(match self {
            ConvForward
            | ConvBiasActivationForward
            | LinearForward
            | BatchNormForwardTraining
            | BatchNormForwardInference
            | BatchNormReLUForwardTraining
            | SyncBatchNormForwardTraining
            | ReLU
            | Add
            | AddReLU
            | PoolingForward
            | GlobalAvgPoolForward
            | SoftmaxCrossEntropyForward
            | Activation(_)
            | BiasActivation(_)
            | Binary(_)
            | Dropout
            | Concat
            | SoftmaxForward
            | LayerNormForward
            | RMSNormForward
            | GroupNormForward
            | Loss(_)
            | ConvTransposeForward
            | AttentionForward
            | UpsampleForward => KernelPhase::Forward,
            ConvBackwardData
            | ConvBackwardFilter
            | ConvBackwardBias
            | LinearBackward
            | BatchNormBackward
            | BatchNormReLUBackward
            | SyncBatchNormBackward
            | ReLUBackward
            | PoolingBackward
            | GlobalAvgPoolBackward
            | SoftmaxCrossEntropyBackward
            | AccumulateGrad
            | DistAllReduce
            | DistWait
            | ActivationBackward(_)
            | BiasActivationBackward(_)
            | BinaryBackward(_)
            | DropoutBackward
            | ConcatBackward
            | SoftmaxBackward
            | LayerNormBackward
            | RMSNormBackward
            | GroupNormBackward
            | LossBackward(_)
            | LossGradSeed
            | ConvTransposeBackwardData
            | ConvTransposeBackwardFilter
            | AttentionBackward
            | UpsampleBackward => KernelPhase::Backward,
            SgdUpdate | SgdUpdateMultiTensor | ClipGradNorm => KernelPhase::Optimizer,
            AccumulateMicroBatch | UpdateCount | UnscaleGradients => KernelPhase::Optimizer,
            AdamUpdate | AdamUpdateMultiTensor => KernelPhase::Optimizer,
            Custom(k) => k.phase,
            Tensor(t) => return t.phase(),
            // Serves forward and backward alike, like a reshape.
            Reshape | Permute | Scale => return None,
        })
    }

    /// Whether the kernel is element-wise ([`KernelClass::Elementwise`]): memory-bound, one
    /// pass per element, a fusion candidate.
    pub fn is_elementwise(self) -> bool {
        self.class() == KernelClass::Elementwise
    }

    /// Whether the kernel talks to other data-parallel ranks (through MPI or NCCL, whose
    /// calls may be bound to the thread that set them up).
    pub fn communicates(self) -> bool {
        self.class() == KernelClass::Communication
    }

    /// The kernel's name on a device of kind `device`.
    pub fn name(self, device: DeviceKind) -> &'static str {
        match device {
            DeviceKind::Cpu | DeviceKind::Other => self.cpu_name(),
            DeviceKind::Cuda | DeviceKind::Cudnn => self.cuda_name(device == DeviceKind::Cudnn),
        }
    }

    /// The kernel's name on the CPU (and any device without names of its own).
    fn cpu_name(self) -> &'static str {
        use Kernel::*;
        match self {
            ConvForward => "ConvForward",
            ConvBiasActivationForward => "ConvBiasActivationForward",
            ConvBackwardData => "ConvBackwardData",
            ConvBackwardFilter => "ConvBackwardFilter",
            ConvBackwardBias => "ConvBackwardBias",
            BatchNormForwardTraining => "BatchNormForwardTraining",
            BatchNormForwardInference => "BatchNormForwardInference",
            BatchNormBackward => "BatchNormBackward",
            BatchNormReLUForwardTraining => "BatchNormReLUForwardTraining",
            BatchNormReLUBackward => "BatchNormReLUBackward",
            AddReLU => "AddReLU",
            DistAllReduce => "DistAllReduce",
            DistWait => "DistWait",
            SyncBatchNormForwardTraining => "DistSyncBatchNormForward",
            SyncBatchNormBackward => "DistSyncBatchNormBackward",
            ReLU => "ReLU",
            ReLUBackward => "ReLUBackward",
            Add => "Add",
            PoolingForward => "PoolingForward",
            PoolingBackward => "PoolingBackward",
            GlobalAvgPoolForward => "GlobalAvgPoolForward",
            GlobalAvgPoolBackward => "GlobalAvgPoolBackward",
            Reshape => "Reshape",
            LinearForward => "LinearForward",
            LinearBackward => "LinearBackward",
            SoftmaxCrossEntropyForward => "SoftmaxCrossEntropyForward",
            SoftmaxCrossEntropyBackward => "SoftmaxCrossEntropyBackward",
            AccumulateGrad => "AccumulateGrad",
            SgdUpdate => "SgdUpdate",
            SgdUpdateMultiTensor => "SgdUpdateMultiTensor",
            Activation(a) => a.name(),
            ActivationBackward(a) => a.backward_name(),
            BiasActivation(a) => a.bias_name(),
            BiasActivationBackward(a) => a.bias_backward_name(),
            Binary(op) => op.name(),
            BinaryBackward(op) => op.backward_name(),
            Scale => "Scale",
            Dropout => "DropoutForward",
            DropoutBackward => "DropoutBackward",
            Concat => "Concat",
            ConcatBackward => "ConcatBackward",
            Permute => "Permute",
            SoftmaxForward => "SoftmaxForward",
            SoftmaxBackward => "SoftmaxBackward",
            LayerNormForward => "LayerNormForward",
            LayerNormBackward => "LayerNormBackward",
            RMSNormForward => "RMSNormForward",
            RMSNormBackward => "RMSNormBackward",
            GroupNormForward => "GroupNormForward",
            GroupNormBackward => "GroupNormBackward",
            Loss(l) => l.name(),
            LossBackward(l) => l.backward_name(),
            LossGradSeed => "LossGradSeed",
            AdamUpdate => "AdamUpdate",
            AdamUpdateMultiTensor => "AdamUpdateMultiTensor",
            ClipGradNorm => "ClipGradNorm",
            AccumulateMicroBatch => "AccumulateMicroBatch",
            UpdateCount => "UpdateCount",
            UnscaleGradients => "UnscaleGradients",
            ConvTransposeForward => "ConvTransposeForward",
            ConvTransposeBackwardData => "ConvTransposeBackwardData",
            ConvTransposeBackwardFilter => "ConvTransposeBackwardFilter",
            UpsampleForward => "UpsampleForward",
            UpsampleBackward => "UpsampleBackward",
            AttentionForward => "AttentionForward",
            AttentionBackward => "AttentionBackward",
            Custom(k) => k.name,
            Tensor(t) => t.name(),
        }
    }

    /// The kernel's name on CUDA, `cudnn` when candle's convolutions run on cuDNN.
    fn cuda_name(self, cudnn: bool) -> &'static str {
        use Kernel::*;
        match self {
            ConvForward if cudnn => "cudnnConvForward",
            // candle has no cuDNN transposed convolution: the input gradient runs
            // candle's own conv_transpose2d kernel, and the weight gradient runs as a
            // cuDNN forward convolution of the input with the output gradient.
            ConvBackwardFilter if cudnn => "cudnnConvForwardAsBackwardFilter",
            ConvForward => "GpuConvForward",
            ConvBiasActivationForward => "GpuConvBiasActivationForward",
            ConvBackwardData => "GpuConvBackwardData",
            ConvBackwardFilter => "GpuConvBackwardFilter",
            ConvBackwardBias => "GpuConvBackwardBias",
            BatchNormForwardTraining => "GpuBatchNormForwardTraining",
            BatchNormForwardInference => "GpuBatchNormForwardInference",
            BatchNormBackward => "GpuBatchNormBackward",
            BatchNormReLUForwardTraining => "GpuBatchNormReLUForwardTraining",
            BatchNormReLUBackward => "GpuBatchNormReLUBackward",
            PoolingForward => "GpuPoolingForward",
            PoolingBackward => "GpuPoolingBackward",
            GlobalAvgPoolForward => "GpuGlobalAvgPoolForward",
            GlobalAvgPoolBackward => "GpuGlobalAvgPoolBackward",
            LinearForward => "GpuLinearForward",
            LinearBackward => "GpuLinearBackward",
            SoftmaxCrossEntropyForward => "GpuSoftmaxCrossEntropyForward",
            SoftmaxCrossEntropyBackward => "GpuSoftmaxCrossEntropyBackward",
            SgdUpdate => "GpuSgdUpdate",
            SgdUpdateMultiTensor => "GpuSgdUpdateMultiTensor",
            AdamUpdate => "GpuAdamUpdate",
            AdamUpdateMultiTensor => "GpuAdamUpdateMultiTensor",
            AttentionForward => "GpuAttentionForward",
            AttentionBackward => "GpuAttentionBackward",
            // Element-wise ops, reshapes and communication keep their CPU names.
            _ => self.cpu_name(),
        }
    }

    /// The kernel's name on `device`.
    pub fn name_on(self, device: &Device) -> &'static str {
        self.name(DeviceKind::of(device))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_device_and_cudnn() {
        use DeviceKind::{Cpu, Cuda, Cudnn};
        // Named after what runs: under cuDNN the data gradient is candle's own transposed
        // convolution, and the weight gradient a cuDNN forward convolution.
        let expected = [
            (Kernel::ConvForward, Cpu, "ConvForward"),
            (Kernel::ConvForward, Cudnn, "cudnnConvForward"),
            (Kernel::ConvForward, Cuda, "GpuConvForward"),
            (Kernel::ConvBackwardData, Cudnn, "GpuConvBackwardData"),
            (
                Kernel::ConvBackwardFilter,
                Cudnn,
                "cudnnConvForwardAsBackwardFilter",
            ),
            (
                Kernel::BatchNormForwardTraining,
                Cpu,
                "BatchNormForwardTraining",
            ),
            (
                Kernel::BatchNormForwardTraining,
                Cuda,
                "GpuBatchNormForwardTraining",
            ),
            (Kernel::PoolingForward, Cuda, "GpuPoolingForward"),
            (Kernel::PoolingBackward, Cpu, "PoolingBackward"),
            (Kernel::ReLU, Cudnn, "ReLU"),
            (Kernel::Add, Cuda, "Add"),
        ];
        for (kernel, device, name) in expected {
            assert_eq!(kernel.name(device), name, "{kernel:?} on {device:?}");
        }
        assert_eq!(DeviceKind::of(&Device::Cpu), DeviceKind::Cpu);
        assert_eq!(Kernel::SgdUpdate.name_on(&Device::Cpu), "SgdUpdate");
    }

    #[test]
    fn classes_decide_what_the_profiler_and_passes_match() {
        use Kernel::*;
        use KernelClass as C;
        let classes = [
            (ReLU, C::Elementwise),
            (ReLUBackward, C::Elementwise),
            (AddReLU, C::Elementwise),
            (AccumulateGrad, C::Elementwise),
            (ConvForward, C::Convolution),
            (BatchNormBackward, C::Normalization),
            (LayerNormBackward, C::LayerNorm),
            (SoftmaxForward, C::Softmax),
            (AttentionForward, C::Attention),
            (
                Tensor(crate::tensor::TensorKernel::MatMulBackward),
                C::MatMul,
            ),
            (
                Tensor(crate::tensor::TensorKernel::LogSoftmaxForward),
                C::Softmax,
            ),
            (LinearBackward, C::Linear),
            (PoolingForward, C::Pooling),
            (SgdUpdate, C::Optimizer),
            (Reshape, C::Reshape),
            (DistAllReduce, C::Communication),
            (SyncBatchNormBackward, C::Communication),
        ];
        for (k, class) in classes {
            assert_eq!(k.class(), class, "{k:?}");
            assert_eq!(k.is_elementwise(), class == C::Elementwise, "{k:?}");
            assert_eq!(k.communicates(), class == C::Communication, "{k:?}");
        }
        // SINGA's verbosity-3 view prints the communication ops, all named `Dist*`.
        let communication = [DistAllReduce, DistWait, SyncBatchNormForwardTraining];
        for k in communication.into_iter().chain([SyncBatchNormBackward]) {
            assert!(k.communicates(), "{k:?}");
            let names = [k.name(DeviceKind::Cpu), k.name(DeviceKind::Cudnn)];
            assert!(names.iter().all(|n| n.starts_with("Dist")), "{k:?}");
        }
        assert_eq!(ConvBackwardFilter.phase(), Some(KernelPhase::Backward));
        assert_eq!(
            SoftmaxCrossEntropyForward.phase(),
            Some(KernelPhase::Forward)
        );
        assert_eq!(DistWait.phase(), Some(KernelPhase::Backward));
        assert_eq!(SgdUpdate.phase(), Some(KernelPhase::Optimizer));
        assert_eq!(Reshape.phase(), None);
    }
}
