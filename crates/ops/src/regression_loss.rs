//! Losses over every element, mean-reduced (PyTorch's `F.mse_loss`,
//! `F.binary_cross_entropy` and `F.binary_cross_entropy_with_logits` with their defaults): forward to a 0-dim loss and
//! the gradient for the input or the target, scaled by the loss's own gradient.

use candle_core::{DType, Tensor};

use crate::broadcast::Operand;
use crate::error::{CandleContext, OpError, Result};

/// An element-wise loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementwiseLoss {
    /// Mean squared error, `mean((x - t)²)`.
    Mse,
    /// Binary cross-entropy on logits, `mean(max(x, 0) - x·t + log(1 + e^-|x|))`.
    BceWithLogits,
    /// Binary cross-entropy on probabilities, `mean(-(t·log p + (1-t)·log(1-p)))`, each
    /// log clamped to at least -100 as PyTorch's; an input outside `[0, 1]` is an error.
    Bce,
}

impl ElementwiseLoss {
    /// The builder call's name.
    pub fn op(self) -> &'static str {
        match self {
            ElementwiseLoss::Mse => "mse_loss",
            ElementwiseLoss::BceWithLogits => "bce_with_logits",
            ElementwiseLoss::Bce => "binary_cross_entropy",
        }
    }

    /// The forward kernel's name.
    pub fn name(self) -> &'static str {
        match self {
            ElementwiseLoss::Mse => "MseLossForward",
            ElementwiseLoss::BceWithLogits => "BceWithLogitsForward",
            ElementwiseLoss::Bce => "BceLossForward",
        }
    }

    /// The backward kernel's name.
    pub fn backward_name(self) -> &'static str {
        match self {
            ElementwiseLoss::Mse => "MseLossBackward",
            ElementwiseLoss::BceWithLogits => "BceWithLogitsBackward",
            ElementwiseLoss::Bce => "BceLossBackward",
        }
    }
}

/// Checks that input and target have one shape and one float dtype, and are not empty.
pub fn check(kind: ElementwiseLoss, input: &[usize], target: &[usize]) -> Result<()> {
    crate::shape::same(kind.op(), "input", input, "target", target)?;
    if input.iter().product::<usize>() == 0 {
        return Err(OpError::invalid(kind.op(), "the input is empty"));
    }
    Ok(())
}

fn check_tensors(kind: ElementwiseLoss, x: &Tensor, t: &Tensor) -> Result<()> {
    check(kind, x.dims(), t.dims())?;
    if x.dtype() != t.dtype()
        || !matches!(
            x.dtype(),
            DType::F16 | DType::BF16 | DType::F32 | DType::F64
        )
    {
        return Err(crate::invalid!(
            kind.op(),
            "input and target must have one float dtype, got {:?} and {:?}",
            x.dtype(),
            t.dtype()
        ));
    }
    Ok(())
}

/// The mean loss of `input` against `target` (same shape), as a 0-dim tensor.
pub fn forward(kind: ElementwiseLoss, input: &Tensor, target: &Tensor) -> Result<Tensor> {
    check_tensors(kind, input, target)?;
    let op = kind.op();
    let per_element = match kind {
        ElementwiseLoss::Mse => (input - target).ctx(op)?.sqr().ctx(op)?,
        ElementwiseLoss::BceWithLogits => {
            let relu = input.relu().ctx(op)?;
            let soft = (input.abs().ctx(op)?.neg().ctx(op)?.exp().ctx(op)? + 1.0)
                .ctx(op)?
                .log()
                .ctx(op)?;
            ((relu - (input * target).ctx(op)?).ctx(op)? + soft).ctx(op)?
        }
        ElementwiseLoss::Bce => {
            check_probabilities(op, input)?;
            let (log_p, log_q) = clamped_logs(op, input)?;
            let t_log_p = (target * log_p).ctx(op)?;
            let q_log_q = (target.affine(-1.0, 1.0).ctx(op)? * log_q).ctx(op)?;
            (t_log_p + q_log_q).ctx(op)?.neg().ctx(op)?
        }
    };
    per_element.mean_all().ctx(op)
}

