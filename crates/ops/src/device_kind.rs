//! The kind of device a kernel runs on, as far as its name is concerned.

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
