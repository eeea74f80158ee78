//! Kernel names: what a profiler prints for each op, per device.
//!
//! On the CPU the names are plain (`ConvForward`, `ReLU`, `PoolingForward`); on CUDA the
//! ops that cuDNN runs carry cuDNN-style names (`cudnnConvForward`) and wick's own GPU
//! kernels `Gpu...` names (`GpuBatchNormForwardTraining`), as in SINGA's documented output.

use candle_core::Device;

/// The kind of device a kernel runs on, as far as naming is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// candle's CPU backend.
    Cpu,
    /// candle's CUDA backend without cuDNN (convolutions via im2col and cuBLAS).
    Cuda,
    /// candle's CUDA backend with cuDNN convolutions.
    Cudnn,
    /// Any other backend (Metal).
    Other,
}

impl DeviceKind {
    /// The kind of `device`; CUDA devices count as [`DeviceKind::Cudnn`] when wick is built
    /// with the `cudnn` feature.
    pub fn of(device: &Device) -> Self {
        match device {
            Device::Cpu => DeviceKind::Cpu,
            Device::Cuda(_) if cfg!(feature = "cudnn") => DeviceKind::Cudnn,
            Device::Cuda(_) => DeviceKind::Cuda,
            Device::Metal(_) => DeviceKind::Other,
        }
    }
}

/// Every kernel wick-ops runs. A graph node carries one; [`Kernel::name`] gives the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// Convolution forward.
    ConvForward,
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
}

impl Kernel {
    /// The kernel's name on a device of kind `device`.
    pub fn name(self, device: DeviceKind) -> &'static str {
        use Kernel::*;
        match device {
            DeviceKind::Cpu | DeviceKind::Other => match self {
                ConvForward => "ConvForward",
                ConvBackwardData => "ConvBackwardData",
                ConvBackwardFilter => "ConvBackwardFilter",
                ConvBackwardBias => "ConvBackwardBias",
                BatchNormForwardTraining => "BatchNormForwardTraining",
                BatchNormForwardInference => "BatchNormForwardInference",
                BatchNormBackward => "BatchNormBackward",
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
            },
            DeviceKind::Cuda | DeviceKind::Cudnn => match self {
                ConvForward if device == DeviceKind::Cudnn => "cudnnConvForward",
                ConvBackwardData if device == DeviceKind::Cudnn => "cudnnConvBackwardData",
                ConvBackwardFilter if device == DeviceKind::Cudnn => "cudnnConvBackwardFilter",
                ConvForward => "GpuConvForward",
                ConvBackwardData => "GpuConvBackwardData",
                ConvBackwardFilter => "GpuConvBackwardFilter",
                ConvBackwardBias => "GpuConvBackwardBias",
                BatchNormForwardTraining => "GpuBatchNormForwardTraining",
                BatchNormForwardInference => "GpuBatchNormForwardInference",
                BatchNormBackward => "GpuBatchNormBackward",
                ReLU => "ReLU",
                ReLUBackward => "ReLUBackward",
                Add => "Add",
                PoolingForward => "GpuPoolingForward",
                PoolingBackward => "GpuPoolingBackward",
                GlobalAvgPoolForward => "GpuGlobalAvgPoolForward",
                GlobalAvgPoolBackward => "GpuGlobalAvgPoolBackward",
                Reshape => "Reshape",
                LinearForward => "GpuLinearForward",
                LinearBackward => "GpuLinearBackward",
                SoftmaxCrossEntropyForward => "GpuSoftmaxCrossEntropyForward",
                SoftmaxCrossEntropyBackward => "GpuSoftmaxCrossEntropyBackward",
                AccumulateGrad => "AccumulateGrad",
                SgdUpdate => "GpuSgdUpdate",
            },
        }
    }

    /// The kernel's name on `device`.
    pub fn name_on(self, device: &Device) -> &'static str {
        self.name(DeviceKind::of(device))
    }
}

/// Which implementation a kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KernelPath {
    /// wick's CPU kernel on CPU tensors, candle's device-generic ops elsewhere.
    #[default]
    Auto,
    /// candle's device-generic ops on every device. This is the path CUDA tensors take;
    /// forcing it on the CPU lets tests check it against the CPU kernels and fixtures.
    Generic,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_device_and_cudnn() {
        assert_eq!(Kernel::ConvForward.name(DeviceKind::Cpu), "ConvForward");
        assert_eq!(
            Kernel::ConvForward.name(DeviceKind::Cudnn),
            "cudnnConvForward"
        );
        assert_eq!(
            Kernel::ConvBackwardData.name(DeviceKind::Cudnn),
            "cudnnConvBackwardData"
        );
        assert_eq!(
            Kernel::ConvBackwardFilter.name(DeviceKind::Cudnn),
            "cudnnConvBackwardFilter"
        );
        assert_eq!(Kernel::ConvForward.name(DeviceKind::Cuda), "GpuConvForward");
        assert_eq!(
            Kernel::BatchNormForwardTraining.name(DeviceKind::Cpu),
            "BatchNormForwardTraining"
        );
        assert_eq!(
            Kernel::BatchNormForwardTraining.name(DeviceKind::Cuda),
            "GpuBatchNormForwardTraining"
        );
        assert_eq!(
            Kernel::PoolingForward.name(DeviceKind::Cuda),
            "GpuPoolingForward"
        );
        assert_eq!(
            Kernel::PoolingBackward.name(DeviceKind::Cpu),
            "PoolingBackward"
        );
        assert_eq!(Kernel::ReLU.name(DeviceKind::Cudnn), "ReLU");
        assert_eq!(Kernel::Add.name(DeviceKind::Cuda), "Add");
        assert_eq!(DeviceKind::of(&Device::Cpu), DeviceKind::Cpu);
        assert_eq!(Kernel::SgdUpdate.name_on(&Device::Cpu), "SgdUpdate");
    }
}
