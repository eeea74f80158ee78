//! The per-op-type table (Paddle's event table, with its columns defined): one row per
//! kernel name (or per kernel and input shapes), sorted by total time. On a device it
//! shows each type's host dispatch time beside its device time, as Paddle's CPU Time and
//! GPU Time, and flags types whose dispatch takes longer than their kernels run.

use std::fmt::Write as _;

use crate::profile::data::{OpTypeRow, Profile};

impl Profile {
    /// The per-op-type table as text, with a header that defines every column.
    pub fn table(&self) -> String {
        self.rows_table("Per-op-type summary", &self.by_type())
    }

    /// The per-op-type table split by input shapes (PyTorch's `record_shapes`).
    pub fn table_by_shape(&self) -> String {
        self.rows_table(
            "Per-op-type summary by input shapes",
            &self.by_type_and_shape(),
        )
    }

    fn rows_table(&self, title: &str, rows: &[OpTypeRow]) -> String {
        let host = rows.iter().any(|r| r.host_sec.is_some());
        let mut s = format!(
            "{title}. Nodes: nodes of this type per iteration; Total: ms per iteration in them; \
             Min/Median/Max/Mean: ms of one node execution (Median over every timed execution: one preempted run moves Max only); Share: of all op time; GFLOP/s: FLOPs / Total.{}\n",
            if host {
                " Host: ms per iteration dispatching them (host clock; Total is device time); launch-bound: Host > Total."
            } else {
                " Host and op time are one here (the CPU runs the kernels on the host clock)."
            }
        );
        let _ = write!(
            s,
            "{:<34} {:>6} {:>11} {:>10} {:>10} {:>10} {:>10} {:>7} {:>9}",
            "Kernel",
            "Nodes",
            "Total(ms)",
            "Min(ms)",
            "Median(ms)",
            "Max(ms)",
            "Mean(ms)",
            "Share",
            "GFLOP/s"
        );
        if host {
            let _ = write!(s, " {:>10}", "Host(ms)");
        }
        if rows.iter().any(|r| !r.input_shapes.is_empty()) {
            s.push_str("  Input shapes");
        }
        s.push('\n');
        for r in rows {
            let gflops = r.gflops();
            let _ = write!(
                s,
                "{:<34} {:>6} {:>11.3} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>6.1}% {:>9.1}",
                r.name,
                r.nodes,
                r.total_sec * 1e3,
                r.min_sec * 1e3,
                r.median_sec * 1e3,
                r.max_sec * 1e3,
                r.mean_sec * 1e3,
                r.share * 100.0,
                gflops
            );
            if let Some(h) = r.host_sec {
                let flag = if h > r.total_sec {
                    "  launch-bound"
                } else {
                    ""
                };
                let _ = write!(s, " {:>10.3}{flag}", h * 1e3);
            }
            if !r.input_shapes.is_empty() {
                let _ = write!(s, "  {:?}", r.input_shapes);
            }
            s.push('\n');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use wick_ops::Kernel;

    use crate::profile::data::{OpProfile, Profile};

    fn op(kernel: Kernel, device_sec: f64, host_sec: Option<f64>, shape: usize) -> OpProfile {
        OpProfile {
            input_shapes: vec![vec![shape, 4]],
            host_sec,
            ..OpProfile::new(kernel, device_sec)
        }
    }

    #[test]
    fn rows_split_by_shape_and_launch_bound_types_are_flagged() {
        let p = Profile {
            ops: vec![
                op(Kernel::ReLU, 0.001, Some(0.004), 8),
                op(Kernel::ReLU, 0.001, Some(0.004), 16),
                op(Kernel::ConvForward, 0.010, Some(0.002), 8),
            ],
            ..Default::default()
        };
        assert_eq!(p.by_type().len(), 2);
        let by_shape = p.by_type_and_shape();
        assert_eq!(by_shape.len(), 3);
        assert!(by_shape
            .iter()
            .all(|r| r.nodes == 1 && !r.input_shapes.is_empty()));
        let text = p.table();
        let relu = text.lines().find(|l| l.starts_with("ReLU")).unwrap();
        assert!(relu.ends_with("launch-bound"), "{relu}");
        let conv = text.lines().find(|l| l.starts_with("ConvForward")).unwrap();
        assert!(!conv.contains("launch-bound"), "{conv}");
        assert!(p.table_by_shape().contains("[[16, 4]]"));
        let cpu = Profile {
            ops: vec![op(Kernel::ReLU, 0.001, None, 8)],
            ..Default::default()
        };
        assert!(cpu.table().contains("Host and op time are one here"));
    }
}
