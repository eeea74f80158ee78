//! The op families' CUDA entry points: each checks nothing the family's public function
//! has not checked already, makes its inputs contiguous, and launches wick's kernels with
//! the [`Launch`] the emulated tests use.

use candle_core::cuda::cudarc::driver::CudaViewMut;
use candle_core::{DType, Tensor};

use super::cuda::{device_of, dispatch, launch, output, suffix, view, with_scratch, wrap, Source};
use super::{Launch, WorkspaceLayout};
use crate::batchnorm::{BatchNorm2dParams, BatchNormGrads, BatchNormOutput};
use crate::error::{CandleContext, OpError, Result};

fn contiguous(op: &'static str, t: &Tensor) -> Result<Tensor> {
    t.contiguous().ctx(op)
}

fn empty_like(op: &'static str, t: &Tensor, shape: &[usize]) -> Result<Tensor> {
    Tensor::zeros(shape, t.dtype(), t.device()).ctx(op)
}

/// `<base>_forward_<dtype>` of crates/ops/cuda/elementwise.cu on `x`.
pub(crate) fn activation_forward(
    op: &'static str,
    base: &str,
    x: &Tensor,
    slope: f64,
) -> Result<Tensor> {
    let n = x.elem_count();
    if n == 0 {
        return empty_like(op, x, x.dims());
    }
    let (dev, x) = (device_of(op, x)?, contiguous(op, x)?);
    let name = format!("{base}_forward_{}", suffix(op, x.dtype())?);
    dispatch!(op, x.dtype(), T => {
        let (xs, xl) = x.storage_and_layout();
        let xv = view::<T>(op, &xs, xl)?;
        let mut y = output::<T>(op, &dev, n)?;
        let (len, slope) = (n as i64, slope as T);
        launch!(op, dev, Source::Elementwise, name, Launch::elementwise(n), [&xv, &mut y, &len, &slope]);
        Ok(wrap(y, &dev, x.dims()))
    })
}

/// `<base>_backward_<dtype>`: the input gradient from the output gradient and the saved
/// input (or output).
pub(crate) fn activation_backward(
    op: &'static str,
    base: &str,
    grad_y: &Tensor,
    saved: &Tensor,
    slope: f64,
) -> Result<Tensor> {
    let n = grad_y.elem_count();
    if n == 0 {
        return empty_like(op, grad_y, grad_y.dims());
    }
    let dev = device_of(op, grad_y)?;
    let (g, s) = (contiguous(op, grad_y)?, contiguous(op, saved)?);
    let name = format!("{base}_backward_{}", suffix(op, g.dtype())?);
    dispatch!(op, g.dtype(), T => {
        let ((gs, gl), (ss, sl)) = (g.storage_and_layout(), s.storage_and_layout());
        let (gv, sv) = (view::<T>(op, &gs, gl)?, view::<T>(op, &ss, sl)?);
        let mut dx = output::<T>(op, &dev, n)?;
        let (len, slope) = (n as i64, slope as T);
        launch!(op, dev, Source::Elementwise, name, Launch::elementwise(n), [&gv, &sv, &mut dx, &len, &slope]);
        Ok(wrap(dx, &dev, g.dims()))
    })
}

/// `add` or `add_relu` of two tensors of one shape and dtype.
pub(crate) fn binary(op: &'static str, base: &str, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let n = a.elem_count();
    if n == 0 {
        return empty_like(op, a, a.dims());
    }
    let dev = device_of(op, a)?;
    let (a, b) = (contiguous(op, a)?, contiguous(op, b)?);
    let name = format!("{base}_{}", suffix(op, a.dtype())?);
    dispatch!(op, a.dtype(), T => {
        let ((as_, al), (bs, bl)) = (a.storage_and_layout(), b.storage_and_layout());
        let (av, bv) = (view::<T>(op, &as_, al)?, view::<T>(op, &bs, bl)?);
        let mut y = output::<T>(op, &dev, n)?;
        let len = n as i64;
        launch!(op, dev, Source::Elementwise, name, Launch::elementwise(n), [&av, &bv, &mut y, &len]);
        Ok(wrap(y, &dev, a.dims()))
    })
}

