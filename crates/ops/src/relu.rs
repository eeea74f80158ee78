//! ReLU and its gradient.

use candle_core::{DType, Tensor};

use crate::cpu::{self, dispatch_float, Float};
use crate::error::{CandleContext, Result};
use crate::route::{route, Route};

const OP: &str = "relu";

/// ReLU forward: `max(x, 0)`, with NaN passed through as in PyTorch (a `max` that drops
/// NaN would hide a diverging run behind a finite loss).
pub fn relu(x: &Tensor) -> Result<Tensor> {
    match (route(x.device()), x.dtype()) {
        (Route::Cpu, DType::F32 | DType::F64) => dispatch_float!(OP, x.dtype(), relu_cpu(x)),
        #[cfg(feature = "cuda")]
        (Route::Cuda, dtype) if crate::gpu::cuda::has_kernel_with_16_bit(dtype) => {
            crate::gpu::elementwise::activation_forward(OP, "relu", x, 0.0)
        }
        // candle's relu is `max(x, 0)`, which maps NaN to 0 on the GPU.
        _ => x
            .le(0.0)
            .ctx(OP)?
            .where_cond(&x.zeros_like().ctx(OP)?, x)
            .ctx(OP),
    }
}

/// ReLU backward: 0 where `x <= 0`, else `grad_y` (PyTorch's `threshold_backward`, so a
/// NaN input passes its gradient on). The gradient at exactly 0 is 0, as in PyTorch
/// (candle's autograd gives 1 there). `x` may be the forward input or output: both are
/// positive (and NaN) at the same places.
pub fn relu_backward(grad_y: &Tensor, x: &Tensor) -> Result<Tensor> {
    crate::shape::same(OP, "output gradient", grad_y.dims(), "input", x.dims())?;
    if route(x.device()) == Route::Cpu && x.dtype() == grad_y.dtype() {
        return dispatch_float!(OP, x.dtype(), relu_backward_cpu(grad_y, x));
    }
    #[cfg(feature = "cuda")]
    if route(x.device()) == Route::Cuda
        && x.dtype() == grad_y.dtype()
        && crate::gpu::cuda::has_kernel_with_16_bit(x.dtype())
    {
        return crate::gpu::elementwise::activation_backward(OP, "relu", grad_y, x, 0.0);
    }
    let mask = x.le(0.0).ctx(OP)?;
    mask.where_cond(&grad_y.zeros_like().ctx(OP)?, grad_y)
        .ctx(OP)
}

fn relu_backward_cpu<T: Float>(grad_y: &Tensor, x: &Tensor) -> Result<Tensor> {
    cpu::zip_map::<T>(OP, grad_y, x, |g, v| if v <= T::ZERO { T::ZERO } else { g })
}

fn relu_cpu<T: Float>(x: &Tensor) -> Result<Tensor> {
    cpu::map::<T>(OP, x, |v| if v <= T::ZERO { T::ZERO } else { v })
}

/// ReLU FLOPs: one comparison per element.
pub fn relu_flops(shape: &[usize]) -> u64 {
    crate::shape::flop_count(1, shape)
}

/// ReLU backward FLOPs: one comparison (select) per element.
pub fn relu_backward_flops(shape: &[usize]) -> u64 {
    crate::shape::flop_count(1, shape)
}
