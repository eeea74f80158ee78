//! The CPU contention line.

use crate::profile::contention::CpuContention;

impl CpuContention {
    /// The report's line.
    pub fn line(&self) -> String {
        let verdict = if self.is_contended() {
            "another load shared the cores during the timed iterations: every time here is inflated; rerun on a quiet machine before comparing"
        } else {
            "the cores were this process's own"
        };
        format!(
            "CPU contention : the threads waited for a core {:.1}% of their runnable time in the timed iterations ({:.3} sec waiting, {:.3} sec running; the kernel's run-queue wait); {verdict}\n",
            100.0 * self.waiting_share(),
            self.waited_sec,
            self.ran_sec
        )
    }
}
