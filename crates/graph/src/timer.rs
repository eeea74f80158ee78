//! Timers: how the profiler reads time. On the CPU a host clock is right (candle's CPU ops
//! run to completion before returning); on CUDA, events recorded on the stream and read
//! after one synchronisation per iteration. The trait lets tests inject a fake clock.

use std::time::Instant;

/// A set of numbered time marks, recorded during an iteration and read after it.
pub trait Timer {
    /// How this timer measures, for reports (`host clock (std::time::Instant)`, `CUDA events`).
    fn method(&self) -> &'static str;
    /// Prepares `slots` marks; called once before the first timed iteration. A CUDA timer
    /// creates its events here, once, and reuses them every iteration.
    fn prepare(&mut self, slots: usize) -> crate::Result<()>;
    /// Records the current time into mark `slot`.
    fn mark(&mut self, slot: usize);
    /// After an iteration: waits until every recorded mark is complete (one synchronisation)
    /// and writes each mark's time in seconds (from any fixed origin) into `out`.
    fn read(&mut self, out: &mut [f64]) -> crate::Result<()>;
}

/// A host-clock timer: `Instant::now()` at each mark.
#[derive(Debug)]
pub struct HostTimer {
    origin: Instant,
    marks: Vec<f64>,
}

impl Default for HostTimer {
    fn default() -> Self {
        HostTimer {
            origin: Instant::now(),
            marks: Vec::new(),
        }
    }
}

impl Timer for HostTimer {
    fn method(&self) -> &'static str {
        "host clock (std::time::Instant)"
    }

    fn prepare(&mut self, slots: usize) -> crate::Result<()> {
        self.marks = vec![0.0; slots];
        Ok(())
    }

    fn mark(&mut self, slot: usize) {
        if let Some(m) = self.marks.get_mut(slot) {
            *m = self.origin.elapsed().as_secs_f64();
        }
    }

    fn read(&mut self, out: &mut [f64]) -> crate::Result<()> {
        let n = out.len().min(self.marks.len());
        out[..n].copy_from_slice(&self.marks[..n]);
        Ok(())
    }
}
