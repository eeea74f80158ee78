//! Fully connected layer: `y = x·Wᵀ + b`, as PyTorch's `nn.Linear`.

use candle_core::Tensor;

use crate::error::{CandleContext, OpError, Result};

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
        return Err(OpError::invalid(
            OP,
            format!("input must be [N, in] and weight [out, in], got input {input:?} and weight {weight:?}"),
        ));
    };
    if fin != win {
        return Err(OpError::invalid(
            OP,
            format!("input {input:?} has {fin} features but weight {weight:?} expects {win}"),
        ));
    }
    if let Some(b) = bias {
        if b != [out] {
            return Err(OpError::invalid(
                OP,
                format!("bias must have shape [{out}], got {b:?}"),
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

/// Linear forward (`LinearForward`).
pub fn linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    linear_output_shape(x.dims(), weight.dims(), bias.map(|b| b.dims()))?;
    let y = x.matmul(&weight.t().ctx(OP)?).ctx(OP)?;
    match bias {
        Some(b) => y.broadcast_add(b).ctx(OP),
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
    let dx = grad_y.matmul(weight).ctx(OP)?;
    let dw = grad_y.t().ctx(OP)?.matmul(x).ctx(OP)?;
    let db = if has_bias {
        Some(grad_y.sum(0).ctx(OP)?)
    } else {
        None
    };
    Ok(LinearGrads {
        x: dx,
        weight: dw,
        bias: db,
    })
}
