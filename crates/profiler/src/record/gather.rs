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
        let (size, buckets) = (comm.size(), dp.buckets.len());
        let timings = dp.queue.timings();
        let timed = profile.timed_iterations;
        let bucket_medians: Vec<(f64, f64)> = timings
            .iter()
            .map(|t| {
                let last = &t[t.len().saturating_sub(timed.max(1))..];
                let comm: Vec<f64> = last.iter().map(|x| x.comm_sec).collect();
                let exposed: Vec<f64> = last.iter().map(|x| x.exposed_sec).collect();
                (median(&comm), median(&exposed))
            })
            .collect();
        let ops = profile.ops.len();
        let last = profile.timeline.last();
        let mut mine = vec![profile.iteration_median_sec, profile.iteration_sec];
        for (c, e) in &bucket_medians {
            mine.extend([*c, *e]);
        }
        for i in 0..ops {
            let (start, dur) = last
                .and_then(|it| it.ops.get(i).copied())
                .unwrap_or((0.0, 0.0));
            mine.extend([start, dur]);
        }
        let all = comm.all_gather_f64(&mine)?;
        if all.len() != mine.len() * size {
            return Err(format!(
                "gathering the profile: {} values from {size} ranks, expected {} each",
                all.len(),
                mine.len()
            ));
        }
        let per_rank: Vec<&[f64]> = all.chunks_exact(mine.len()).collect();
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
        let rank_ops = if last.is_some() && ops > 0 {
            per_rank
                .iter()
                .map(|v| {
                    v[2 + 2 * buckets..]
                        .chunks_exact(2)
                        .map(|p| (p[0], p[1]))
                        .collect()
                })
                .collect()
        } else {
            Vec::new()
        };
        // Rank 0's bucket timings, so every rank reports the same figures.
        let rank0: Vec<(f64, f64)> = per_rank[0][2..2 + 2 * buckets]
            .chunks_exact(2)
            .map(|p| (p[0], p[1]))
            .collect();
        Ok(DistProfile {
            engine: comm.engine().to_string(),
            world_size: size,
            ranks,
            slowest_rank,
            buckets: dp
                .buckets
                .iter()
                .zip(&rank0)
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
                .collect(),
            rank_ops,
        })
    }
}
