//! The multi-tensor optimizer updates on CUDA: one launch updates every parameter in
//! place, through tables of device pointers and the [`ChunkTable`]. The flags of
//! parameters that became non-finite stay on the device (a `u32` tensor, one per
//! parameter) until the caller reads them where it synchronises anyway.

use candle_core::cuda::cudarc::driver::{CudaSlice, DevicePtr};
use candle_core::{Storage, Tensor};

use super::cuda::{cuda_err, device_of, dispatch, launch, suffix, wrap, Source};
use super::{ChunkTable, Launch, CHUNK_LEN};
use crate::adam::AdamParams;
use crate::error::{CandleContext, OpError, Result};
use crate::optim::SgdParams;

/// The device addresses of the tensors' elements (each contiguous), in order.
fn addresses<T: candle_core::cuda::CudaDType>(
    op: &'static str,
    tensors: &[&Tensor],
) -> Result<Vec<u64>> {
    tensors
        .iter()
        .map(|t| {
            if !t.is_contiguous() {
                return Err(OpError::invalid(
                    op,
                    format!(
                        "the multi-tensor update needs contiguous tensors, got {:?} strided",
                        t.dims()
                    ),
                ));
            }
            let (storage, layout) = t.storage_and_layout();
            let Storage::Cuda(cs) = &*storage else {
                return Err(OpError::Unsupported {
                    op,
                    what: "the multi-tensor update asked for a non-CUDA tensor".into(),
                });
            };
            let slice = cs.as_cuda_slice::<T>().ctx(op)?;
            let (ptr, _sync) = slice.device_ptr(slice.stream());
            Ok(ptr + (layout.start_offset() * std::mem::size_of::<T>()) as u64)
        })
        .collect()
}

/// The uploaded tables of one launch: pointers per role, sizes, chunks, and the flags.
struct Tables {
    pointers: Vec<CudaSlice<u64>>,
    sizes: CudaSlice<i64>,
    tensor: CudaSlice<i32>,
    start: CudaSlice<i64>,
    flags: CudaSlice<u32>,
    table: ChunkTable,
}

fn upload<T: candle_core::cuda::CudaDType>(
    op: &'static str,
    dev: &candle_core::CudaDevice,
    roles: &[&[&Tensor]],
) -> Result<Tables> {
    let sizes: Vec<usize> = roles[0].iter().map(|t| t.elem_count()).collect();
    for role in &roles[1..] {
        if role.len() != sizes.len() || role.iter().zip(&sizes).any(|(t, &n)| t.elem_count() != n) {
            return Err(OpError::invalid(
                op,
                "every role of the multi-tensor update needs one tensor of each parameter's size",
            ));
        }
    }
    let table = ChunkTable::new(op, &sizes, CHUNK_LEN)?;
    let stream = dev.cuda_stream();
    let err = || cuda_err(op, "uploading the multi-tensor tables");
    let pointers = roles
        .iter()
        .map(|r| stream.clone_htod(&addresses::<T>(op, r)?).map_err(err()))
        .collect::<Result<Vec<_>>>()?;
    Ok(Tables {
        pointers,
        sizes: stream.clone_htod(&table.sizes).map_err(err())?,
        tensor: stream.clone_htod(&table.tensor).map_err(err())?,
        start: stream.clone_htod(&table.start).map_err(err())?,
        flags: stream
            .alloc_zeros::<u32>(sizes.len().max(1))
            .map_err(err())?,
        table,
    })
}

/// The device and dtype of the first parameter, and the gradients made contiguous: what
/// both updates start from.
fn prologue(
    op: &'static str,
    params: &[&Tensor],
    grads: &[&Tensor],
) -> Result<(candle_core::CudaDevice, candle_core::DType, Vec<Tensor>)> {
    let first = params
        .first()
        .ok_or_else(|| OpError::invalid(op, "no parameters to update"))?;
    let grads = grads
        .iter()
        .map(|g| g.contiguous().ctx(op))
        .collect::<Result<_>>()?;
    Ok((device_of(op, first)?, first.dtype(), grads))
}

