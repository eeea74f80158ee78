//! The per-op-type table (Paddle's event table, with its columns defined): one row per
//! kernel name, sorted by total time.

use std::fmt::Write as _;

use super::profile::Profile;

impl Profile {
    /// The per-op-type table as text, with a header that defines every column.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "Per-op-type summary. Nodes: nodes of this type per iteration; Total: ms per iteration in them; \
             Min/Max/Mean: ms of one node execution; Share: of all op time; GFLOP/s: FLOPs / Total.\n",
        );
        let _ = writeln!(
            s,
            "{:<34} {:>6} {:>11} {:>10} {:>10} {:>10} {:>7} {:>9}",
            "Kernel", "Nodes", "Total(ms)", "Min(ms)", "Max(ms)", "Mean(ms)", "Share", "GFLOP/s"
        );
        for r in self.by_type() {
            let gflops = if r.total_sec > 0.0 {
                r.flops as f64 / r.total_sec / 1e9
            } else {
                0.0
            };
            let _ = writeln!(
                s,
                "{:<34} {:>6} {:>11.3} {:>10.3} {:>10.3} {:>10.3} {:>6.1}% {:>9.1}",
                r.name,
                r.nodes,
                r.total_sec * 1e3,
                r.min_sec * 1e3,
                r.max_sec * 1e3,
                r.mean_sec * 1e3,
                r.share * 100.0,
                gflops
            );
        }
        s
    }
}
