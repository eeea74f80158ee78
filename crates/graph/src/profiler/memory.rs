//! The memory part of a profile: the graph's predicted peak and its split
//! ([`MemoryPlan`]), beside what was measured: a counting allocator's peak over the timed
//! iterations and the process's peak resident set.

use serde::Serialize;

use crate::memory::{MemoryPlan, MemorySplit};

/// A process-wide count of allocated bytes: the examples' counting global allocator
/// (`wick::allocator::Counter`).
pub trait MemoryCounter: Send {
    /// Starts a new peak from the bytes allocated now.
    fn reset_peak(&self);
    /// The most bytes allocated at once since the last reset.
    fn peak_bytes(&self) -> u64;
}

/// Predicted and measured memory.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct MemoryProfile {
    /// The graph's predicted peak: values live at once under the executor's freeing.
    pub predicted_peak_bytes: u64,
    /// The OP_ID right after which the predicted peak happens.
    pub peak_op: Option<usize>,
    /// That node's kernel.
    pub peak_kernel: Option<String>,
    /// What the predicted peak is made of.
    pub split: MemorySplit,
    /// Predicted bytes live right after each node, in OP_ID order.
    pub live_after: Vec<u64>,
    /// The counting allocator's peak over the timed iterations (with a counter attached).
    pub measured_peak_bytes: Option<u64>,
    /// The process's peak resident set (`VmHWM`, Linux).
    pub peak_rss_bytes: Option<u64>,
    /// On a CUDA device: the most device memory in use at the end of a timed iteration,
    /// as the driver reports it (total minus free, every process on the device).
    pub device_used_bytes: Option<u64>,
}

impl MemoryProfile {
    pub(crate) fn new(
        plan: &MemoryPlan,
        kernel: Option<String>,
        measured: Option<u64>,
        device_used: Option<u64>,
    ) -> Self {
        MemoryProfile {
            predicted_peak_bytes: plan.peak_bytes,
            peak_op: plan.peak_op,
            peak_kernel: kernel,
            split: plan.split,
            live_after: plan.live_after.clone(),
            measured_peak_bytes: measured,
            peak_rss_bytes: peak_rss(),
            device_used_bytes: device_used,
        }
    }

    /// The report's lines.
    pub fn lines(&self) -> String {
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let s = &self.split;
        let at = match (self.peak_op, &self.peak_kernel) {
            (Some(op), Some(k)) => format!(" after OP_ID{op} ({k})"),
            _ => String::new(),
        };
        let mut out = format!(
            "Memory (predicted from the graph) : peak {:.1} MiB{at} = parameters {:.1} + gradients {:.1} + optimizer state {:.1} + saved for backward {:.1} + transient {:.1} + inputs {:.1} + running statistics {:.1} MiB\n",
            mib(self.predicted_peak_bytes),
            mib(s.parameters),
            mib(s.gradients),
            mib(s.optimizer_state),
            mib(s.saved_for_backward),
            mib(s.transient),
            mib(s.inputs),
            mib(s.statistics),
        );
        let measured = match self.measured_peak_bytes {
            Some(m) => {
                let diff = m as f64 - self.predicted_peak_bytes as f64;
                format!(
                    "counting allocator peak {:.1} MiB over the timed iterations ({:+.1} MiB from the prediction: kernel workspace such as im2col buffers, and everything else the process holds)",
                    mib(m),
                    diff / (1u64 << 20) as f64
                )
            }
            None => "no counting allocator attached".to_string(),
        };
        let rss = match self.peak_rss_bytes {
            Some(r) => format!("; peak RSS {:.1} MiB", mib(r)),
            None => String::new(),
        };
        let device = match self.device_used_bytes {
            Some(d) => format!(
                "; the device reports {:.1} MiB in use (every process)",
                mib(d)
            ),
            None => String::new(),
        };
        out.push_str(&format!("Memory (measured) : {measured}{rss}{device}\n"));
        out
    }
}

/// The memory in use on `device` as its driver reports it (CUDA: total minus free);
/// `None` on the CPU or when the driver does not answer.
pub(crate) fn device_used(device: &candle_core::Device) -> Option<u64> {
    match device {
        #[cfg(feature = "cuda")]
        candle_core::Device::Cuda(dev) => {
            use candle_core::cuda::cudarc::driver::result;
            dev.cuda_stream().context().bind_to_thread().ok()?;
            let (free, total) = result::mem_get_info().ok()?;
            Some(total.saturating_sub(free) as u64)
        }
        _ => None,
    }
}

/// The process's peak resident set size, from `/proc/self/status` (Linux).
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