/// Global average pooling [N, C, H, W] -> [N, C, 1, 1]: one warp per plane.
pub(crate) fn global_avg_pool(
    op: &'static str,
    x: &Tensor,
    [n, c, h, w]: [usize; 4],
) -> Result<Tensor> {
    let planes = n * c;
    if planes == 0 || h * w == 0 {
        return (x.sum_keepdim(3).ctx(op)?.sum_keepdim(2).ctx(op)? / (h * w).max(1) as f64).ctx(op);
    }
    let (dev, x) = (device_of(op, x)?, contiguous(op, x)?);
    let hw = super::launch::kernel_int(op, "plane size", h * w)?;
    let name = format!("global_avg_pool_forward_{}", suffix(op, x.dtype())?);
    dispatch!(op, x.dtype(), T => {
        let (xs, xl) = x.storage_and_layout();
        let xv = view::<T>(op, &xs, xl)?;
        let mut y = output::<T>(op, &dev, planes)?;
        let p = planes as i64;
        launch!(op, dev, Source::GlobalPool, name, Launch::global_avg_pool(planes), [&xv, &mut y, &p, &hw]);
        Ok(wrap(y, &dev, &[n, c, 1, 1]))
    })
}

/// Global average pooling backward: each plane's gradient over its H*W inputs.
pub(crate) fn global_avg_pool_backward(
    op: &'static str,
    grad_y: &Tensor,
    shape: [usize; 4],
) -> Result<Tensor> {
    let total: usize = shape.iter().product();
    if total == 0 {
        return empty_like(op, grad_y, &shape);
    }
    let (dev, g) = (device_of(op, grad_y)?, contiguous(op, grad_y)?);
    let hw = super::launch::kernel_int(op, "plane size", shape[2] * shape[3])?;
    let name = format!("global_avg_pool_backward_{}", suffix(op, g.dtype())?);
    dispatch!(op, g.dtype(), T => {
        let (gs, gl) = g.storage_and_layout();
        let gv = view::<T>(op, &gs, gl)?;
        let mut dx = output::<T>(op, &dev, total)?;
        let len = total as i64;
        launch!(op, dev, Source::GlobalPool, name, Launch::elementwise(total), [&gv, &mut dx, &len, &hw]);
        Ok(wrap(dx, &dev, &shape))
    })
}

