//! Gathering a data-parallel run's figures from every rank: a collective over the
//! run's communicator.

use crate::profile::data::Profile;
use crate::profile::ranks::{BucketProfile, DistProfile, RankProfile};
use crate::profile::stats::median;
use wick_graph::passes::data_parallel::DataParallel;

impl DistProfile {
    /// Gathers every rank's figures to every rank (a collective: every rank calls it
    /// after the same number of steps, with the same graph and verbosity). `profile` is
    /// this rank's.
    pub fn gather(profile: &Profile, dp: &DataParallel) -> Result<DistProfile, String> {
        let comm = dp.queue.comm();
        let size = comm.size();
        let mine = own_figures(profile, dp);
        let all = comm.all_gather_f64(&mine)?;
        if all.len() != mine.len() * size {
            return Err(format!(
                "gathering the profile: {} values from {size} ranks, expected {} each",
                all.len(),
                mine.len()
            ));
        }
        let per_rank: Vec<&[f64]> = all.chunks_exact(mine.len()).collect();
        let buckets = dp.buckets.len();
        let ranks: Vec<RankProfile> = per_rank
            .iter()
            .enumerate()
            .map(|(rank, v)| {
                let pairs = &v[2..2 + 2 * buckets];
                RankProfile {
                    rank,
                    iteration_median_sec: v[0],
                    iteration_mean_sec: v[1],
                    comm_sec: pairs.iter().step_by(2).sum(),
                    exposed_sec: pairs.iter().skip(1).step_by(2).sum(),
                }
            })
            .collect();
        let slowest_rank = ranks
            .iter()
            .max_by(|a, b| a.iteration_median_sec.total_cmp(&b.iteration_median_sec))
            .map_or(0, |r| r.rank);
        let rank_ops = if profile.timeline.last().is_some() && !profile.ops.is_empty() {
            per_rank
                .iter()
                .map(|v| pairs(&v[2 + 2 * buckets..]))
                .collect()
        } else {
            Vec::new()
        };
        Ok(DistProfile {
            engine: comm.engine().to_string(),
            world_size: size,
            ranks,
            slowest_rank,
            // Rank 0's bucket timings, so every rank reports the same figures.
            buckets: bucket_profiles(dp, &pairs(&per_rank[0][2..2 + 2 * buckets])),
            rank_ops,
        })
    }
}

/// Consecutive values as pairs.
fn pairs(v: &[f64]) -> Vec<(f64, f64)> {
    v.chunks_exact(2).map(|p| (p[0], p[1])).collect()
}

/// This rank's figures as one vector: the iteration's median and mean, each bucket's
/// median all-reduce and exposed seconds over the timed iterations, and each op's start
/// and length in the last timed iteration.
fn own_figures(profile: &Profile, dp: &DataParallel) -> Vec<f64> {
    let timed = profile.timed_iterations;
    let mut mine = vec![profile.iteration_median_sec, profile.iteration_sec];
    for t in dp.queue.timings() {
        let last = &t[t.len().saturating_sub(timed.max(1))..];
        let comm: Vec<f64> = last.iter().map(|x| x.comm_sec).collect();
        let exposed: Vec<f64> = last.iter().map(|x| x.exposed_sec).collect();
        mine.extend([median(&comm), median(&exposed)]);
    }
    let last = profile.timeline.last();
    for i in 0..profile.ops.len() {
        let (start, dur) = last
            .and_then(|it| it.ops.get(i).copied())
            .unwrap_or((0.0, 0.0));
        mine.extend([start, dur]);
    }
    mine
}

/// Each bucket of `dp` with its (all-reduce, exposed) seconds.
fn bucket_profiles(dp: &DataParallel, timings: &[(f64, f64)]) -> Vec<BucketProfile> {
    dp.buckets
        .iter()
        .zip(timings)
        .enumerate()
        .map(|(i, (b, (c, e)))| BucketProfile {
            bucket: i,
            op_id: b.op_id,
            wait_op_id: b.wait_op_id,
            gradients: b.gradients.len(),
            bytes: b.bytes,
            comm_sec: *c,
            exposed_sec: *e,
        })
        .collect()
}