/// SGD on every parameter in one launch, in place (`bufs`: the momentum buffers, updated
/// in place too; on the first step they are written, not read). Returns the non-finite
/// flags, a `u32` tensor with one value per parameter, on the device.
///
/// The caller owns the parameters and buffers exclusively: every tensor sharing their
/// storage sees the update.
pub(crate) fn sgd_multi_tensor(
    op: &'static str,
    params: &[&Tensor],
    grads: &[&Tensor],
    bufs: Option<&[&Tensor]>,
    p: &SgdParams,
    first_step: bool,
) -> Result<Tensor> {
    let (dev, dtype, grads) = prologue(op, params, grads)?;
    let grads: Vec<&Tensor> = grads.iter().collect();
    let sfx = suffix(op, dtype)?;
    dispatch!(op, dtype, T => {
        let mut roles: Vec<&[&Tensor]> = vec![params, &grads];
        if let Some(b) = bufs {
            roles.push(b);
        }
        let mut t = upload::<T>(op, &dev, &roles)?;
        let null = 0u64;
        let (chunks, chunk_len) = (t.table.chunks(), t.table.chunk_len);
        let (lr, momentum, dampening, wd) = (p.lr as T, p.momentum as T, p.dampening as T, p.weight_decay as T);
        let (nesterov, first_i) = (p.nesterov as i32, first_step as i32);
        let launch_config = Launch::multi_tensor(&t.table);
        let bufs_ptr = t.pointers.get(2);
        match bufs_ptr {
            Some(b) => launch!(op, dev, Source::Optimizer, format!("sgd_multi_tensor_{sfx}"), launch_config,
                [&t.pointers[0], &t.pointers[1], b, &t.sizes, &t.tensor, &t.start, &chunks, &chunk_len,
                 &lr, &momentum, &dampening, &wd, &nesterov, &first_i, &mut t.flags]),
            None => launch!(op, dev, Source::Optimizer, format!("sgd_multi_tensor_{sfx}"), launch_config,
                [&t.pointers[0], &t.pointers[1], &null, &t.sizes, &t.tensor, &t.start, &chunks, &chunk_len,
                 &lr, &momentum, &dampening, &wd, &nesterov, &first_i, &mut t.flags]),
        }
        Ok(wrap(t.flags, &dev, &[params.len()]))
    })
}

/// Adam or AdamW on every parameter in one launch, in place; `step` is 1-based. Returns
/// the non-finite flags on the device, as [`sgd_multi_tensor`].
pub(crate) fn adam_multi_tensor(
    op: &'static str,
    params: &[&Tensor],
    grads: &[&Tensor],
    [exp_avg, exp_avg_sq]: [&[&Tensor]; 2],
    step: u64,
    p: &AdamParams,
) -> Result<Tensor> {
    if step == 0 {
        return Err(OpError::invalid(op, "the step number is 1-based, got 0"));
    }
    let (dev, dtype, grads) = prologue(op, params, grads)?;
    let grads: Vec<&Tensor> = grads.iter().collect();
    let sfx = suffix(op, dtype)?;
    let t_f = step as f64;
    let step_size = p.lr / (1.0 - p.beta1.powf(t_f));
    let bias2_sqrt = (1.0 - p.beta2.powf(t_f)).sqrt();
    dispatch!(op, dtype, T => {
        let mut t = upload::<T>(op, &dev, &[params, &grads, exp_avg, exp_avg_sq])?;
        let (chunks, chunk_len) = (t.table.chunks(), t.table.chunk_len);
        let (lr, b1, b2, eps, wd) = (p.lr as T, p.beta1 as T, p.beta2 as T, p.eps as T, p.weight_decay as T);
        let (decoupled, ss, b2s) = (p.decoupled as i32, step_size as T, bias2_sqrt as T);
        launch!(op, dev, Source::Optimizer, format!("adam_multi_tensor_{sfx}"), Launch::multi_tensor(&t.table),
            [&t.pointers[0], &t.pointers[1], &t.pointers[2], &t.pointers[3], &t.sizes, &t.tensor, &t.start,
             &chunks, &chunk_len, &lr, &b1, &b2, &eps, &wd, &decoupled, &ss, &b2s, &mut t.flags]);
        Ok(wrap(t.flags, &dev, &[params.len()]))
    })
}
