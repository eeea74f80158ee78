//! The profile of a data-parallel run, gathered from every rank to rank 0 (by
//! [`DistProfile::gather`]): each rank's
//! step time and the slowest rank, each gradient bucket's all-reduce (engine time, the
//! part backward did not hide, bytes, bandwidth as NCCL-tests defines it), the overlap,
//! and each rank's op timeline for the trace (one process track per rank).

use serde::{Deserialize, Serialize};

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
        super::stats::giga_per_sec(self.bytes, self.comm_sec)
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
}
