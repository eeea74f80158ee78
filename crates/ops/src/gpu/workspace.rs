//! Kernel scratch memory: what one kernel call needs beside its inputs and outputs (batch
//! norm's partial moments, the multi-tensor update's pointer and chunk tables), laid out
//! by [`WorkspaceLayout`], and the [`Workspace`] a caller allocates once and lends to the
//! kernels it runs.
//!
//! The executor sizes its workspace from its memory plan (the largest layout of any node)
//! and lends it to every kernel of an iteration: on one CUDA stream the kernels run in
//! order, so one buffer serves them all, and a step allocates no scratch. A kernel called
//! outside a lend, or with a workspace too small, allocates its scratch for that call and
//! counts a [miss](Workspace::misses).

use std::cell::RefCell;
use std::ops::Range;

use candle_core::{DType, Device};

use super::{ChunkTable, Launch, CHUNK_LEN};
use crate::device_kind::DeviceKind;
use crate::error::Result;

/// Every region starts on this many bytes: CUDA's allocation alignment, enough for every
/// element type a kernel reads.
pub const WORKSPACE_ALIGN: usize = 256;

/// How one kernel call cuts its scratch into regions, in order, each on a
/// [`WORKSPACE_ALIGN`] boundary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceLayout {
    regions: Vec<Range<usize>>,
}

impl WorkspaceLayout {
    /// Regions of these many bytes, in order.
    pub fn new(region_bytes: &[usize]) -> WorkspaceLayout {
        let mut start = 0;
        let regions = region_bytes
            .iter()
            .map(|&bytes| {
                let r = start..start + bytes;
                start = r.end.next_multiple_of(WORKSPACE_ALIGN);
                r
            })
            .collect();
        WorkspaceLayout { regions }
    }

    /// Bytes the layout takes: up to the end of its last region.
    pub fn bytes(&self) -> usize {
        self.regions.last().map_or(0, |r| r.end)
    }

    /// The byte range of region `i`.
    pub fn region(&self, i: usize) -> Range<usize> {
        self.regions[i].clone()
    }

    /// Batch norm training, forward or backward (the same launch): the partial moments,
    /// [`Launch::batch_norm_workspace`] values of `elem_bytes` each.
    pub fn batch_norm(launch: &Launch, elem_bytes: usize) -> WorkspaceLayout {
        WorkspaceLayout::new(&[launch.batch_norm_workspace() * elem_bytes])
    }

    /// The multi-tensor update over `roles` tensors per parameter: a device-pointer table
    /// per role (one `u64` per parameter), then the chunk table's sizes (`i64` per
    /// parameter), tensors (`i32` per chunk) and starts (`i64` per chunk).
    pub fn multi_tensor(table: &ChunkTable, roles: usize) -> WorkspaceLayout {
        let (params, chunks) = (table.sizes.len(), table.tensor.len());
        let mut bytes = vec![params * 8; roles];
        bytes.extend([params * 8, chunks * 4, chunks * 8]);
        WorkspaceLayout::new(&bytes)
    }
}

/// Scratch bytes a batch norm training kernel (forward or backward, with or without the
/// fused ReLU) needs on `device` for an NCHW input of `dims` and `dtype`: its layout on
/// CUDA, 0 on the CPU (whose kernels keep their sums on the stack) or for inputs the
/// kernels refuse.
pub fn batch_norm_workspace_bytes(device: DeviceKind, dims: &[usize], dtype: DType) -> u64 {
    match (device, dims) {
        (DeviceKind::Cuda | DeviceKind::Cudnn, &[n, c, h, w]) => {
            Launch::batch_norm("batch_norm", n, c, h * w).map_or(0, |l| {
                WorkspaceLayout::batch_norm(&l, accumulator_bytes(dtype)).bytes() as u64
            })
        }
        _ => 0,
    }
}

/// Bytes of one value of the accumulator wick's CUDA kernels sum `dtype` in: the dtype's
/// own, or float's for bf16 and f16.
fn accumulator_bytes(dtype: DType) -> usize {
    match dtype {
        DType::BF16 | DType::F16 => 4,
        other => other.size_in_bytes(),
    }
}

