//! The profile of a data-parallel run, gathered from every rank to rank 0 (by
//! [`DistProfile::gather`]): each rank's
//! step time and the slowest rank, each gradient bucket's all-reduce (engine time, the
//! part backward did not hide, bytes, bandwidth as NCCL-tests defines it), the overlap,
//! and each rank's op timeline for the trace (one process track per rank).

use serde::{Deserialize, Serialize};

use crate::float_format::cpp_float;

/// One rank's figures.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RankProfile {
    /// The rank.
    pub rank: usize,
    /// Median seconds of its timed iterations.
    pub iteration_median_sec: f64,
    /// Mean seconds of its timed iterations.
    pub iteration_mean_sec: f64,
    /// Seconds per iteration the engine spent on its gradient all-reduces (medians per
    /// bucket, summed).
    pub comm_sec: f64,
    /// Seconds per iteration it waited for them (`DistWait`): communication not hidden.
    pub exposed_sec: f64,
}

impl RankProfile {
    /// The share of the all-reduce time hidden behind backward, 0 to 1.
    pub fn overlap(&self) -> f64 {
        overlap(self.comm_sec, self.exposed_sec)
    }
}

fn overlap(comm: f64, exposed: f64) -> f64 {
    if comm > 0.0 {
        (1.0 - exposed / comm).clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// One gradient bucket's all-reduce, on rank 0.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BucketProfile {
    /// The bucket, from 0 in the order its all-reduce starts.
    pub bucket: usize,
    /// OP_ID of its `DistAllReduce` (start) node.
    pub op_id: usize,
    /// OP_ID of its `DistWait` node.
    pub wait_op_id: usize,
    /// Gradients in it.
    pub gradients: usize,
    /// Bytes each rank contributes (and receives).
    pub bytes: u64,
    /// Median seconds the engine spent on it.
    pub comm_sec: f64,
    /// Median seconds backward waited for it.
    pub exposed_sec: f64,
}

impl BucketProfile {
    /// Algorithm bandwidth, bytes / time, in GB/s (NCCL-tests' `algbw`).
    pub fn algbw_gbs(&self) -> f64 {
        if self.comm_sec > 0.0 {
            self.bytes as f64 / self.comm_sec / 1e9
        } else {
            0.0
        }
    }

    /// Bus bandwidth for an all-reduce over `ranks`, `algbw * 2 (n - 1) / n` in GB/s
    /// (NCCL-tests' `busbw`: what each link carries, comparable to the hardware's peak).
    pub fn busbw_gbs(&self, ranks: usize) -> f64 {
        let n = ranks.max(1) as f64;
        self.algbw_gbs() * 2.0 * (n - 1.0) / n
    }
}

/// A data-parallel run's profile (set on rank 0's [`Profile::distributed`](super::Profile::distributed)).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DistProfile {
    /// The engine (`mpi`, `nccl`, `single`).
    pub engine: String,
    /// Ranks.
    pub world_size: usize,
    /// Every rank's figures, by rank.
    pub ranks: Vec<RankProfile>,
    /// The rank with the longest median iteration.
    pub slowest_rank: usize,
    /// Rank 0's buckets.
    pub buckets: Vec<BucketProfile>,
    /// Per rank, the last timed iteration's ops as (start, duration) seconds from the
    /// iteration's start, in OP_ID order (empty below verbosity 2).
    pub rank_ops: Vec<Vec<(f64, f64)>>,
}

impl DistProfile {
    /// The share of rank 0's all-reduce time hidden behind backward, 0 to 1.
    pub fn overlap(&self) -> f64 {
        self.ranks.first().map_or(0.0, RankProfile::overlap)
    }

    /// The text report: per rank, per bucket, and the overlap.
    pub fn report(&self) -> String {
        let mut out = String::new();
        let bytes: u64 = self.buckets.iter().map(|b| b.bytes).sum();
        out.push_str(&format!(
            "Data parallel: {} ranks ({}), {} bucket(s), {:.1} MB of gradients all-reduced per step\n",
            self.world_size,
            self.engine,
            self.buckets.len(),
            bytes as f64 / 1e6
        ));
        out.push_str("  rank  iteration median  iteration mean  all-reduce (engine)  waited (exposed)  overlap\n");
        for r in &self.ranks {
            out.push_str(&format!(
                "  {:>4}  {:>14} s  {:>12} s  {:>17} s  {:>14} s  {:>6.1}%{}\n",
                r.rank,
                cpp_float(r.iteration_median_sec),
                cpp_float(r.iteration_mean_sec),
                cpp_float(r.comm_sec),
                cpp_float(r.exposed_sec),
                100.0 * r.overlap(),
                if r.rank == self.slowest_rank && self.world_size > 1 {
                    "  <- slowest"
                } else {
                    ""
                }
            ));
        }
        let fastest = self
            .ranks
            .iter()
            .map(|r| r.iteration_median_sec)
            .fold(f64::INFINITY, f64::min);
        if let Some(slow) = self.ranks.get(self.slowest_rank) {
            if self.world_size > 1 && fastest > 0.0 {
                out.push_str(&format!(
                    "  slowest rank {}: {:.1}% above the fastest; every rank waits for it in each all-reduce\n",
                    slow.rank,
                    100.0 * (slow.iteration_median_sec / fastest - 1.0)
                ));
            }
        }
        out.push_str("  bucket  OP_IDs (start/wait)  gradients  MB      all-reduce  waited      algbw GB/s  busbw GB/s\n");
        for b in &self.buckets {
            out.push_str(&format!(
                "  {:>6}  {:>19}  {:>9}  {:>6.2}  {:>8.5} s  {:>8.5} s  {:>10.3}  {:>10.3}\n",
                b.bucket,
                format!("{}/{}", b.op_id, b.wait_op_id),
                b.gradients,
                b.bytes as f64 / 1e6,
                b.comm_sec,
                b.exposed_sec,
                b.algbw_gbs(),
                b.busbw_gbs(self.world_size)
            ));
        }
        out.push_str(&format!(
            "  overlap: {:.1}% of rank 0's all-reduce time ran behind backward; waited: time blocked in DistWait (its op time also counts unpacking the means); busbw as NCCL-tests: algbw * 2(n-1)/n\n",
            100.0 * self.overlap()
        ));
        out
    }
}
