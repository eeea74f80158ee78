//! Element-wise addition (the residual connection) and gradient accumulation.

use candle_core::{DType, Tensor};

use crate::cpu::{self, dispatch_float, Float};

use crate::error::{CandleContext, Result};
use crate::route::{route, Route};

const OP: &str = "add";

/// Whether wick's CPU kernel takes `a` and `b`: f32 or f64 CPU tensors of one dtype.
fn on_cpu_kernel(a: &Tensor, b: &Tensor) -> bool {
    route(a.device()) == Route::Cpu
        && a.dtype() == b.dtype()
        && matches!(a.dtype(), DType::F32 | DType::F64)
}

/// Whether wick's CUDA kernel takes `a` and `b`: CUDA tensors of one dtype with a kernel
/// (f32, f64, bf16, f16).
#[cfg(feature = "cuda")]
fn on_cuda_kernel(a: &Tensor, b: &Tensor) -> bool {
    route(a.device()) == Route::Cuda
        && a.dtype() == b.dtype()
        && crate::gpu::cuda::has_kernel_with_16_bit(a.dtype())
}

/// `a + b` for two tensors of the same shape (no broadcasting: a shape mismatch in a
/// residual connection is a model bug, and gets an error naming both shapes).
pub fn add(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    crate::shape::same(OP, "lhs", a.dims(), "rhs", b.dims())?;
    if on_cpu_kernel(a, b) {
        return dispatch_float!(OP, a.dtype(), add_cpu(a, b));
    }
    #[cfg(feature = "cuda")]
    if on_cuda_kernel(a, b) {
        return crate::gpu::elementwise::binary(OP, "add", a, b);
    }
    (a + b).ctx(OP)
}

fn add_cpu<T: Float>(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    cpu::zip_map::<T>(OP, a, b, |x, y| x + y)
}

/// `relu(a + b)` in one pass (`AddReLU`, a residual block's end): ReLU as
/// [`relu`](crate::relu::relu) (0 where the sum is <= 0, NaN kept).
pub fn add_relu(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    crate::shape::same(OP, "lhs", a.dims(), "rhs", b.dims())?;
    if on_cpu_kernel(a, b) {
        return dispatch_float!(OP, a.dtype(), add_relu_cpu(a, b));
    }
    #[cfg(feature = "cuda")]
    if on_cuda_kernel(a, b) {
        return crate::gpu::elementwise::binary(OP, "add_relu", a, b);
    }
    crate::relu::relu(&(a + b).ctx(OP)?)
}

fn add_relu_cpu<T: Float>(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    cpu::zip_map::<T>(OP, a, b, |x, y| {
        let s = x + y;
        if s <= T::ZERO {
            T::ZERO
        } else {
            s
        }
    })
}

/// FLOPs of an addition: one per element.
pub fn add_flops(shape: &[usize]) -> u64 {
    crate::shape::flop_count(1, shape)
}
