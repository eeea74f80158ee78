//! Launch configurations of wick's CUDA kernels, and the chunk table of the multi-tensor
//! optimizer update. Sizes past what the kernels index (`int` arguments) are refused
//! here with an error naming the op, before anything is launched.

use crate::error::{OpError, Result};

/// Threads per block of every wick kernel: whole warps, as the block reductions need.
pub const BLOCK: u32 = 256;

/// Elements per chunk of the multi-tensor optimizer update (one block updates one chunk).
pub const CHUNK_LEN: usize = 4096;

/// Blocks at most in the x dimension of a grid-stride launch: enough to fill any GPU many
/// times over; the loops inside the kernels cover the rest.
const MAX_BLOCKS: u64 = 65_536;

/// Cross-entropy: blocks at most, one row each (many times the multiprocessors of any GPU).
const ROW_BLOCKS: u64 = 4096;

/// Batch norm: the fewest values a block of a channel should have, so that the partial
/// moments stay a small part of the work.
const BATCH_NORM_MIN_PER_BLOCK: u64 = 4 * BLOCK as u64;
/// Batch norm: blocks per channel at most (each block of the second kernel merges this
/// many partial moments).
const BATCH_NORM_MAX_SPLITS: u64 = 128;
/// Batch norm: the grid this many blocks at least when the channels allow it (an H200
/// has 132 multiprocessors).
const BATCH_NORM_TARGET_BLOCKS: u64 = 1024;

/// A kernel launch's grid and block, `#[repr(C)]` as the emulator reads it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    /// Blocks along x, y, z.
    pub grid: [u32; 3],
    /// Threads per block along x, y, z.
    pub block: [u32; 3],
}

fn too_large(op: &'static str, what: &str, value: u64) -> OpError {
    crate::invalid!(
        op,
        "{what} {value} is past what wick's CUDA kernels index (2^31 - 1)"
    )
}

/// `value` as the `int` a kernel takes, or an error naming it.
pub(crate) fn kernel_int(op: &'static str, what: &str, value: usize) -> Result<i32> {
    i32::try_from(value).map_err(|_| too_large(op, what, value as u64))
}

impl Launch {
    fn linear(blocks: u64) -> Launch {
        Launch {
            grid: [blocks.clamp(1, MAX_BLOCKS) as u32, 1, 1],
            block: [BLOCK, 1, 1],
        }
    }

    /// One thread per element of `n`, grid-stride beyond 65536 blocks.
    pub fn elementwise(n: usize) -> Launch {
        Launch::linear((n as u64).div_ceil(BLOCK as u64))
    }

    /// Batch norm over an NCHW tensor (all four training kernels): grid (C, splits), each
    /// channel's N*H*W values cut into `splits` ranges of at least
    /// 1024 values, enough blocks in all to fill the GPU. The partial moments take
    /// [`batch_norm_workspace`](Launch::batch_norm_workspace) values.
    pub fn batch_norm(op: &'static str, n: usize, c: usize, hw: usize) -> Result<Launch> {
        kernel_int(op, "channels", c)?;
        kernel_int(op, "batch", n)?;
        kernel_int(op, "plane size", hw)?;
        let per_channel = n as u64 * hw as u64;
        let wanted = BATCH_NORM_TARGET_BLOCKS.div_ceil(c.max(1) as u64);
        let most = per_channel.div_ceil(BATCH_NORM_MIN_PER_BLOCK);
        let splits = wanted.min(most).clamp(1, BATCH_NORM_MAX_SPLITS);
        Ok(Launch {
            grid: [c as u32, splits as u32, 1],
            block: [BLOCK, 1, 1],
        })
    }

    /// Values of the batch norm workspace (partial moments: 3 per block).
    pub fn batch_norm_workspace(&self) -> usize {
        self.grid[0] as usize * self.grid[1] as usize * 3
    }

    /// Global average pooling forward: one warp per plane.
    pub fn global_avg_pool(planes: usize) -> Launch {
        Launch::warp_per_row(planes)
    }

