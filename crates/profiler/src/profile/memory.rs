//! The memory part of a profile: the graph's predicted peak and its split
//! ([`MemoryPlan`](wick_graph::MemoryPlan)), beside what was measured: a counting allocator's peak over the timed
//! iterations and the process's peak resident set.

use serde::Serialize;

use wick_graph::MemorySplit;

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
}
