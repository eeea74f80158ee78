//! The data-parallel report: per rank, per bucket, and the overlap.

use crate::profile::ranks::DistProfile;
use crate::views::float_format::cpp_float;

impl DistProfile {
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