    /// One warp per row (attention's rows of queries or keys), grid-stride past 65536
    /// blocks.
    pub fn warp_per_row(rows: usize) -> Launch {
        Launch::linear((rows as u64).div_ceil((BLOCK / 32) as u64))
    }

    /// Cross-entropy forward: one block per row up to 4096 rows (then blocks take several
    /// rows each), of 32 threads for up to 128 classes, 256 beyond.
    pub fn cross_entropy_rows(rows: usize, classes: usize) -> Launch {
        let block = if classes <= 128 { 32 } else { BLOCK };
        Launch {
            grid: [(rows as u64).clamp(1, ROW_BLOCKS) as u32, 1, 1],
            block: [block, 1, 1],
        }
    }

    /// One block: the batch mean of the cross-entropy's row losses.
    pub fn single_block() -> Launch {
        Launch::linear(1)
    }

    /// The multi-tensor optimizer update: one block per chunk (grid-stride past 65536).
    pub fn multi_tensor(table: &ChunkTable) -> Launch {
        Launch::linear(table.tensor.len() as u64)
    }
}

/// Which tensor and where in it each chunk of a multi-tensor update starts. Built once per
/// parameter set: chunks never span two tensors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkTable {
    /// The tensor of each chunk.
    pub tensor: Vec<i32>,
    /// The first element of each chunk in its tensor.
    pub start: Vec<i64>,
    /// Each tensor's element count.
    pub sizes: Vec<i64>,
    /// Elements per chunk at most.
    pub chunk_len: i32,
}

impl ChunkTable {
    /// The chunks of tensors of `sizes` elements, `chunk_len` elements at most each.
    pub fn new(op: &'static str, sizes: &[usize], chunk_len: usize) -> Result<ChunkTable> {
        let chunk_len_i = kernel_int(op, "chunk length", chunk_len.max(1))?;
        kernel_int(op, "tensor count", sizes.len())?;
        let (mut tensor, mut start) = (Vec::new(), Vec::new());
        for (t, &size) in sizes.iter().enumerate() {
            for s in (0..size).step_by(chunk_len.max(1)) {
                tensor.push(t as i32);
                start.push(s as i64);
            }
        }
        kernel_int(op, "chunk count", tensor.len())?;
        Ok(ChunkTable {
            tensor,
            start,
            sizes: sizes.iter().map(|&s| s as i64).collect(),
            chunk_len: chunk_len_i,
        })
    }

    /// The number of chunks.
    pub fn chunks(&self) -> i32 {
        self.tensor.len() as i32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_norm_grids_fill_the_gpu_and_keep_blocks_busy() {
        // ResNet-50's first batch norm at batch 32: 64 channels of 32*112*112 values.
        let l = Launch::batch_norm("bn", 32, 64, 112 * 112).unwrap();
        assert_eq!(l.grid, [64, 16, 1]);
        // A tiny layer: one block per channel, never an empty one.
        let l = Launch::batch_norm("bn", 1, 3, 2).unwrap();
        assert_eq!(l.grid, [3, 1, 1]);
        // 2048 channels of 7x7 at batch 32 (1568 values each): 2 blocks would leave
        // 784 values each, under the 1024 minimum.
        let l = Launch::batch_norm("bn", 32, 2048, 49).unwrap();
        assert_eq!(l.grid, [2048, 1, 1]);
        assert!(Launch::batch_norm("bn", 1, 1 << 31, 1).is_err());
    }

    #[test]
    fn chunks_never_span_two_tensors() {
        let t = ChunkTable::new("sgd", &[5, 0, 9, 4], 4).unwrap();
        assert_eq!(t.tensor, [0, 0, 2, 2, 2, 3]);
        assert_eq!(t.start, [0, 4, 0, 4, 8, 0]);
        assert_eq!(Launch::multi_tensor(&t).grid, [6, 1, 1]);
    }
}
