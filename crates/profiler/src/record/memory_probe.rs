//! What the profiler reads about memory while it runs: a counting allocator, the device's
//! driver and the process's peak resident set.

use candle_core::Device;
use wick_graph::{MemoryPlan, NodeInfo};

use crate::profile::memory::{MemoryProfile, OpMemory};

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
pub(crate) fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Restarts the process's peak resident set from its current size (Linux: `5` to
/// `/proc/self/clear_refs`), after a probe whose buffers would otherwise stand in for the
/// run's peak. Where that is not possible the peak keeps the probe's buffers.
pub(crate) fn restart_peak_rss() {
    // The probe's freed buffers go back to the system first (glibc keeps them otherwise).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only hands free heap memory back to the system.
    unsafe {
        libc::malloc_trim(0);
    }
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

impl MemoryProfile {
    /// The graph's predicted memory beside what was measured: the counting allocator's
    /// peak, the device's use and the process's peak resident set read now.
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
}

/// What the profiler holds about memory: the graph's plan, and what the counting allocator
/// and the device measured over the timed iterations.
#[derive(Default)]
pub(crate) struct MemoryRecorder {
    /// The executor's memory plan (the prediction).
    pub(crate) plan: Option<MemoryPlan>,
    /// The counting allocator, when one is attached.
    pub(crate) counter: Option<Box<dyn MemoryCounter>>,
    /// The device, to ask its driver for memory in use (not on the CPU).
    pub(crate) device: Option<Device>,
    /// The counter's most bytes over the timed iterations.
    measured_peak: Option<u64>,
    /// The counter's bytes at the start of the iteration in progress and of the last
    /// timed one, and each op's measured memory in them.
    start_live: Option<u64>,
    last_start_live: Option<u64>,
    op_memory: Vec<OpMemory>,
    last_op_memory: Vec<OpMemory>,
    /// The most device memory in use seen at an iteration's end.
    device_used: Option<u64>,
}

impl MemoryRecorder {
    /// Forgets every measurement (the plan, counter and device stay).
    pub(crate) fn reset(&mut self) {
        self.measured_peak = None;
        self.start_live = None;
        self.last_start_live = None;
        self.last_op_memory.clear();
        self.device_used = None;
    }

    /// A timed iteration starts: a new peak, from the bytes allocated now.
    pub(crate) fn iteration_start(&mut self) {
        if let Some(c) = &self.counter {
            c.reset_peak();
            self.start_live = Some(c.live_bytes());
            self.op_memory.clear();
        }
    }

    /// An op starts (recording per op): its entry bytes, and a new peak.
    pub(crate) fn before_op(&mut self) {
        if let Some(c) = &self.counter {
            let entry = c.live_bytes();
            c.reset_peak();
            self.op_memory.push(OpMemory {
                entry_bytes: entry,
                ..Default::default()
            });
        }
    }

    /// The op that started last ended: its peak and exit bytes.
    pub(crate) fn after_op(&mut self) {
        if let (Some(c), Some(m)) = (&self.counter, self.op_memory.last_mut()) {
            m.peak_bytes = c.peak_bytes();
            m.exit_bytes = c.live_bytes();
        }
    }

    /// A timed iteration of a graph of `nodes` nodes ended: the counter's peak (each op
    /// restarted it, so the iteration's is the largest of theirs), its ops' memory, and
    /// the device's memory in use.
    pub(crate) fn iteration_end(&mut self, nodes: usize) {
        if let Some(c) = &self.counter {
            let peak = self
                .op_memory
                .iter()
                .map(|m| m.peak_bytes)
                .fold(c.peak_bytes(), u64::max);
            self.measured_peak = Some(self.measured_peak.map_or(peak, |m| m.max(peak)));
            self.last_start_live = self.start_live;
            if self.op_memory.len() == nodes {
                self.last_op_memory = self.op_memory.clone();
            }
        }
        if let Some(used) = self.device.as_ref().and_then(device_used) {
            self.device_used = Some(self.device_used.map_or(used, |m| m.max(used)));
        }
    }

    /// The iteration's ops' memory when every op of a graph of `nodes` was measured.
    pub(crate) fn iteration_ops(&self, nodes: usize) -> Vec<OpMemory> {
        if self.op_memory.len() == nodes {
            self.op_memory.clone()
        } else {
            Vec::new()
        }
    }

    /// Op `op_id`'s memory in the last timed iteration.
    pub(crate) fn last_op(&self, op_id: usize) -> Option<OpMemory> {
        self.last_op_memory.get(op_id).copied()
    }

    /// The prediction beside the measurements, with the graph's `nodes` to name the
    /// peak's kernel; `None` without a plan.
    pub(crate) fn profile(&self, nodes: &[NodeInfo]) -> Option<MemoryProfile> {
        let plan = self.plan.as_ref()?;
        let kernel = plan.peak_op.map(|op| nodes[op].name.to_string());
        let mut m = MemoryProfile::new(plan, kernel, self.measured_peak, self.device_used);
        m.start_live_bytes = self.last_start_live;
        m.ops = self.last_op_memory.clone();
        Some(m)
    }
}
