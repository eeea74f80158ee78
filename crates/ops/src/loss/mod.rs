//! Softmax cross-entropy with integer class labels, mean over the batch (PyTorch's
//! `F.cross_entropy` with its defaults).

#[cfg(feature = "cuda")]
mod cuda;

use candle_core::{DType, Tensor};

use crate::error::{CandleContext, OpError, Result};

const OP: &str = "cross_entropy";

/// Checks logits [N, C] against labels [N] (shapes and an integer dtype).
fn check(logits: &Tensor, labels: &Tensor) -> Result<(usize, usize)> {
    let &[n, c] = logits.dims() else {
        return Err(crate::invalid!(
            OP,
            "logits must be [N, classes], got {:?}",
            logits.dims()
        ));
    };
    if labels.dims() != [n] {
        return Err(crate::invalid!(
            OP,
            "labels must have shape [{n}] for logits {:?}, got {:?}",
            logits.dims(),
            labels.dims()
        ));
    }
    if n == 0 {
        return Err(OpError::invalid(OP, "the batch is empty"));
    }
    if !is_integer(labels.dtype()) {
        return Err(crate::invalid!(
            OP,
            "labels must be integers (u8, u32, i16, i32 or i64), got {:?}",
            labels.dtype()
        ));
    }
    Ok((n, c))
}

/// Checks that every label lies in `0..classes`. It reads the labels on the host: the
/// forward kernel does so for CPU tensors only (no copy); on a device that would be a
/// synchronisation inside a timed op, so the caller checks the batch once before feeding
/// it ([`check_labels`] on the host tensor; `Session::step` does).
pub fn check_labels(labels: &Tensor, classes: usize) -> Result<()> {
    let values: Vec<i64> = match labels.dtype() {
        dtype if is_integer(dtype) => labels
            .to_dtype(DType::I64)
            .ctx(OP)?
            .to_vec1::<i64>()
            .ctx(OP)?,
        other => {
            return Err(crate::invalid!(
                OP,
                "labels must be integers (u8, u32, i16, i32 or i64), got {other:?}"
            ))
        }
    };
    if let Some((i, bad)) = values
        .iter()
        .enumerate()
        .find(|(_, &v)| v < 0 || v >= classes as i64)
    {
        return Err(crate::invalid!(
            OP,
            "label {bad} at position {i} is outside the class range 0..{classes} (labels {:?})",
            labels.dims()
        ));
    }
    Ok(())
}

fn log_softmax(logits: &Tensor) -> Result<Tensor> {
    if crate::cpu::on_cpu_kernel(logits) {
        let kind = crate::softmax_cpu::SoftmaxKind::LogSoftmax;
        return crate::softmax_cpu::forward_on_cpu(logits, 1, kind);
    }
    let max = logits.max_keepdim(1).ctx(OP)?;
    let shifted = logits.broadcast_sub(&max).ctx(OP)?;
    let lse = shifted
        .exp()
        .ctx(OP)?
        .sum_keepdim(1)
        .ctx(OP)?
        .log()
        .ctx(OP)?;
    shifted.broadcast_sub(&lse).ctx(OP)
}

/// Whether `dtype` is one of candle's integer types, all of which hold class labels.
fn is_integer(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::U8 | DType::U32 | DType::I16 | DType::I32 | DType::I64
    )
}

fn labels_u32(labels: &Tensor) -> Result<Tensor> {
    labels.to_dtype(DType::U32).ctx(OP)
}

/// Cross-entropy forward (`SoftmaxCrossEntropyForward`): the mean loss as a 0-dim tensor.
///
/// On the CPU it also checks that every label lies in `0..C`; on a device it does not
/// read the labels back (see [`check_labels`]).
pub fn cross_entropy(logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    let (n, c) = check(logits, labels)?;
    if labels.device().is_cpu() {
        check_labels(labels, c)?;
    }
    #[cfg(feature = "cuda")]
    if crate::route::route(logits.device()) == crate::route::Route::Cuda
        && crate::gpu::cuda::has_kernel_with_16_bit(logits.dtype())
    {
        return cuda::cross_entropy(OP, logits, labels);
    }
    let log_probs = log_softmax(logits)?;
    let picked = log_probs
        .gather(&labels_u32(labels)?.unsqueeze(1).ctx(OP)?, 1)
        .ctx(OP)?;
    (picked.sum_all().ctx(OP)? * (-1.0 / n as f64)).ctx(OP)
}

