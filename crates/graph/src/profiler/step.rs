//! The whole training step, input included. The executor's iteration covers the graph's
//! nodes only; a training step also waits for its batch, copies it in and reads the loss
//! back. The profiler measures the host-clock interval between consecutive iteration
//! starts and splits it into those parts (reported by the session and the training loop
//! through [`Executor::report_step_part`](crate::Executor::report_step_part)), the graph's
//! run, and the rest: the training loop's own work. The parts add up to the interval.

use serde::Serialize;

use crate::hooks::StepPart;

/// A host clock: seconds since a fixed origin. Injected in tests.
pub type WallClock = Box<dyn FnMut() -> f64 + Send>;

/// The real host clock.
pub(crate) fn instant_clock() -> WallClock {
    let origin = std::time::Instant::now();
    Box::new(move || origin.elapsed().as_secs_f64())
}

/// Where the time between consecutive step starts goes, in mean seconds per step.
#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize)]
pub struct StepProfile {
    /// Intervals measured: consecutive step starts whose first step was timed.
    pub intervals: usize,
    /// Mean seconds from one step's start to the next's.
    pub wall_sec: f64,
    /// Waiting for the next batch.
    pub input_wait_sec: f64,
    /// Copying the batch into the graph's inputs (onto the device).
    pub host_to_device_sec: f64,
    /// The graph's run (every node and the executor's work; host clock).
    pub run_sec: f64,
    /// Reading the loss back.
    pub loss_read_back_sec: f64,
    /// Everything else: the training loop's own work (progress bar, logging).
    pub other_sec: f64,
}

/// Whether the input pipeline holds the step back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InputVerdict {
    /// At least [`INPUT_BOUND`] of the step waits for data.
    InputBound,
    /// Between [`PARTLY_INPUT_BOUND`] and [`INPUT_BOUND`].
    PartlyInputBound,
    /// Under [`PARTLY_INPUT_BOUND`].
    NotInputBound,
}

/// The input-wait share from which a step is input-bound: TensorFlow's overview page
/// calls a step "highly input-bound" from 20%. Past it, a faster model cannot speed the
/// run up by more than a fifth before the loader limits it again.
pub const INPUT_BOUND: f64 = 0.20;
/// The share from which the loader is worth a look (TensorFlow's "moderately
/// input-bound" from 5%); under it input wait is within run-to-run noise.
pub const PARTLY_INPUT_BOUND: f64 = 0.05;

impl StepProfile {
    /// The share of the step spent waiting for data.
    pub fn input_share(&self) -> f64 {
        if self.wall_sec > 0.0 {
            self.input_wait_sec / self.wall_sec
        } else {
            0.0
        }
    }

    /// The input-bound verdict from [`input_share`](StepProfile::input_share).
    pub fn verdict(&self) -> InputVerdict {
        match self.input_share() {
            s if s >= INPUT_BOUND => InputVerdict::InputBound,
            s if s >= PARTLY_INPUT_BOUND => InputVerdict::PartlyInputBound,
            _ => InputVerdict::NotInputBound,
        }
    }
}

/// Collects the parts of each step between iteration starts.
#[derive(Debug, Default)]
pub(crate) struct StepRecorder {
    /// Input wait and copy reported since the last iteration started (they belong to the
    /// next one).
    before: [f64; 2],
    /// Those of the iteration that started last.
    current_before: [f64; 2],
    /// The loss read-back reported since the last iteration ended.
    read_back: f64,
    /// The last iteration's start (host clock), whether it was timed, its run time.
    last_start: Option<(f64, bool)>,
    last_run: f64,
    /// Whether any part was ever reported (without, there is nothing to attribute).
    reported: bool,
    sums: StepProfile,
}

impl StepRecorder {
    /// A part reported by the session or the training loop.
    pub(crate) fn part(&mut self, part: StepPart, sec: f64) {
        self.reported = true;
        match part {
            StepPart::InputWait => self.before[0] += sec,
            StepPart::HostToDevice => self.before[1] += sec,
            StepPart::LossReadBack => self.read_back += sec,
        }
    }

    /// An iteration starts at `now`: closes the interval since the previous start (when
    /// that iteration was timed) with the parts reported in between.
    pub(crate) fn iteration_start(&mut self, now: f64, timed: bool) {
        if let Some((start, true)) = self.last_start {
            let s = &mut self.sums;
            let wall = now - start;
            let [input, copy] = self.before;
            s.intervals += 1;
            s.wall_sec += wall;
            s.input_wait_sec += input;
            s.host_to_device_sec += copy;
            s.run_sec += self.last_run;
            s.loss_read_back_sec += self.read_back;
            s.other_sec += wall - input - copy - self.last_run - self.read_back;
        }
        self.current_before = self.before;
        self.before = [0.0; 2];
        self.read_back = 0.0;
        self.last_start = Some((now, timed));
    }

    /// The input wait and copy reported before the iteration that started last, and the
    /// read-back reported after it so far.
    pub(crate) fn last_parts(&self) -> (f64, f64, f64) {
        (
            self.current_before[0],
            self.current_before[1],
            self.read_back,
        )
    }

    /// The read-back reported since the last iteration ended.
    pub(crate) fn pending_read_back(&self) -> f64 {
        self.read_back
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
            other_sec: s.other_sec / n,
        })
    }
}

impl StepProfile {
    /// The report's lines: where the step goes, and the input verdict with its thresholds.
    pub fn lines(&self) -> String {
        let pct = |t: f64| {
            if self.wall_sec > 0.0 {
                100.0 * t / self.wall_sec
            } else {
                0.0
            }
        };
        let verdict = match self.verdict() {
            InputVerdict::InputBound => "input-bound",
            InputVerdict::PartlyInputBound => "partly input-bound",
            InputVerdict::NotInputBound => "not input-bound",
        };
        format!(
            "Whole step : {:.6} sec (host clock, mean of {} intervals between consecutive step starts) = input wait {:.1}% + host-to-device copy {:.1}% + graph run {:.1}% + loss read-back {:.1}% + training loop and other {:.1}%\n\
             Input : {verdict}: {:.1}% of the step waits for data (TensorFlow's thresholds: {:.0}% or more input-bound, {:.0}-{:.0}% partly, under {:.0}% not)\n",
            self.wall_sec,
            self.intervals,
            pct(self.input_wait_sec),
            pct(self.host_to_device_sec),
            pct(self.run_sec),
            pct(self.loss_read_back_sec),
            pct(self.other_sec),
            100.0 * self.input_share(),
            100.0 * INPUT_BOUND,
            100.0 * PARTLY_INPUT_BOUND,
            100.0 * INPUT_BOUND,
            100.0 * PARTLY_INPUT_BOUND,
        )
    }
}
