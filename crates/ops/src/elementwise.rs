//! Element-wise addition (the residual connection) and gradient accumulation.

use candle_core::Tensor;

use crate::error::{CandleContext, Result};

const OP: &str = "add";

/// `a + b` for two tensors of the same shape (no broadcasting: a shape mismatch in a
/// residual connection is a model bug, and gets an error naming both shapes).
pub fn add(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    crate::shape::same(OP, "lhs", a.dims(), "rhs", b.dims())?;
    (a + b).ctx(OP)
}

/// FLOPs of an addition: one per element.
pub fn add_flops(shape: &[usize]) -> u64 {
    shape.iter().product::<usize>() as u64
}
