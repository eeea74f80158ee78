//! Timing the whole step: the host clock and the parts of the step (input wait, copy,
//! read-back, ...) reported between iteration starts, summed into a [`StepProfile`].

use wick_graph::StepPart;

use crate::profile::step::StepProfile;

/// A host clock: seconds since a fixed origin. Injected in tests.
pub type WallClock = Box<dyn FnMut() -> f64 + Send>;

/// The real host clock.
pub(crate) fn instant_clock() -> WallClock {
    let origin = std::time::Instant::now();
    Box::new(move || origin.elapsed().as_secs_f64())
}

/// Collects the parts of each step between iteration starts.
#[derive(Debug, Default)]
pub(crate) struct StepRecorder {
    /// Every part reported since the last iteration started, by [`part_index`]: the
    /// input wait and copy reported before the next start belong to this interval too.
    parts: [f64; PARTS],
    /// The input wait and copy reported before the iteration that started last.
    current_before: [f64; 2],
    /// The last iteration's start (host clock), whether it was timed, its run time.
    last_start: Option<(f64, bool)>,
    last_run: f64,
    /// Whether any part was ever reported (without, there is nothing to attribute).
    reported: bool,
    sums: StepProfile,
}

const PARTS: usize = 6;

fn part_index(part: StepPart) -> usize {
    match part {
        StepPart::InputWait => 0,
        StepPart::HostToDevice => 1,
        StepPart::LossReadBack => 2,
        StepPart::NonFiniteCheck => 3,
        StepPart::Metrics => 4,
        StepPart::Checkpoint => 5,
    }
}

impl StepRecorder {
    /// A part reported by the session or the training loop.
    pub(crate) fn part(&mut self, part: StepPart, sec: f64) {
        self.reported = true;
        self.parts[part_index(part)] += sec;
    }

    /// An iteration starts at `now`: closes the interval since the previous start (when
    /// that iteration was timed) with the parts reported in between.
    pub(crate) fn iteration_start(&mut self, now: f64, timed: bool) {
        let p = self.parts;
        if let Some((start, true)) = self.last_start {
            let s = &mut self.sums;
            let wall = now - start;
            s.intervals += 1;
            s.wall_sec += wall;
            s.input_wait_sec += p[0];
            s.host_to_device_sec += p[1];
            s.run_sec += self.last_run;
            s.loss_read_back_sec += p[2];
            s.non_finite_check_sec += p[3];
            s.metrics_sec += p[4];
            s.checkpoint_sec += p[5];
            s.other_sec += wall - self.last_run - p.iter().sum::<f64>();
        }
        self.current_before = [p[0], p[1]];
        self.parts = [0.0; PARTS];
        self.last_start = Some((now, timed));
    }

    /// The input wait and copy reported before the iteration that started last, and the
    /// read-back reported after it so far.
    pub(crate) fn last_parts(&self) -> (f64, f64, f64) {
        (
            self.current_before[0],
            self.current_before[1],
            self.parts[2],
        )
    }

    /// The read-back reported since the last iteration ended.
    pub(crate) fn pending_read_back(&self) -> f64 {
        self.parts[2]
    }

    /// The iteration that started last ran for `run_sec` (host clock).
    pub(crate) fn iteration_end(&mut self, run_sec: f64) {
        self.last_run = run_sec;
    }

    /// Mean seconds per step; `None` before an interval, or when no part was reported.
    pub(crate) fn profile(&self) -> Option<StepProfile> {
        let s = &self.sums;
        if !self.reported || s.intervals == 0 {
            return None;
        }
        let n = s.intervals as f64;
        Some(StepProfile {
            intervals: s.intervals,
            wall_sec: s.wall_sec / n,
            input_wait_sec: s.input_wait_sec / n,
            host_to_device_sec: s.host_to_device_sec / n,
            run_sec: s.run_sec / n,
            loss_read_back_sec: s.loss_read_back_sec / n,
            non_finite_check_sec: s.non_finite_check_sec / n,
            metrics_sec: s.metrics_sec / n,
            checkpoint_sec: s.checkpoint_sec / n,
            other_sec: s.other_sec / n,
        })
    }
}