/// The gradient of the mean loss for `operand` (`Lhs`: the input, `Rhs`: the target),
/// times `grad_loss`, the loss's 0-dim gradient.
pub fn backward(
    kind: ElementwiseLoss,
    operand: Operand,
    grad_loss: &Tensor,
    input: &Tensor,
    target: &Tensor,
) -> Result<Tensor> {
    check_tensors(kind, input, target)?;
    let op = kind.backward_name();
    let n = input.elem_count() as f64;
    let per_element = match (kind, operand) {
        (ElementwiseLoss::Mse, Operand::Lhs) => ((input - target).ctx(op)? * (2.0 / n)).ctx(op)?,
        (ElementwiseLoss::Mse, Operand::Rhs) => ((target - input).ctx(op)? * (2.0 / n)).ctx(op)?,
        (ElementwiseLoss::BceWithLogits, Operand::Lhs) => {
            let sigmoid = (input.neg().ctx(op)?.exp().ctx(op)? + 1.0)
                .ctx(op)?
                .recip()
                .ctx(op)?;
            ((sigmoid - target).ctx(op)? / n).ctx(op)?
        }
        (ElementwiseLoss::BceWithLogits, Operand::Rhs) => (input.neg().ctx(op)? / n).ctx(op)?,
        (ElementwiseLoss::Bce, Operand::Lhs) => {
            // (p - t) / max(p (1 - p), 1e-12), as PyTorch's.
            let pq = (input * input.affine(-1.0, 1.0).ctx(op)?).ctx(op)?;
            let denominator = pq.maximum(1e-12).ctx(op)?;
            (((input - target).ctx(op)? / denominator).ctx(op)? / n).ctx(op)?
        }
        (ElementwiseLoss::Bce, Operand::Rhs) => {
            let (log_p, log_q) = clamped_logs(op, input)?;
            ((log_q - log_p).ctx(op)? / n).ctx(op)?
        }
    };
    per_element
        .broadcast_mul(&grad_loss.to_dtype(input.dtype()).ctx(op)?)
        .ctx(op)
}

/// FLOPs per element of the forward and of the backward.
fn flops_per_element(kind: ElementwiseLoss) -> (u64, u64) {
    match kind {
        ElementwiseLoss::Mse => (3, 3),
        ElementwiseLoss::BceWithLogits | ElementwiseLoss::Bce => (7, 5),
    }
}

/// Forward FLOPs over `shape`.
pub fn flops(kind: ElementwiseLoss, shape: &[usize]) -> u64 {
    crate::shape::flop_count(flops_per_element(kind).0, shape)
}

/// Backward FLOPs over `shape`.
pub fn backward_flops(kind: ElementwiseLoss, shape: &[usize]) -> u64 {
    crate::shape::flop_count(flops_per_element(kind).1, shape)
}

/// `log p` and `log(1 - p)`, each at least -100 (PyTorch's clamp, so that p = 0 or 1
/// gives a finite loss).
fn clamped_logs(op: &'static str, p: &Tensor) -> Result<(Tensor, Tensor)> {
    let log_p = p.log().ctx(op)?.maximum(-100.0).ctx(op)?;
    let log_q = p
        .affine(-1.0, 1.0)
        .ctx(op)?
        .log()
        .ctx(op)?
        .maximum(-100.0)
        .ctx(op)?;
    Ok((log_p, log_q))
}

/// An error naming the first input outside `[0, 1]` (NaN included).
fn check_probabilities(op: &'static str, p: &Tensor) -> Result<()> {
    let values = crate::compare::host_f64(op, p)?;
    if let Some((i, v)) = values
        .iter()
        .enumerate()
        .find(|(_, v)| !(0.0..=1.0).contains(*v))
    {
        return Err(crate::invalid!(
            op,
            "every input must be a probability in [0, 1]; element {i} is {v}"
        ));
    }
    Ok(())
}
