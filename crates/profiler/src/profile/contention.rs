//! How long the process's threads waited for a core while the times were taken: the
//! kernel's run-queue wait (`/proc/self/task/*/schedstat`), summed over the timed
//! iterations. Another load on the machine makes every time in a profile longer; the
//! machine peaks are measured after the run, but this is measured during it.

use serde::{Deserialize, Serialize};

/// From this share of runnable time spent waiting, the cores were shared with another
/// load while the profile's times were taken.
pub const CONTENDED_SHARE: f64 = 0.05;

/// The process's threads over the timed iterations: time on a core and time runnable in
/// a run queue, waiting for one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuContention {
    /// Seconds the threads ran, summed over threads.
    pub ran_sec: f64,
    /// Seconds the threads were ready to run but waited for a core, summed over threads.
    pub waited_sec: f64,
}

impl CpuContention {
    /// The share of runnable time spent waiting for a core (0 when nothing ran).
    pub fn waiting_share(&self) -> f64 {
        let runnable = self.ran_sec + self.waited_sec;
        if runnable > 0.0 {
            self.waited_sec / runnable
        } else {
            0.0
        }
    }

    /// Whether another load shared the cores enough to inflate the times.
    pub fn is_contended(&self) -> bool {
        self.waiting_share() >= CONTENDED_SHARE
    }
}