/// Cross-entropy backward (`SoftmaxCrossEntropyBackward`): `(softmax - onehot) / N * grad_loss`.
/// The labels' range was checked by the forward pass; a label outside `0..C` gives a zero
/// one-hot row here, never an out-of-bounds read.
pub fn cross_entropy_backward(
    grad_loss: &Tensor,
    logits: &Tensor,
    labels: &Tensor,
) -> Result<Tensor> {
    let (n, c) = check(logits, labels)?;
    if grad_loss.elem_count() != 1 {
        return Err(crate::invalid!(
            OP,
            "loss gradient must be a scalar, got shape {:?}",
            grad_loss.dims()
        ));
    }
    #[cfg(feature = "cuda")]
    if crate::route::route(logits.device()) == crate::route::Route::Cuda
        && crate::gpu::cuda::has_kernel_with_16_bit(logits.dtype())
    {
        return cuda::cross_entropy_backward(OP, grad_loss, logits, labels);
    }
    if crate::cpu::on_cpu_kernel(logits) {
        return crate::cpu::dispatch_float!(
            OP,
            logits.dtype(),
            backward_on_cpu(grad_loss, logits, labels)
        );
    }
    let probs = log_softmax(logits)?.exp().ctx(OP)?;
    let classes = Tensor::arange(0u32, c as u32, logits.device())
        .ctx(OP)?
        .unsqueeze(0)
        .ctx(OP)?;
    let onehot = labels_u32(labels)?
        .unsqueeze(1)
        .ctx(OP)?
        .broadcast_eq(&classes)
        .ctx(OP)?
        .to_dtype(logits.dtype())
        .ctx(OP)?;
    let scale = (grad_loss
        .reshape(())
        .ctx(OP)?
        .to_dtype(logits.dtype())
        .ctx(OP)?
        / n as f64)
        .ctx(OP)?;
    (probs - onehot).ctx(OP)?.broadcast_mul(&scale).ctx(OP)
}

/// The backward on the CPU: each row's softmax by wick's kernel, minus one at the label,
/// times `grad_loss / N`, in one more pass over the probabilities.
fn backward_on_cpu<T: crate::cpu::Float>(
    grad_loss: &Tensor,
    logits: &Tensor,
    labels: &Tensor,
) -> Result<Tensor> {
    use crate::softmax_cpu::{forward_values, SoftmaxKind};
    let (n, c) = (logits.dims()[0], logits.dims()[1]);
    let scale = grad_loss
        .flatten_all()
        .ctx(OP)?
        .to_dtype(DType::F64)
        .ctx(OP)?
        .to_vec1::<f64>()
        .ctx(OP)?[0]
        / n as f64;
    let scale = T::from_f64(scale);
    let labels = labels
        .to_dtype(DType::I64)
        .ctx(OP)?
        .to_vec1::<i64>()
        .ctx(OP)?;
    let mut grad = forward_values::<T>(logits, 1, SoftmaxKind::Softmax)?;
    for (row, &label) in grad.chunks_exact_mut(c).zip(&labels) {
        // A label outside 0..C (unchecked here, see above) subtracts nothing.
        if let Some(p) = usize::try_from(label).ok().and_then(|l| row.get_mut(l)) {
            *p -= T::ONE;
        }
        for v in row.iter_mut() {
            *v *= scale;
        }
    }
    crate::cpu::tensor(OP, grad, (n, c))
}

/// FLOPs of the forward pass: about 4 per logit (max, subtract, exp, sum).
pub fn cross_entropy_flops(logits: &[usize]) -> u64 {
    crate::shape::flop_count(4, logits)
}

/// FLOPs of the backward pass: about 3 per logit (softmax from the log-sum-exp, minus the
/// one-hot, scale).
pub fn cross_entropy_backward_flops(logits: &[usize]) -> u64 {
    crate::shape::flop_count(3, logits)
}
