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

/// Each thread's (id, nanoseconds run, nanoseconds waited) at one moment.
#[derive(Debug, Default)]
pub(crate) struct ThreadTimes(Vec<(u64, u64, u64)>);

impl ThreadTimes {
    /// Reads every thread's counters into `self`; false where the system has none (not
    /// Linux, or a kernel without schedstat).
    pub(crate) fn read(&mut self) -> bool {
        self.0.clear();
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return false;
        };
        for task in tasks.flatten() {
            let Some(id) = task.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            // A thread that ended since the listing has no file: it is left out.
            let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
                continue;
            };
            let mut fields = text.split_whitespace().map(|v| v.parse::<u64>());
            if let (Some(Ok(ran)), Some(Ok(waited))) = (fields.next(), fields.next()) {
                self.0.push((id, ran, waited));
            }
        }
        !self.0.is_empty()
    }

    /// Adds what each thread ran and waited from `start` to `self` to `total`. A thread
    /// that started in between counts from zero; one that ended is left out.
    pub(crate) fn add_since(&self, start: &ThreadTimes, total: &mut CpuContention) {
        for &(id, ran, waited) in &self.0 {
            let (ran0, waited0) = start
                .0
                .iter()
                .find(|t| t.0 == id)
                .map_or((0, 0), |t| (t.1, t.2));
            total.ran_sec += ran.saturating_sub(ran0) as f64 * 1e-9;
            total.waited_sec += waited.saturating_sub(waited0) as f64 * 1e-9;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_spins_runs_and_the_counters_see_it() {
        let mut start = ThreadTimes::default();
        if !start.read() {
            return; // no schedstat on this system
        }
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed().as_millis() < 30 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let mut end = ThreadTimes::default();
        assert!(end.read());
        let mut total = CpuContention::default();
        end.add_since(&start, &mut total);
        // Spinning, the thread is runnable the whole 30 ms: on a core or waiting for one
        // (a loaded machine moves time from one to the other). The counters lag by up to
        // a scheduler tick.
        assert!(total.ran_sec + total.waited_sec >= 0.015, "{total:?}");
        assert!((0.0..=1.0).contains(&total.waiting_share()));
    }

    #[test]
    fn the_share_and_its_verdict() {
        let quiet = CpuContention {
            ran_sec: 0.99,
            waited_sec: 0.01,
        };
        let shared = CpuContention {
            ran_sec: 0.5,
            waited_sec: 0.5,
        };
        assert!(!quiet.is_contended() && shared.is_contended());
        assert!(shared.line().contains("50.0% of their runnable time"));
        assert_eq!(CpuContention::default().waiting_share(), 0.0);
    }
}
