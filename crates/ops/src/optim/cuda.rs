//! The multi-tensor optimizer updates on CUDA: one launch updates every parameter in
//! place, through tables of device pointers and the [`ChunkTable`], uploaded into the
//! lent [`Workspace`](crate::gpu::Workspace) (laid out by [`WorkspaceLayout::multi_tensor`]). The flags of
//! parameters that became non-finite stay on the device (a `u32` tensor, one per
//! parameter) until the caller reads them where it synchronises anyway. Parameters of
//! f32, f64, bf16 or f16 (the 16-bit ones updated in float, each value rounded once).

use std::sync::Arc;

use candle_core::cuda::cudarc::driver::{
    CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DeviceRepr,
};
use candle_core::{Storage, Tensor};

use super::params::{AdamParams, SgdParams};
use crate::error::{CandleContext, OpError, Result};
use crate::gpu::cuda::{
    cuda_err, device_of, dispatch_with_16_bit, launch, region, suffix_with_16_bit, wrap, zeros,
    Source,
};
use crate::gpu::workspace::with_scratch;
use crate::gpu::{ChunkTable, Launch, WorkspaceLayout, CHUNK_LEN};

/// The device addresses of the tensors' elements (each contiguous), in order.
fn addresses<T: candle_core::cuda::CudaDType>(
    op: &'static str,
    tensors: &[&Tensor],
) -> Result<Vec<u64>> {
    tensors
        .iter()
        .map(|t| {
            if !t.is_contiguous() {
                return Err(crate::invalid!(
                    op,
                    "the multi-tensor update needs contiguous tensors, got {:?} strided",
                    t.dims()
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

/// What one launch's tables hold, on the host: the device addresses per role, and the
/// chunk table.
struct HostTables {
    pointers: Vec<Vec<u64>>,
    table: ChunkTable,
}

impl HostTables {
    fn new<T: candle_core::cuda::CudaDType>(
        op: &'static str,
        roles: &[&[&Tensor]],
    ) -> Result<HostTables> {
        let sizes: Vec<usize> = roles[0].iter().map(|t| t.elem_count()).collect();
        for role in &roles[1..] {
            if role.len() != sizes.len()
                || role.iter().zip(&sizes).any(|(t, &n)| t.elem_count() != n)
            {
                return Err(OpError::invalid(
                    op,
                    "every role of the multi-tensor update needs one tensor of each parameter's size",
                ));
            }
        }
        Ok(HostTables {
            pointers: roles
                .iter()
                .map(|r| addresses::<T>(op, r))
                .collect::<Result<_>>()?,
            table: ChunkTable::new(op, &sizes, CHUNK_LEN)?,
        })
    }

    fn layout(&self) -> WorkspaceLayout {
        WorkspaceLayout::multi_tensor(&self.table, self.pointers.len())
    }
}

/// The tables of one launch on the device, in the scratch they were uploaded to.
struct Tables<'a> {
    pointers: Vec<CudaView<'a, u64>>,
    sizes: CudaView<'a, i64>,
    tensor: CudaView<'a, i32>,
    start: CudaView<'a, i64>,
}

/// Copies `host` into `range` of `scratch`, on `stream` (ordered after the kernels
/// before it that used the same scratch).
fn put<T: DeviceRepr>(
    op: &'static str,
    stream: &Arc<CudaStream>,
    scratch: &mut CudaViewMut<'_, u8>,
    range: std::ops::Range<usize>,
    host: &[T],
) -> Result<()> {
    if host.is_empty() {
        return Ok(());
    }
    let mut bytes = scratch.slice_mut(range);
    // SAFETY: the bytes are overwritten whole with `T` values; the length is checked.
    let mut dst = unsafe { bytes.transmute_mut::<T>(host.len()) }
        .ok_or_else(|| OpError::invalid(op, "a scratch region is smaller than its table"))?;
    stream
        .memcpy_htod(host, &mut dst)
        .map_err(cuda_err(op, "uploading the multi-tensor tables"))
}

/// Uploads `host` into `scratch` (laid out by [`HostTables::layout`]) and returns views
/// of the tables there.
fn upload<'a>(
    op: &'static str,
    dev: &candle_core::CudaDevice,
    scratch: &'a mut CudaViewMut<'_, u8>,
    host: &HostTables,
) -> Result<Tables<'a>> {
    let (layout, stream, t) = (host.layout(), dev.cuda_stream(), &host.table);
    let roles = host.pointers.len();
    for (i, p) in host.pointers.iter().enumerate() {
        put(op, &stream, scratch, layout.region(i), p)?;
    }
    put(op, &stream, scratch, layout.region(roles), &t.sizes)?;
    put(op, &stream, scratch, layout.region(roles + 1), &t.tensor)?;
    put(op, &stream, scratch, layout.region(roles + 2), &t.start)?;
    let written: &'a CudaViewMut<'_, u8> = scratch;
    let base: CudaView<'a, u8> = written.slice(..);
    let (params, chunks) = (t.sizes.len(), t.tensor.len());
    Ok(Tables {
        pointers: (0..roles)
            .map(|i| region(op, &base, layout.region(i), params))
            .collect::<Result<_>>()?,
        sizes: region(op, &base, layout.region(roles), params)?,
        tensor: region(op, &base, layout.region(roles + 1), chunks)?,
        start: region(op, &base, layout.region(roles + 2), chunks)?,
    })
}

/// One non-finite flag per parameter, zeroed, on the device.
fn flags(op: &'static str, dev: &candle_core::CudaDevice, n: usize) -> Result<CudaSlice<u32>> {
    zeros::<u32>(op, dev, n)
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
    let sfx = suffix_with_16_bit(op, dtype)?;
    dispatch_with_16_bit!(op, dtype, T, S => {
        let mut roles: Vec<&[&Tensor]> = vec![params, &grads];
        if let Some(b) = bufs {
            roles.push(b);
        }
        let host = HostTables::new::<T>(op, &roles)?;
        let mut flags = flags(op, &dev, params.len())?;
        let (chunks, chunk_len) = (host.table.chunks(), host.table.chunk_len);
        let (lr, momentum, dampening, wd) = (p.lr as S, p.momentum as S, p.dampening as S, p.weight_decay as S);
        let (nesterov, first_i) = (p.nesterov as i32, first_step as i32);
        let launch_config = Launch::multi_tensor(&host.table);
        with_scratch(op, &dev, host.layout().bytes(), |mut scratch| {
            let t = upload(op, &dev, &mut scratch, &host)?;
            let null = 0u64;
            match t.pointers.get(2) {
                Some(b) => launch!(op, dev, Source::Optimizer, format!("sgd_multi_tensor_{sfx}"), launch_config,
                    [&t.pointers[0], &t.pointers[1], b, &t.sizes, &t.tensor, &t.start, &chunks, &chunk_len,
                     &lr, &momentum, &dampening, &wd, &nesterov, &first_i, &mut flags]),
                None => launch!(op, dev, Source::Optimizer, format!("sgd_multi_tensor_{sfx}"), launch_config,
                    [&t.pointers[0], &t.pointers[1], &null, &t.sizes, &t.tensor, &t.start, &chunks, &chunk_len,
                     &lr, &momentum, &dampening, &wd, &nesterov, &first_i, &mut flags]),
            }
            Ok(())
        })?;
        Ok(wrap(flags, &dev, &[params.len()]))
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
    let sfx = suffix_with_16_bit(op, dtype)?;
    let k = p.step_constants(step);
    dispatch_with_16_bit!(op, dtype, T, S => {
        let host = HostTables::new::<T>(op, &[params, &grads, exp_avg, exp_avg_sq])?;
        let mut flags = flags(op, &dev, params.len())?;
        let (chunks, chunk_len) = (host.table.chunks(), host.table.chunk_len);
        let (decay, decoupled, b2) = (k.decay as S, k.decoupled as i32, k.beta2 as S);
        let (omb1, omb2, eps) = (k.one_minus_beta1 as S, k.one_minus_beta2 as S, k.eps as S);
        let (ss, b2s) = (k.step_size as S, k.bias2_sqrt as S);
        let launch_config = Launch::multi_tensor(&host.table);
        with_scratch(op, &dev, host.layout().bytes(), |mut scratch| {
            let t = upload(op, &dev, &mut scratch, &host)?;
            launch!(op, dev, Source::Optimizer, format!("adam_multi_tensor_{sfx}"), launch_config,
                [&t.pointers[0], &t.pointers[1], &t.pointers[2], &t.pointers[3], &t.sizes, &t.tensor, &t.start,
                 &chunks, &chunk_len, &decay, &decoupled, &b2, &omb1, &omb2, &eps, &ss, &b2s, &mut flags]);
            Ok(())
        })?;
        Ok(wrap(flags, &dev, &[params.len()]))
    })
}
