//! The memory lines: the predicted peak and its split, the measured peaks, and the
//! prediction's error per category.

use crate::profile::memory::MemoryProfile;

impl MemoryProfile {
    /// The report's lines.
    pub fn lines(&self) -> String {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let s = &self.split;
        let at = match (self.peak_op, &self.peak_kernel) {
            (Some(op), Some(k)) => format!(" after OP_ID{op} ({k})"),
            _ => String::new(),
        };
        // Parts the graph cannot have (gradients in an inference graph) are left out.
        let parts: Vec<String> = [
            ("parameters", s.parameters),
            ("gradients", s.gradients),
            ("optimizer state", s.optimizer_state),
            ("saved for backward", s.saved_for_backward),
            ("transient", s.transient),
            ("inputs", s.inputs),
            ("running statistics", s.statistics),
            ("pass products (folded weights)", s.pass_products),
            ("kernel workspace", s.kernel_workspace),
        ]
        .iter()
        .filter(|(name, bytes)| *bytes > 0 || *name == "parameters")
        .map(|(name, bytes)| format!("{name} {:.1}", mib(*bytes)))
        .collect();
        let mut out = format!(
            "Memory (predicted from the graph) : peak {:.1} MiB{at} = {} MiB\n",
            mib(self.predicted_peak_bytes),
            parts.join(" + ")
        );
        let measured = match self.measured_peak_bytes {
            Some(m) => {
                let diff = m as f64 - self.predicted_peak_bytes as f64;
                format!(
                    "counting allocator peak {:.1} MiB over the timed iterations ({:+.1} MiB from the prediction; split below when measured per op)",
                    mib(m),
                    diff / (1u64 << 20) as f64
                )
            }
            None => "no counting allocator attached".to_string(),
        };
        let rss = match (self.peak_rss_bytes, self.process_peak_rss_bytes) {
            (Some(r), Some(p)) if p > r => format!(
                "; peak RSS {:.1} MiB when the profile was taken, {:.1} MiB for the whole process (the roofline probe's copy buffers ran after: {:+.1} MiB)",
                mib(r),
                mib(p),
                mib(p) - mib(r)
            ),
            (Some(r), _) => format!("; peak RSS {:.1} MiB (the whole process)", mib(r)),
            (None, _) => String::new(),
        };
        let device = match self.device_used_bytes {
            Some(d) => format!(
                "; the device reports {:.1} MiB in use (every process)",
                mib(d)
            ),
            None => String::new(),
        };
        out.push_str(&format!("Memory (measured) : {measured}{rss}{device}\n"));
        let categories = self.categories();
        if !categories.is_empty() {
            out.push_str("Memory prediction against measurement (MiB; measured by the counting allocator in the last timed iteration):\n");
            for c in &categories {
                out.push_str(&format!(
                    "  {}: predicted {:.1}, measured {:.1}, error {:+.1}\n",
                    c.name,
                    mib(c.predicted),
                    mib(c.measured),
                    mib(c.measured) - mib(c.predicted)
                ));
            }
        }
        out
    }
}