/// Scratch bytes the multi-tensor update of parameters of `sizes` elements, with `roles`
/// tensors per parameter (SGD: 2, or 3 with momentum; Adam: 4), needs on `device`.
pub fn multi_tensor_workspace_bytes(device: DeviceKind, sizes: &[usize], roles: usize) -> u64 {
    match device {
        DeviceKind::Cuda | DeviceKind::Cudnn => ChunkTable::new("multi_tensor", sizes, CHUNK_LEN)
            .map_or(0, |t| {
                WorkspaceLayout::multi_tensor(&t, roles).bytes() as u64
            }),
        _ => 0,
    }
}

/// Scratch memory allocated once and lent to kernel calls in turn
/// ([`lend`](Workspace::lend)). On the CPU it holds nothing: CPU kernels manage their
/// own scratch.
#[derive(Debug, Default)]
pub struct Workspace {
    #[cfg(feature = "cuda")]
    buffer: Option<(
        candle_core::CudaDevice,
        candle_core::cuda::cudarc::driver::CudaSlice<u8>,
    )>,
    bytes: u64,
    misses: u64,
}

thread_local! {
    static LENT: RefCell<Option<Workspace>> = const { RefCell::new(None) };
}

impl Workspace {
    /// A workspace of `bytes` on `device` (allocated there on CUDA; nothing on the CPU).
    pub fn new(device: &Device, bytes: u64) -> Result<Workspace> {
        let _ = bytes; // used on CUDA only
        match device {
            #[cfg(feature = "cuda")]
            Device::Cuda(dev) if bytes > 0 => {
                let len = usize::try_from(bytes)
                    .map_err(|_| crate::invalid!("workspace", "{bytes} bytes"))?;
                // SAFETY: a kernel writes every scratch value it later reads (the callers
                // in `gpu` upload or compute each region before reading it).
                let buffer = unsafe { dev.cuda_stream().alloc::<u8>(len) }.map_err(
                    super::cuda::cuda_err("workspace", "allocating the workspace"),
                )?;
                Ok(Workspace {
                    buffer: Some((dev.clone(), buffer)),
                    bytes,
                    misses: 0,
                })
            }
            _ => Ok(Workspace::default()),
        }
    }

    /// Bytes allocated (0 on the CPU).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Kernel calls inside a lend that found this workspace too small, or on another
    /// device, and allocated their own scratch.
    pub fn misses(&self) -> u64 {
        self.misses
    }

    /// Runs `f` with `self` lent to the kernels it calls on this thread: they carve their
    /// scratch from it instead of allocating. `self` comes back when `f` returns (or
    /// panics).
    pub fn lend<R>(&mut self, f: impl FnOnce() -> R) -> R {
        struct Return<'a>(&'a mut Workspace, Option<Workspace>);
        impl Drop for Return<'_> {
            fn drop(&mut self) {
                let lent = LENT.with(|l| l.replace(self.1.take()));
                if let Some(ws) = lent {
                    *self.0 = ws;
                }
            }
        }
        let outer = LENT.with(|l| l.replace(Some(std::mem::take(self))));
        let _back = Return(self, outer);
        f()
    }

    /// Runs `f` with the workspace lent to this thread, if any.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn with_lent<R>(f: impl FnOnce(Option<&mut Workspace>) -> R) -> R {
        let lent = LENT.with(|l| l.borrow_mut().take());
        match lent {
            Some(mut ws) => {
                let r = f(Some(&mut ws));
                LENT.with(|l| *l.borrow_mut() = Some(ws));
                r
            }
            None => f(None),
        }
    }

    /// The buffer, when it is on `dev` and holds `bytes`; otherwise a miss is counted.
    #[cfg(feature = "cuda")]
    pub(crate) fn buffer_for(
        &mut self,
        dev: &candle_core::CudaDevice,
        bytes: usize,
    ) -> Option<&mut candle_core::cuda::cudarc::driver::CudaSlice<u8>> {
        match &mut self.buffer {
            Some((d, buffer)) if d.id() == dev.id() && buffer.len() >= bytes => Some(buffer),
            _ => {
                self.misses += 1;
                None
            }
        }
    }
}

