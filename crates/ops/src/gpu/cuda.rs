//! Running wick's kernels on a CUDA device: each kernel file is compiled with NVRTC once
//! per device and kept (modules are loaded once and cached); launches go on the device's
//! stream (candle's: one per device, so one per executor), with the [`Launch`] this
//! module's callers compute; nothing here synchronises with the host. Outputs are
//! allocated uninitialised when the kernel writes every element.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use candle_core::cuda::cudarc::driver::{CudaModule, CudaSlice, CudaView, LaunchConfig};
use candle_core::cuda::cudarc::nvrtc::compile_ptx;
use candle_core::cuda::CudaDType;
use candle_core::{CudaDevice, CudaStorage, DType, Device, Layout, Storage, Tensor};

use super::Launch;
use crate::error::{CandleContext, OpError, Result};

/// A CUDA source file of wick, compiled as one module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    Attention,
    BatchNorm,
    Elementwise,
    GlobalPool,
    CrossEntropy,
    Optimizer,
    Pool,
}

const COMMON: &str = include_str!("../../cuda/common.cuh");

impl Source {
    /// The file's text, with the shared header in front (NVRTC has no include path).
    fn text(self) -> String {
        let file = match self {
            Source::Attention => include_str!("../../cuda/attention.cu"),
            Source::BatchNorm => include_str!("../../cuda/batchnorm.cu"),
            Source::Elementwise => include_str!("../../cuda/elementwise.cu"),
            Source::GlobalPool => include_str!("../../cuda/global_pool.cu"),
            Source::CrossEntropy => include_str!("../../cuda/cross_entropy.cu"),
            Source::Optimizer => include_str!("../../cuda/optimizer.cu"),
            Source::Pool => include_str!("../pool/kernels.cu"),
        };
        format!("#define WICK_RUNTIME_SOURCE\n{COMMON}\n{file}")
    }
}

/// The module of `source` on `dev`, compiled on first use.
pub(crate) fn module(
    op: &'static str,
    dev: &CudaDevice,
    source: Source,
) -> Result<Arc<CudaModule>> {
    type Cache = HashMap<(candle_core::cuda::DeviceId, Source), Arc<CudaModule>>;
    static MODULES: OnceLock<Mutex<Cache>> = OnceLock::new();
    let mut cache = MODULES
        .get_or_init(Default::default)
        .lock()
        .map_err(|_| OpError::invalid(op, "CUDA module cache poisoned"))?;
    if let Some(m) = cache.get(&(dev.id(), source)) {
        return Ok(m.clone());
    }
    let ptx = compile_ptx(source.text()).map_err(|e| OpError::Cuda {
        op,
        message: format!("NVRTC failed to compile wick's {source:?} kernels: {e:?}"),
    })?;
    let module = dev
        .cuda_stream()
        .context()
        .load_module(ptx)
        .map_err(|e| OpError::Cuda {
            op,
            message: format!("loading wick's {source:?} kernels: {e:?}"),
        })?;
    cache.insert((dev.id(), source), module.clone());
    Ok(module)
}

/// A driver error as an [`OpError`] naming the op and what failed.
pub(crate) fn cuda_err(
    op: &'static str,
    what: &'static str,
) -> impl FnOnce(candle_core::cuda::cudarc::driver::DriverError) -> OpError {
    move |e| OpError::Cuda {
        op,
        message: format!("{what}: {e:?}"),
    }
}

/// The CUDA device of `t`.
pub(crate) fn device_of(op: &'static str, t: &Tensor) -> Result<CudaDevice> {
    match t.device() {
        Device::Cuda(d) => Ok(d.clone()),
        other => Err(OpError::Unsupported {
            op,
            what: format!("a CUDA kernel asked for a tensor on {:?}", other.location()),
        }),
    }
}

/// The elements of a contiguous CUDA tensor's storage as a view (`layout` from
/// `storage_and_layout`).
pub(crate) fn view<'a, T: CudaDType>(
    op: &'static str,
    storage: &'a Storage,
    layout: &Layout,
) -> Result<CudaView<'a, T>> {
    let Storage::Cuda(cs) = storage else {
        return Err(OpError::Unsupported {
            op,
            what: "a CUDA kernel asked for a non-CUDA tensor".into(),
        });
    };
    if !layout.is_contiguous() {
        return Err(OpError::invalid(
            op,
            "a CUDA kernel asked for a strided tensor",
        ));
    }
    let slice = cs.as_cuda_slice::<T>().ctx(op)?;
    let start = layout.start_offset();
    Ok(slice.slice(start..start + layout.shape().elem_count()))
}

/// A tensor of `shape` on `dev` over `slice`.
pub(crate) fn wrap<T: CudaDType>(slice: CudaSlice<T>, dev: &CudaDevice, shape: &[usize]) -> Tensor {
    Tensor::from_storage(
        Storage::Cuda(CudaStorage::wrap_cuda_slice(slice, dev.clone())),
        shape,
        candle_core::op::BackpropOp::none(),
        false,
    )
}

