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
    /// The session's check of every parameter for NaN and infinity.
    #[serde(default)]
    pub non_finite_check_sec: f64,
    /// The training loop scoring the batch (logits read back, accuracy).
    #[serde(default)]
    pub metrics_sec: f64,
    /// Periodic checkpoints.
    #[serde(default)]
    pub checkpoint_sec: f64,
    /// The rest, measured as what no part accounts for: the training loop's own work
    /// (progress bar, learning-rate schedule, slicing the batch).
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

impl StepProfile {
    /// The parts of the step in the order they are reported, each with its name: the
    /// text report and the HTML bar show these, so their shares are one.
    pub fn parts(&self) -> Vec<(&'static str, f64)> {
        let mut parts = vec![
            ("input wait", self.input_wait_sec),
            ("host-to-device copy", self.host_to_device_sec),
            ("graph run", self.run_sec),
            ("loss read-back", self.loss_read_back_sec),
            ("non-finite check", self.non_finite_check_sec),
            ("metrics", self.metrics_sec),
            ("checkpoints", self.checkpoint_sec),
            ("loop's own work", self.other_sec),
        ];
        // Parts nobody reported stay out, except the four every step has.
        parts.retain(|(name, sec)| {
            *sec != 0.0
                || matches!(
                    *name,
                    "input wait" | "host-to-device copy" | "graph run" | "loss read-back"
                )
        });
        parts
    }

    /// The share of the step `sec` is.
    pub fn share(&self, sec: f64) -> f64 {
        if self.wall_sec > 0.0 {
            sec / self.wall_sec
        } else {
            0.0
        }
    }

    /// The report's lines: where the step goes, and the input verdict with its thresholds.
    pub fn lines(&self) -> String {
        let verdict = match self.verdict() {
            InputVerdict::InputBound => "input-bound",
            InputVerdict::PartlyInputBound => "partly input-bound",
            InputVerdict::NotInputBound => "not input-bound",
        };
        let parts: Vec<String> = self
            .parts()
            .iter()
            .map(|(name, sec)| format!("{name} {:.1}%", 100.0 * self.share(*sec)))
            .collect();
        format!(
            "Whole step : {:.6} sec (host clock, mean of the {} timed iterations that the next step's start closes; over them the graph run is {:.6} sec) = {}\n\
             Input : {verdict}: {:.1}% of the step waits for data (TensorFlow's thresholds: {:.0}% or more input-bound, {:.0}-{:.0}% partly, under {:.0}% not)\n",
            self.wall_sec,
            self.intervals,
            self.run_sec,
            parts.join(" + "),
            100.0 * self.input_share(),
            100.0 * INPUT_BOUND,
            100.0 * PARTLY_INPUT_BOUND,
            100.0 * INPUT_BOUND,
            100.0 * PARTLY_INPUT_BOUND,
        )
    }
}
