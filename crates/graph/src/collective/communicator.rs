//! The [`Communicator`] trait a graph's gradient all-reduce nodes call, and the
//! single-process one for world size 1.

use std::fmt::Debug;

/// A group of processes that can sum buffers together.
pub trait Communicator: Send + Sync + Debug {
    /// This process's rank, from 0.
    fn rank(&self) -> usize;
    /// How many processes take part.
    fn size(&self) -> usize;
    /// The engine (`single`, `mpi`, `nccl`).
    fn engine(&self) -> &'static str;
    /// Sums `data` element-wise over every rank, in place, on every rank. Every rank calls
    /// it with the same length, in the same order.
    fn all_reduce_sum(&self, data: &mut [f32]) -> Result<(), String>;

    /// Every rank's `mine`, rank 0's first (every rank passes the same length): for
    /// gathering profiles. By default through [`all_reduce_sum`](Communicator::all_reduce_sum),
    /// each value split into two f32 (about 48 bits kept); engines may override it.
    fn all_gather_f64(&self, mine: &[f64]) -> Result<Vec<f64>, String> {
        let (n, size) = (mine.len(), self.size());
        let mut buf = vec![0f32; 2 * n * size];
        for (i, v) in mine.iter().enumerate() {
            let hi = *v as f32;
            buf[2 * (self.rank() * n + i)] = hi;
            buf[2 * (self.rank() * n + i) + 1] = (*v - hi as f64) as f32;
        }
        self.all_reduce_sum(&mut buf)?;
        Ok(buf
            .chunks_exact(2)
            .map(|p| p[0] as f64 + p[1] as f64)
            .collect())
    }

    /// The device this rank must compute on, where the engine fixes it (NCCL: the GPU
    /// `LOCAL_RANK` names); `None` where any device will do.
    fn device(&self) -> Option<candle_core::Device> {
        None
    }

    /// Ends this process with `code` after an error, and with it every rank of the job
    /// where the engine can (the others would wait in a collective for this one). By
    /// default, just this process.
    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }
}

/// World size 1: the sum over one rank is the data itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct SingleProcess;

impl Communicator for SingleProcess {
    fn rank(&self) -> usize {
        0
    }

    fn size(&self) -> usize {
        1
    }

    fn engine(&self) -> &'static str {
        "single"
    }

    fn all_reduce_sum(&self, _data: &mut [f32]) -> Result<(), String> {
        Ok(())
    }
}
