//! What the profiler reads about memory while it runs: a counting allocator, the device's
//! driver and the process's peak resident set.

use wick_graph::MemoryPlan;

use crate::profile::memory::MemoryProfile;

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
