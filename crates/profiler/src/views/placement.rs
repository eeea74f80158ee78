//! Placement and precision, TensorFlow's two overview figures.

use crate::profile::Profile;

impl Profile {
    /// Placement and precision (TensorFlow's two overview figures): where the ops ran and
    /// in which dtype, by share of op time. Every node runs on the executor's device; on a
    /// CPU the line says so rather than print a meaningless 100% on device.
    pub fn placement_lines(&self) -> String {
        let op_time: f64 = self.ops.iter().map(|o| o.mean_sec).sum();
        if op_time <= 0.0 {
            return String::new();
        }
        let mut dtypes: Vec<(String, f64)> = Vec::new();
        for o in &self.ops {
            match dtypes.iter_mut().find(|(d, _)| *d == o.dtype) {
                Some((_, t)) => *t += o.mean_sec,
                None => dtypes.push((o.dtype.clone(), o.mean_sec)),
            }
        }
        dtypes.sort_by(|a, b| b.1.total_cmp(&a.1));
        let precision: Vec<String> = dtypes
            .iter()
            .map(|(d, t)| format!("{d} {:.1}%", 100.0 * t / op_time))
            .collect();
        let mixed = if dtypes.len() > 1 {
            self.mixed_precision_lines(op_time)
        } else {
            String::new()
        };
        let placement = if self.device.starts_with("Cpu") {
            format!(
                "a CPU run: all {} ops run on the host (there is no device to place them on)",
                self.ops.len()
            )
        } else {
            format!(
                "all {} ops on {} (100% of op time); the host only feeds batches and reads the loss",
                self.ops.len(),
                self.device
            )
        };
        format!(
            "Placement : {placement}\nPrecision : op time by dtype: {}\n{mixed}",
            precision.join(", ")
        )
    }

    /// A mixed-precision run's FLOPs by dtype and the casts' cost.
    fn mixed_precision_lines(&self, op_time: f64) -> String {
        let flops: u64 = self.ops.iter().map(|o| o.flops).sum();
        let mut by_dtype: Vec<(&str, u64)> = Vec::new();
        for o in &self.ops {
            match by_dtype.iter_mut().find(|(d, _)| *d == o.dtype) {
                Some((_, f)) => *f += o.flops,
                None => by_dtype.push((&o.dtype, o.flops)),
            }
        }
        by_dtype.sort_by_key(|d| std::cmp::Reverse(d.1));
        let shares: Vec<String> = by_dtype
            .iter()
            .map(|(d, f)| format!("{d} {:.1}%", 100.0 * *f as f64 / flops.max(1) as f64))
            .collect();
        let casts: Vec<_> = self
            .ops
            .iter()
            .filter(|o| o.name.starts_with("Cast"))
            .collect();
        let cast_time: f64 = casts.iter().map(|o| o.mean_sec).sum();
        format!(
            "Precision : FLOPs by dtype: {}; casts: {} nodes, {} sec ({:.1}% of op time)\n",
            shares.join(", "),
            casts.len(),
            crate::views::float_format::cpp_float(cast_time),
            100.0 * cast_time / op_time
        )
    }
}