#[cfg(feature = "cuda")]
/// Runs `f` on `bytes` of scratch on `dev`: the lent [`Workspace`](Workspace)'s
/// buffer when one is lent and holds them, otherwise a buffer allocated for this call.
/// Its contents are undefined: `f` writes every value it reads.
pub(crate) fn with_scratch<R>(
    op: &'static str,
    dev: &candle_core::CudaDevice,
    bytes: usize,
    f: impl FnOnce(candle_core::cuda::cudarc::driver::CudaViewMut<'_, u8>) -> Result<R>,
) -> Result<R> {
    Workspace::with_lent(|lent| {
        if let Some(buffer) = lent.and_then(|ws| ws.buffer_for(dev, bytes)) {
            return f(buffer.slice_mut(0..bytes));
        }
        let mut own = super::cuda::output::<u8>(op, dev, bytes)?;
        f(own.slice_mut(0..bytes))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_aligned_apart_and_as_large_as_their_tables() {
        let table = ChunkTable::new("t", &[1, 4096, 4097, 0, 70_000], CHUNK_LEN).unwrap();
        let layout = WorkspaceLayout::multi_tensor(&table, 3);
        let wanted = [
            5 * 8,
            5 * 8,
            5 * 8,
            5 * 8,
            table.tensor.len() * 4,
            table.tensor.len() * 8,
        ];
        for (i, bytes) in wanted.iter().enumerate() {
            let r = layout.region(i);
            assert_eq!(r.start % WORKSPACE_ALIGN, 0, "region {i} at {}", r.start);
            assert_eq!(r.len(), *bytes, "region {i}");
            if i > 0 {
                assert!(layout.region(i - 1).end <= r.start, "region {i} overlaps");
            }
        }
        assert_eq!(layout.bytes(), layout.region(5).end);
        let sizes = [1, 4096, 4097, 0, 70_000];
        assert_eq!(
            multi_tensor_workspace_bytes(DeviceKind::Cuda, &sizes, 3),
            layout.bytes() as u64
        );
        assert_eq!(multi_tensor_workspace_bytes(DeviceKind::Cpu, &sizes, 3), 0);
    }

    #[test]
    fn batch_norm_scratch_is_three_accumulator_values_per_block_on_cuda_only() {
        let dims = [32, 64, 56, 56];
        let launch = Launch::batch_norm("t", 32, 64, 56 * 56).unwrap();
        let blocks = launch.grid[0] as u64 * launch.grid[1] as u64;
        // The 16-bit kernels keep their partial moments in float.
        let sizes = [
            (DType::F32, 4),
            (DType::F64, 8),
            (DType::BF16, 4),
            (DType::F16, 4),
        ];
        for (dtype, size) in sizes {
            let bytes = batch_norm_workspace_bytes(DeviceKind::Cudnn, &dims, dtype);
            assert_eq!(bytes, blocks * 3 * size);
            assert_eq!(batch_norm_workspace_bytes(DeviceKind::Cpu, &dims, dtype), 0);
        }
        assert_eq!(
            batch_norm_workspace_bytes(DeviceKind::Cuda, &[2, 3], DType::F32),
            0
        );
    }

    #[test]
    fn a_lent_workspace_comes_back_even_from_a_panic_and_lends_nest() {
        let mut ws = Workspace {
            misses: 7,
            ..Workspace::default()
        };
        let inside = ws.lend(|| Workspace::with_lent(|l| l.map(|w| w.misses())));
        assert_eq!((inside, ws.misses()), (Some(7), 7));
        assert!(!Workspace::with_lent(|l| l.is_some()));
        let mut inner = Workspace {
            misses: 1,
            ..Workspace::default()
        };
        ws.lend(|| {
            inner.lend(|| assert_eq!(Workspace::with_lent(|l| l.map(|w| w.misses())), Some(1)));
            assert_eq!(Workspace::with_lent(|l| l.map(|w| w.misses())), Some(7));
        });
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ws.lend(|| panic!("a kernel failed"))
        }));
        assert!(caught.is_err());
        assert_eq!((ws.misses(), inner.misses()), (7, 1));
        assert!(!Workspace::with_lent(|l| l.is_some()));
    }
}
