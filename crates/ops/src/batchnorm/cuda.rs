//! Batch norm on CUDA (`crates/ops/cuda/batchnorm.cu`): training forward (with the fused
//! ReLU), backward (with the ReLU mask) and inference forward, in f32, f64, and bf16 and
//! f16 (partial moments and sums in float, each output rounded once).

use candle_core::cuda::cudarc::driver::CudaViewMut;
use candle_core::Tensor;

use super::params::{BatchNorm2dParams, BatchNormGrads, BatchNormOutput};
use crate::error::{CandleContext, OpError, Result};
use crate::gpu::cuda::{
    contiguous, device_of, dispatch_with_16_bit, empty_like, launch, output, suffix_with_16_bit,
    view, wrap, Source,
};
use crate::gpu::workspace::with_scratch;
use crate::gpu::{Launch, WorkspaceLayout};

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
    let [wt, bt, rmt, rvt] = per_channel(op, &x, [weight, bias, running_mean, running_var])?;
    let (ni, ci, hwi, relu_i) = (n as i32, c as i32, (h * w) as i32, relu as i32);
    let sfx = suffix_with_16_bit(op, x.dtype())?;
    dispatch_with_16_bit!(op, x.dtype(), T, A => {
        let (xs, xl) = x.storage_and_layout();
        let xv = view::<T>(op, &xs, xl)?;
        let layout = WorkspaceLayout::batch_norm(&launch, std::mem::size_of::<A>());
        with_scratch(op, &dev, layout.bytes(), |mut scratch| {
        let mut partial = partial_moments::<A>(op, &mut scratch, &launch)?;
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
    let sfx = suffix_with_16_bit(op, dt)?;
    dispatch_with_16_bit!(op, dt, T, A => {
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
        let layout = WorkspaceLayout::batch_norm(&launch, std::mem::size_of::<A>());
        with_scratch(op, &dev, layout.bytes(), |mut scratch| {
        let mut partial = partial_moments::<A>(op, &mut scratch, &launch)?;
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
    let [wt, bt, rmt, rvt] = per_channel(op, &x, [weight, bias, running_mean, running_var])?;
    let (len, ci, hwi) = (total as i64, c as i32, (h * w) as i32);
    let name = format!(
        "batch_norm_eval_forward_{}",
        suffix_with_16_bit(op, x.dtype())?
    );
    dispatch_with_16_bit!(op, x.dtype(), T, _A => {
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

/// The four per-channel tensors in `x`'s dtype, contiguous, as the kernels read them.
fn per_channel(op: &'static str, x: &Tensor, ts: [&Tensor; 4]) -> Result<[Tensor; 4]> {
    let per =
        |t: &Tensor| -> Result<Tensor> { t.to_dtype(x.dtype()).ctx(op)?.contiguous().ctx(op) };
    Ok([per(ts[0])?, per(ts[1])?, per(ts[2])?, per(ts[3])?])
}
