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
    sum(a, b, false)
}

/// `relu(a + b)` in one pass (`AddReLU`, a residual block's end): ReLU as
/// [`relu`](crate::relu::relu) (0 where the sum is <= 0, NaN kept).
pub fn add_relu(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    sum(a, b, true)
}

/// `a + b`, then ReLU if `relu`: the shape check and the routing of both sums.
fn sum(a: &Tensor, b: &Tensor, relu: bool) -> Result<Tensor> {
    crate::shape::same(OP, "lhs", a.dims(), "rhs", b.dims())?;
    if on_cpu_kernel(a, b) {
        return dispatch_float!(OP, a.dtype(), sum_cpu(a, b, relu));
    }
    #[cfg(feature = "cuda")]
    if on_cuda_kernel(a, b) {
        let kernel = if relu { "add_relu" } else { "add" };
        return crate::gpu::elementwise::binary(OP, kernel, a, b);
    }
    let s = (a + b).ctx(OP)?;
    if relu {
        crate::relu::relu(&s)
    } else {
        Ok(s)
    }
}

fn sum_cpu<T: Float>(a: &Tensor, b: &Tensor, relu: bool) -> Result<Tensor> {
    if !relu {
        return cpu::zip_map::<T>(OP, a, b, |x, y| x + y);
    }
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