/// Cross-entropy's per-row log-sum-exp and loss, then the mean, all on the device, for
/// `u32` labels ([`labels_u32`]): returns (loss as a 0-dim tensor, log-sum-exp per row).
fn cross_entropy_rows(
    op: &'static str,
    logits: &Tensor,
    labels: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let (dev, x) = (device_of(op, logits)?, contiguous(op, logits)?);
    let (rows, classes) = x.dims2().ctx(op)?;
    let (n, k) = (
        super::launch::kernel_int(op, "batch", rows)?,
        super::launch::kernel_int(op, "classes", classes)?,
    );
    let sfx = suffix(op, x.dtype())?;
    dispatch!(op, x.dtype(), T => {
        let ((xs, xl), (ls, ll)) = (x.storage_and_layout(), labels.storage_and_layout());
        let (xv, lv) = (view::<T>(op, &xs, xl)?, view::<u32>(op, &ls, ll)?);
        let (mut row_loss, mut lse) = (output::<T>(op, &dev, rows)?, output::<T>(op, &dev, rows)?);
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
    let name = format!("cross_entropy_backward_{}", suffix(op, x.dtype())?);
    dispatch!(op, x.dtype(), T => {
        let ((xs, xl), (ls, ll)) = (x.storage_and_layout(), labels.storage_and_layout());
        let ((es, el), (gs, gl)) = (lse.storage_and_layout(), grad_loss.storage_and_layout());
        let (xv, lv) = (view::<T>(op, &xs, xl)?, view::<u32>(op, &ls, ll)?);
        let (ev, gv) = (view::<T>(op, &es, el)?, view::<T>(op, &gs, gl)?);
        let mut dx = output::<T>(op, &dev, rows * classes)?;
        launch!(op, dev, Source::CrossEntropy, name, Launch::elementwise(rows * classes),
            [&xv, &lv, &ev, &gv, &mut dx, &n, &k]);
        Ok(wrap(dx, &dev, &[rows, classes]))
    })
}

/// Batch norm training forward (and ReLU when `relu`): two launches, the partial moments
/// in a workspace of 3 values per block.
pub(crate) fn batch_norm_train(
    op: &'static str,
    x: &Tensor,
    [weight, bias, running_mean, running_var]: [&Tensor; 4],
    p: &BatchNorm2dParams,
    relu: bool,
) -> Result<BatchNormOutput> {
    let (n, c, h, w) = x.dims4().ctx(op)?;
    let launch = Launch::batch_norm(op, n, c, h * w)?;
    let (dev, x) = (device_of(op, x)?, contiguous(op, x)?);
    let per =
        |t: &Tensor| -> Result<Tensor> { t.to_dtype(x.dtype()).ctx(op)?.contiguous().ctx(op) };
    let (wt, bt, rmt, rvt) = (
        per(weight)?,
        per(bias)?,
        per(running_mean)?,
        per(running_var)?,
    );
    let (ni, ci, hwi, relu_i) = (n as i32, c as i32, (h * w) as i32, relu as i32);
    let sfx = suffix(op, x.dtype())?;
    dispatch!(op, x.dtype(), T => {
        let (xs, xl) = x.storage_and_layout();
        let xv = view::<T>(op, &xs, xl)?;
        let layout = WorkspaceLayout::batch_norm(&launch, std::mem::size_of::<T>());
        with_scratch(op, &dev, layout.bytes(), |mut scratch| {
        let mut partial = partial_moments::<T>(op, &mut scratch, &launch)?;
        launch!(op, dev, Source::BatchNorm, format!("batch_norm_moments_{sfx}"), launch,
            [&xv, &mut partial, &ni, &ci, &hwi]);
        let ((ws, wl), (bs, bl)) = (wt.storage_and_layout(), bt.storage_and_layout());
        let ((ms, ml), (vs, vl)) = (rmt.storage_and_layout(), rvt.storage_and_layout());
        let (wv, bv) = (view::<T>(op, &ws, wl)?, view::<T>(op, &bs, bl)?);
        let (mv, vv) = (view::<T>(op, &ms, ml)?, view::<T>(op, &vs, vl)?);
        let mut y = output::<T>(op, &dev, x.elem_count())?;
        let (mut mean, mut inv_std) = (output::<T>(op, &dev, c)?, output::<T>(op, &dev, c)?);
        let (mut rm, mut rv) = (output::<T>(op, &dev, c)?, output::<T>(op, &dev, c)?);
        let partial = partial.slice(..);
        launch!(op, dev, Source::BatchNorm, format!("batch_norm_train_forward_{sfx}"), launch,
            [&xv, &mut y, &partial, &wv, &bv, &mv, &vv, &mut mean, &mut inv_std, &mut rm, &mut rv,
             &ni, &ci, &hwi, &relu_i, &p.eps, &p.momentum]);
        Ok(BatchNormOutput {
            y: wrap(y, &dev, x.dims()),
            mean: wrap(mean, &dev, &[c]),
            inv_std: wrap(inv_std, &dev, &[c]),
            running_mean: wrap(rm, &dev, &[c]),
            running_var: wrap(rv, &dev, &[c]),
        })
        })
    })
}

/// Batch norm training backward, with the ReLU mask of the forward output `z` when given.
pub(crate) fn batch_norm_train_backward(
    op: &'static str,
    grad_y: &Tensor,
    z: Option<&Tensor>,
    x: &Tensor,
    weight: &Tensor,
    mean: &Tensor,
    inv_std: &Tensor,
) -> Result<BatchNormGrads> {
    let (n, c, h, w) = x.dims4().ctx(op)?;
    let launch = Launch::batch_norm(op, n, c, h * w)?;
    let dev = device_of(op, x)?;
    let dt = x.dtype();
    let cont = |t: &Tensor| -> Result<Tensor> { t.to_dtype(dt).ctx(op)?.contiguous().ctx(op) };
    let (g, x, wt, mt, it) = (
        cont(grad_y)?,
        cont(x)?,
        cont(weight)?,
        cont(mean)?,
        cont(inv_std)?,
    );
    let z = z.map(cont).transpose()?;
    let (ni, ci, hwi) = (n as i32, c as i32, (h * w) as i32);
    let sfx = suffix(op, dt)?;
    dispatch!(op, dt, T => {
        let ((gs, gl), (xs, xl)) = (g.storage_and_layout(), x.storage_and_layout());
        let ((ws, wl), (ms, ml)) = (wt.storage_and_layout(), mt.storage_and_layout());
        let (is, il) = it.storage_and_layout();
        let (gv, xv) = (view::<T>(op, &gs, gl)?, view::<T>(op, &xs, xl)?);
        let (wv, mv, iv) = (view::<T>(op, &ws, wl)?, view::<T>(op, &ms, ml)?, view::<T>(op, &is, il)?);
        let zs = z.as_ref().map(|z| z.storage_and_layout());
        let zv = match &zs {
            Some((s, l)) => Some(view::<T>(op, s, l)?),
            None => None,
        };
        let layout = WorkspaceLayout::batch_norm(&launch, std::mem::size_of::<T>());
        with_scratch(op, &dev, layout.bytes(), |mut scratch| {
        let mut partial = partial_moments::<T>(op, &mut scratch, &launch)?;
        let mut dx = output::<T>(op, &dev, x.elem_count())?;
        let (mut dw, mut db) = (output::<T>(op, &dev, c)?, output::<T>(op, &dev, c)?);
        let null = 0u64;
        match &zv {
            Some(zv) => {
                launch!(op, dev, Source::BatchNorm, format!("batch_norm_backward_sums_{sfx}"), launch,
                    [&gv, zv, &xv, &mv, &mut partial, &ni, &ci, &hwi]);
                let partial = partial.slice(..);
                launch!(op, dev, Source::BatchNorm, format!("batch_norm_train_backward_{sfx}"), launch,
                    [&gv, zv, &xv, &wv, &mv, &iv, &partial, &mut dx, &mut dw, &mut db, &ni, &ci, &hwi]);
            }
            None => {
                launch!(op, dev, Source::BatchNorm, format!("batch_norm_backward_sums_{sfx}"), launch,
                    [&gv, &null, &xv, &mv, &mut partial, &ni, &ci, &hwi]);
                let partial = partial.slice(..);
                launch!(op, dev, Source::BatchNorm, format!("batch_norm_train_backward_{sfx}"), launch,
                    [&gv, &null, &xv, &wv, &mv, &iv, &partial, &mut dx, &mut dw, &mut db, &ni, &ci, &hwi]);
            }
        }
        Ok(BatchNormGrads {
            x: wrap(dx, &dev, x.dims()),
            weight: wrap(dw, &dev, &[c]),
            bias: wrap(db, &dev, &[c]),
        })
        })
    })
}

/// Batch norm's partial moments in `scratch` (its first region).
fn partial_moments<'a, T>(
    op: &'static str,
    scratch: &'a mut CudaViewMut<'_, u8>,
    launch: &Launch,
) -> Result<CudaViewMut<'a, T>> {
    // SAFETY: the moments kernel writes every partial value before the second kernel
    // reads them; `transmute_mut` checks the length.
    unsafe { scratch.transmute_mut::<T>(launch.batch_norm_workspace()) }
        .ok_or_else(|| OpError::invalid(op, "the workspace is smaller than the partial moments"))
}

