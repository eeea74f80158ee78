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
    /// The bytes allocated now.
    fn live_bytes(&self) -> u64;
}

/// One op's measured memory: the counting allocator's bytes when the op started, the
/// most it held while the op ran, and when it ended (PyTorch's `profile_memory`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct OpMemory {
    /// Bytes allocated when the op started.
    pub entry_bytes: u64,
    /// The most bytes allocated while it ran.
    pub peak_bytes: u64,
    /// Bytes allocated when it ended (its outputs made, nothing freed yet).
    pub exit_bytes: u64,
}

impl OpMemory {
    /// What the op allocated and freed inside itself: its kernels' workspace (im2col
    /// buffers, packed GEMM panels), the peak above both ends.
    pub fn workspace_bytes(&self) -> u64 {
        self.peak_bytes
            .saturating_sub(self.entry_bytes.max(self.exit_bytes))
    }
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
    /// The counting allocator's bytes when the last timed iteration started: the graph's
    /// persistent values and everything else the process holds.
    #[serde(default)]
    pub start_live_bytes: Option<u64>,
    /// Per node, in OP_ID order, its measured memory in the last timed iteration (at
    /// verbosity 2 with a counter attached; empty otherwise).
    #[serde(default)]
    pub ops: Vec<OpMemory>,
    /// The process's peak resident set after the report's own probes (the roofline's
    /// copy buffers), when they ran: the process's whole peak, as `/usr/bin/time` sees it.
    #[serde(default)]
    pub process_peak_rss_bytes: Option<u64>,
}

/// One line of the prediction-against-measurement table.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MemoryCategory {
    /// What it counts.
    pub name: &'static str,
    /// Predicted bytes.
    pub predicted: u64,
    /// Measured bytes.
    pub measured: u64,
}

impl MemoryProfile {
    pub(crate) fn new(
        plan: &MemoryPlan,
        kernel: Option<String>,
        measured: Option<u64>,
        device_used: Option<u64>,
    ) -> Self {
        MemoryProfile {
            start_live_bytes: None,
            ops: Vec::new(),
            process_peak_rss_bytes: None,
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

    /// Reads the process's peak resident set again, after the report's probes ran (the
    /// roofline's copy buffers raise it): the report then gives both.
    pub fn refresh_process_peak(&mut self) {
        self.process_peak_rss_bytes = peak_rss();
    }

    /// The prediction against the measurement, per category (needs the per-op
    /// measurement): what is held when the iteration starts, the values made in the
    /// iteration and live at the predicted peak's op, and the kernels' workspace inside
    /// ops, which the prediction does not model. Each measured part is the counter's
    /// difference, so the parts add up to the measured live bytes at the peak op.
    pub fn categories(&self) -> Vec<MemoryCategory> {
        let (Some(start), Some(op)) = (self.start_live_bytes, self.peak_op) else {
            return Vec::new();
        };
        let Some(at) = self.ops.get(op) else {
            return Vec::new();
        };
        let s = &self.split;
        let held = [
            s.parameters,
            s.optimizer_state,
            s.statistics,
            s.inputs,
            s.pass_products,
            s.kernel_workspace,
        ]
        .iter()
        .fold(0u64, |a, b| a.saturating_add(*b));
        let made = s
            .gradients
            .saturating_add(s.saved_for_backward)
            .saturating_add(s.transient);
        let workspace = self
            .ops
            .iter()
            .map(OpMemory::workspace_bytes)
            .max()
            .unwrap_or(0);
        vec![
            MemoryCategory {
                name: "held when the iteration starts (parameters, optimizer state, statistics, inputs, pass products; measured: all the process holds)",
                predicted: held,
                measured: start,
            },
            MemoryCategory {
                name: "made in the iteration, live after the predicted peak's op (activations, gradients)",
                predicted: made,
                measured: at.exit_bytes.saturating_sub(start),
            },
            MemoryCategory {
                name: "kernel workspace inside one op, the largest (im2col, packed GEMM panels; not predicted)",
                predicted: 0,
                measured: workspace,
            },
        ]
    }

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
