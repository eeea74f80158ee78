//! Reading the threads' scheduler counters (`/proc/self/task/*/schedstat`) around the
//! timed iterations, summed into a [`CpuContention`].

use crate::profile::contention::CpuContention;

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

/// The threads' run-queue wait over the timed iterations: their counters at each timed
/// iteration's start, added up at its end.
#[derive(Debug, Default)]
pub(crate) struct ContentionProbe {
    at_start: ThreadTimes,
    now: ThreadTimes,
    total: Option<CpuContention>,
}

impl ContentionProbe {
    /// A timed iteration starts (before the memory counter: reading allocates).
    pub(crate) fn iteration_start(&mut self) {
        self.at_start.read();
    }

    /// The timed iteration ended: what each thread ran and waited since its start.
    pub(crate) fn iteration_end(&mut self) {
        if self.now.read() {
            let total = self.total.get_or_insert_with(Default::default);
            self.now.add_since(&self.at_start, total);
        }
    }

    /// The sums so far; `None` where the system has no scheduler counters.
    pub(crate) fn total(&self) -> Option<CpuContention> {
        self.total
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
        // Spin for 30 ms of this thread's CPU time (not wall time: on a VM the host can
        // take the vCPU away, time the thread's counters rightly never see).
        let cpu = || {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime writes the timespec it is given.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
            ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
        };
        let (c0, t) = (cpu(), std::time::Instant::now());
        let mut x = 0u64;
        while cpu() - c0 < 0.03 && t.elapsed().as_secs() < 10 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        let mut end = ThreadTimes::default();
        assert!(end.read());
        let mut total = CpuContention::default();
        end.add_since(&start, &mut total);
        // The thread ran 30 ms: the counters see it, lagging by up to a scheduler tick.
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
