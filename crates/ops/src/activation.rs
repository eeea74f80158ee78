//! ReLU and its gradient.

use candle_core::{DType, Tensor};

use crate::cpu::{self, dispatch_float, Float};
use crate::error::{CandleContext, Result};
use crate::kernel::{route, Route};

const OP: &str = "relu";

/// ReLU forward: `max(x, 0)`.
pub fn relu(x: &Tensor) -> Result<Tensor> {
    match (route(x.device()), x.dtype()) {
        (Route::Cpu, DType::F32 | DType::F64) => dispatch_float!(OP, x.dtype(), relu_cpu(x)),
        _ => x.relu().ctx(OP),
    }
}

/// ReLU backward: `grad_y` where `x > 0`, else 0. The gradient at exactly 0 is 0, as in
/// PyTorch (candle's autograd gives 1 there). `x` may be the forward input or output:
/// both are positive at the same places.
pub fn relu_backward(grad_y: &Tensor, x: &Tensor) -> Result<Tensor> {
    crate::shape::same(OP, "output gradient", grad_y.dims(), "input", x.dims())?;
    if route(x.device()) == Route::Cpu && x.dtype() == grad_y.dtype() {
        return dispatch_float!(OP, x.dtype(), relu_backward_cpu(grad_y, x));
    }
    let mask = x.gt(0.0).ctx(OP)?;
    mask.where_cond(grad_y, &grad_y.zeros_like().ctx(OP)?)
        .ctx(OP)
}

fn relu_backward_cpu<T: Float>(grad_y: &Tensor, x: &Tensor) -> Result<Tensor> {
    cpu::zip_map::<T>(OP, grad_y, x, |g, v| if v > T::ZERO { g } else { T::ZERO })
}

fn relu_cpu<T: Float>(x: &Tensor) -> Result<Tensor> {
    cpu::map::<T>(OP, x, |v| if v > T::ZERO { v } else { T::ZERO })
}

/// ReLU FLOPs: one comparison per element.
pub fn relu_flops(shape: &[usize]) -> u64 {
    shape.iter().product::<usize>() as u64
}

/// ReLU backward FLOPs: one comparison (select) per element.
pub fn relu_backward_flops(shape: &[usize]) -> u64 {
    shape.iter().product::<usize>() as u64
}
