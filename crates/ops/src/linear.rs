//! Fully connected layer: `y = x·Wᵀ + b`, as PyTorch's `nn.Linear`.

use candle_core::Tensor;

use crate::broadcast::BinaryOp;
use crate::cpu::{self, dispatch_float};
use crate::error::{CandleContext, Result};
use crate::{linear_cpu, linear_low_precision};

const OP: &str = "linear";

/// The gradients of a linear layer.
#[derive(Debug, Clone)]
pub struct LinearGrads {
    /// Gradient of the input, shape [N, in].
    pub x: Tensor,
    /// Gradient of the weight, shape [out, in].
    pub weight: Tensor,
    /// Gradient of the bias, shape `[out]` (when the layer has one).
    pub bias: Option<Tensor>,
}

/// The output shape [N, out] for an input [N, in] and a weight [out, in], or an error.
pub fn linear_output_shape(
    input: &[usize],
    weight: &[usize],
    bias: Option<&[usize]>,
) -> Result<[usize; 2]> {
    let (&[n, fin], &[out, win]) = (input, weight) else {
        return Err(crate::invalid!(
            OP,
            "input must be [N, in] and weight [out, in], got input {input:?} and weight {weight:?}"
        ));
    };
    if fin != win {
        return Err(crate::invalid!(
            OP,
            "input {input:?} has {fin} features but weight {weight:?} expects {win}"
        ));
    }
    if let Some(b) = bias {
        if b != [out] {
            return Err(crate::invalid!(
                OP,
                "bias must have shape [{out}], got {b:?}"
            ));
        }
    }
    Ok([n, out])
}

/// FLOPs of the forward pass.
pub fn linear_flops(input: &[usize], weight: &[usize]) -> u64 {
    match (input, weight) {
        (&[n, fin], &[out, _]) => crate::shape::flop_count(2, &[n, fin, out]),
        _ => 0,
    }
}

/// FLOPs of the backward pass: the input and the weight gradients, each a product the
/// size of the forward one (the bias gradient's sum is not counted).
pub fn linear_backward_flops(input: &[usize], weight: &[usize]) -> u64 {
    linear_flops(input, weight).saturating_mul(2)
}

/// Whether wick's CPU kernel runs these operands (named for errors): all on its CPU path,
/// in one dtype (a mix is an error naming the odd one).
fn on_cpu(operands: &[(&str, Option<&Tensor>)]) -> Result<bool> {
    let present: Vec<(&str, &Tensor)> = operands
        .iter()
        .filter_map(|&(name, t)| t.map(|t| (name, t)))
        .collect();
    if !present.iter().all(|(_, t)| cpu::on_cpu_kernel(t)) {
        return Ok(false);
    }
    cpu::same_dtype(OP, present[0].1.dtype(), &present)?;
    Ok(true)
}

/// Linear forward (`LinearForward`).
pub fn linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    linear_output_shape(x.dims(), weight.dims(), bias.map(|b| b.dims()))?;
    if linear_low_precision::applies(x, weight) {
        return linear_low_precision::forward(x, weight, bias);
    }
    if on_cpu(&[("input", Some(x)), ("weight", Some(weight)), ("bias", bias)])? {
        return dispatch_float!(OP, x.dtype(), linear_cpu::forward(x, weight, bias));
    }
    let y = x.matmul(&weight.t().ctx(OP)?).ctx(OP)?;
    match bias {
        // wick's row kernel: candle's broadcast add takes as long as the product here.
        Some(b) => crate::broadcast::forward(BinaryOp::Add, &y, b),
        None => Ok(y),
    }
}

/// Linear backward (`LinearBackward`): input, weight and (if `has_bias`) bias gradients.
pub fn linear_backward(
    grad_y: &Tensor,
    x: &Tensor,
    weight: &Tensor,
    has_bias: bool,
) -> Result<LinearGrads> {
    let out = linear_output_shape(x.dims(), weight.dims(), None)?;
    crate::shape::same(OP, "output gradient", grad_y.dims(), "output", &out)?;
    let (dx, dw) = if linear_low_precision::applies(x, weight) {
        linear_low_precision::backward(grad_y, x, weight)?
    } else if on_cpu(&[
        ("output gradient", Some(grad_y)),
        ("input", Some(x)),
        ("weight", Some(weight)),
    ])? {
        dispatch_float!(OP, x.dtype(), linear_cpu::backward(grad_y, x, weight))?
    } else {
        let dx = grad_y.matmul(weight).ctx(OP)?;
        (dx, grad_y.t().ctx(OP)?.matmul(x).ctx(OP)?)
    };
    let db = if has_bias {
        // Column sums in f64 by wick's kernel (candle's sum over rows is strided and slow).
        Some(crate::broadcast::sum_to_shape(OP, grad_y, &[out[1]])?)
    } else {
        None
    };
    Ok(LinearGrads {
        x: dx,
        weight: dw,
        bias: db,
    })
}
