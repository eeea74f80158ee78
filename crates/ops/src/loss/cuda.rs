//! Softmax cross-entropy on CUDA (`crates/ops/cuda/cross_entropy.cu`): f32, f64, and bf16
//! and f16 logits whose per-row log-sum-exp and loss stay in float.

use candle_core::{DType, Tensor};

use crate::error::{CandleContext, Result};
use crate::gpu::cuda::{
    contiguous, device_of, dispatch_with_16_bit, launch, output, suffix_with_16_bit, view, wrap,
    Source,
};
use crate::gpu::Launch;

/// Cross-entropy's per-row log-sum-exp and loss, then the mean, all on the device, for
/// `u32` labels ([`labels_u32`]): returns (loss as a 0-dim tensor, log-sum-exp per row, in
/// the logits' dtype or, for 16-bit logits, in f32).
fn cross_entropy_rows(
    op: &'static str,
    logits: &Tensor,
    labels: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let (dev, x) = (device_of(op, logits)?, contiguous(op, logits)?);
    let (rows, classes) = x.dims2().ctx(op)?;
    let (n, k) = (
        crate::gpu::launch::kernel_int(op, "batch", rows)?,
        crate::gpu::launch::kernel_int(op, "classes", classes)?,
    );
    let sfx = suffix_with_16_bit(op, x.dtype())?;
    dispatch_with_16_bit!(op, x.dtype(), T, A => {
        let ((xs, xl), (ls, ll)) = (x.storage_and_layout(), labels.storage_and_layout());
        let (xv, lv) = (view::<T>(op, &xs, xl)?, view::<u32>(op, &ls, ll)?);
        let (mut row_loss, mut lse) = (output::<A>(op, &dev, rows)?, output::<A>(op, &dev, rows)?);
        launch!(op, dev, Source::CrossEntropy, format!("cross_entropy_rows_{sfx}"),
            Launch::cross_entropy_rows(rows, classes), [&xv, &lv, &mut row_loss, &mut lse, &n, &k]);
        let mut loss = output::<T>(op, &dev, 1)?;
        launch!(op, dev, Source::CrossEntropy, format!("cross_entropy_mean_{sfx}"),
            Launch::single_block(), [&row_loss, &mut loss, &n]);
        Ok((wrap(loss, &dev, &[]), wrap(lse, &dev, &[rows])))
    })
}

/// The labels as the kernels read them: contiguous `u32`.
fn labels_u32(op: &'static str, labels: &Tensor) -> Result<Tensor> {
    labels.to_dtype(DType::U32).ctx(op)?.contiguous().ctx(op)
}

/// Softmax cross-entropy forward, mean over the batch (0-dim).
pub(crate) fn cross_entropy(op: &'static str, logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    Ok(cross_entropy_rows(op, logits, &labels_u32(op, labels)?)?.0)
}

/// Softmax cross-entropy backward: the row log-sum-exps again (one read of the logits),
/// then `(softmax - onehot) * grad_loss / N` in one pass.
pub(crate) fn cross_entropy_backward(
    op: &'static str,
    grad_loss: &Tensor,
    logits: &Tensor,
    labels: &Tensor,
) -> Result<Tensor> {
    let labels = labels_u32(op, labels)?;
    let (_, lse) = cross_entropy_rows(op, logits, &labels)?;
    let (dev, x) = (device_of(op, logits)?, contiguous(op, logits)?);
    let grad_loss = grad_loss
        .to_dtype(x.dtype())
        .ctx(op)?
        .contiguous()
        .ctx(op)?;
    let (rows, classes) = x.dims2().ctx(op)?;
    let (n, k) = (rows as i32, classes as i32);
    let name = format!(
        "cross_entropy_backward_{}",
        suffix_with_16_bit(op, x.dtype())?
    );
    dispatch_with_16_bit!(op, x.dtype(), T, A => {
        let ((xs, xl), (ls, ll)) = (x.storage_and_layout(), labels.storage_and_layout());
        let ((es, el), (gs, gl)) = (lse.storage_and_layout(), grad_loss.storage_and_layout());
        let (xv, lv) = (view::<T>(op, &xs, xl)?, view::<u32>(op, &ls, ll)?);
        let (ev, gv) = (view::<A>(op, &es, el)?, view::<T>(op, &gs, gl)?);
        let mut dx = output::<T>(op, &dev, rows * classes)?;
        launch!(op, dev, Source::CrossEntropy, name, Launch::elementwise(rows * classes),
            [&xv, &lv, &ev, &gv, &mut dx, &n, &k]);
        Ok(wrap(dx, &dev, &[rows, classes]))
    })
}