/// A zeroed device buffer of `len` elements (at least one), for kernels that scatter.
pub(crate) fn zeros<T>(op: &'static str, dev: &CudaDevice, len: usize) -> Result<CudaSlice<T>>
where
    T: candle_core::cuda::cudarc::driver::DeviceRepr
        + candle_core::cuda::cudarc::driver::ValidAsZeroBits,
{
    dev.cuda_stream()
        .alloc_zeros::<T>(len.max(1))
        .map_err(cuda_err(op, "allocating a zeroed buffer"))
}

/// `len` uninitialised elements on `dev`'s stream, for an output the kernel writes whole.
pub(crate) fn output<T: CudaDType + candle_core::cuda::cudarc::driver::DeviceRepr>(
    op: &'static str,
    dev: &CudaDevice,
    len: usize,
) -> Result<CudaSlice<T>> {
    // SAFETY: every caller launches a kernel that writes all `len` elements before the
    // slice is read.
    unsafe { dev.cuda_stream().alloc::<T>(len.max(1)) }
        .map_err(cuda_err(op, "allocating an output"))
}

/// `len` values of `T` at `range` of `scratch`, or an error when the region is too small.
pub(crate) fn region<'a, T>(
    op: &'static str,
    scratch: &CudaView<'a, u8>,
    range: std::ops::Range<usize>,
    len: usize,
) -> Result<CudaView<'a, T>> {
    // SAFETY: the region holds bytes the caller wrote as `T` (or a kernel writes before
    // reading); `transmute` checks the length.
    unsafe { scratch.slice(range).transmute::<T>(len) }
        .ok_or_else(|| OpError::invalid(op, "a scratch region is smaller than its table"))
}

impl From<Launch> for LaunchConfig {
    fn from(l: Launch) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (l.grid[0], l.grid[1], l.grid[2]),
            block_dim: (l.block[0], l.block[1], l.block[2]),
            shared_mem_bytes: 0,
        }
    }
}

/// The dtypes of the kernels with 16-bit variants (`elementwise.cu`, `global_pool.cu`,
/// `pool/kernels.cu`):
/// f32 and f64, and bf16 and f16, which compute in float.
pub(crate) fn has_kernel_with_16_bit(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F64 | DType::BF16 | DType::F16)
}

/// The suffix of such a kernel's name (`f32`, `f64`, `bf16`, `f16`).
pub(crate) fn suffix_with_16_bit(op: &'static str, dtype: DType) -> Result<&'static str> {
    match dtype {
        DType::BF16 => Ok("bf16"),
        DType::F16 => Ok("f16"),
        other => suffix(op, other),
    }
}

/// [`dispatch!`] for the kernels with bf16 and f16 variants: `$t` is the element type,
/// `$s` a scalar argument's (f32 for the 16-bit kernels).
macro_rules! dispatch_with_16_bit {
    ($op:expr, $dtype:expr, $t:ident, $s:ident => $body:expr) => {
        match $dtype {
            candle_core::DType::BF16 => {
                type $t = half::bf16;
                type $s = f32;
                $body
            }
            candle_core::DType::F16 => {
                type $t = half::f16;
                type $s = f32;
                $body
            }
            other => $crate::gpu::cuda::dispatch!($op, other, T64 => {
                type $t = T64;
                type $s = T64;
                $body
            }),
        }
    };
}
pub(crate) use dispatch_with_16_bit;

/// The `f32`/`f64` suffix of a kernel name, or an error for another dtype.
pub(crate) fn suffix(op: &'static str, dtype: DType) -> Result<&'static str> {
    match dtype {
        DType::F32 => Ok("f32"),
        DType::F64 => Ok("f64"),
        other => Err(OpError::Unsupported {
            op,
            what: format!("dtype {other:?} in wick's CUDA kernels (f32, f64)"),
        }),
    }
}

/// Launches `name` of `source` on `dev` with `launch` and the arguments, in order.
macro_rules! launch {
    ($op:expr, $dev:expr, $source:expr, $name:expr, $launch:expr, [$($arg:expr),* $(,)?]) => {{
        use candle_core::cuda::cudarc::driver::PushKernelArg;
        let module = $crate::gpu::cuda::module($op, &$dev, $source)?;
        let func = module
            .load_function(&$name)
            .map_err($crate::gpu::cuda::cuda_err($op, "loading a kernel"))?;
        let stream = $dev.cuda_stream();
        let mut b = stream.launch_builder(&func);
        $( b.arg($arg); )*
        // SAFETY: the argument list matches the kernel's signature in crates/ops/cuda,
        // and every buffer holds what the kernel indexes under this launch (the same
        // launch the emulated tests run).
        unsafe { b.launch(candle_core::cuda::cudarc::driver::LaunchConfig::from($launch)) }
            .map_err($crate::gpu::cuda::cuda_err($op, "launching a kernel"))?;
    }};
}
pub(crate) use launch;

/// Runs `$body` with `$t` bound to f32 or f64, as `$dtype` says.
macro_rules! dispatch {
    ($op:expr, $dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            candle_core::DType::F32 => {
                type $t = f32;
                $body
            }
            candle_core::DType::F64 => {
                type $t = f64;
                $body
            }
            other => Err($crate::error::OpError::Unsupported {
                op: $op,
                what: format!("dtype {other:?} in wick's CUDA kernels (f32, f64)"),
            }),
        }
    };
}
pub(crate) use dispatch;

/// `t` contiguous (a no-op when it is).
pub(crate) fn contiguous(op: &'static str, t: &Tensor) -> Result<Tensor> {
    t.contiguous().ctx(op)
}

/// A zero tensor of `shape` with `t`'s dtype and device.
pub(crate) fn empty_like(op: &'static str, t: &Tensor, shape: &[usize]) -> Result<Tensor> {
    Tensor::zeros(shape, t.dtype(), t.device()).ctx(op)
}