/// Batch norm inference forward: one pass.
pub(crate) fn batch_norm_eval(
    op: &'static str,
    x: &Tensor,
    [weight, bias, running_mean, running_var]: [&Tensor; 4],
    eps: f64,
) -> Result<Tensor> {
    let (_, c, h, w) = x.dims4().ctx(op)?;
    let total = x.elem_count();
    if total == 0 {
        return empty_like(op, x, x.dims());
    }
    let (dev, x) = (device_of(op, x)?, contiguous(op, x)?);
    let per =
        |t: &Tensor| -> Result<Tensor> { t.to_dtype(x.dtype()).ctx(op)?.contiguous().ctx(op) };
    let (wt, bt, rmt, rvt) = (
        per(weight)?,
        per(bias)?,
        per(running_mean)?,
        per(running_var)?,
    );
    let (len, ci, hwi) = (total as i64, c as i32, (h * w) as i32);
    let name = format!("batch_norm_eval_forward_{}", suffix(op, x.dtype())?);
    dispatch!(op, x.dtype(), T => {
        let (xs, xl) = x.storage_and_layout();
        let ((ws, wl), (bs, bl)) = (wt.storage_and_layout(), bt.storage_and_layout());
        let ((ms, ml), (vs, vl)) = (rmt.storage_and_layout(), rvt.storage_and_layout());
        let xv = view::<T>(op, &xs, xl)?;
        let (wv, bv) = (view::<T>(op, &ws, wl)?, view::<T>(op, &bs, bl)?);
        let (mv, vv) = (view::<T>(op, &ms, ml)?, view::<T>(op, &vs, vl)?);
        let mut y = output::<T>(op, &dev, total)?;
        launch!(op, dev, Source::BatchNorm, name, Launch::elementwise(total),
            [&xv, &mut y, &wv, &bv, &mv, &vv, &len, &ci, &hwi, &eps]);
        Ok(wrap(y, &dev, x.dims()))
    })
}
