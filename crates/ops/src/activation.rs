//! ReLU and its gradient.

use candle_core::Tensor;

use crate::error::{CandleContext, Result};

const OP: &str = "relu";

/// ReLU forward: `max(x, 0)`.
pub fn relu(x: &Tensor) -> Result<Tensor> {
    x.relu().ctx(OP)
}

/// ReLU backward: `grad_y` where `x > 0`, else 0. The gradient at exactly 0 is 0, as in
/// PyTorch (candle's autograd gives 1 there).
pub fn relu_backward(grad_y: &Tensor, x: &Tensor) -> Result<Tensor> {
    crate::shape::same(OP, "output gradient", grad_y.dims(), "input", x.dims())?;
    let mask = x.gt(0.0).ctx(OP)?;
    mask.where_cond(grad_y, &grad_y.zeros_like().ctx(OP)?)
        .ctx(OP)
}

/// ReLU FLOPs: one comparison per element.
pub fn relu_flops(shape: &[usize]) -> u64 {
    shape.iter().product::<usize>() as u64
}
