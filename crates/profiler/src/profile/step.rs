//! The whole training step, input included. The executor's iteration covers the graph's
//! nodes only; a training step also waits for its batch, copies it in and reads the loss
//! back. The profiler measures the host-clock interval between consecutive iteration
//! starts and splits it into those parts (reported by the session and the training loop
//! through [`Executor::report_step_part`](wick_graph::Executor::report_step_part)), the graph's
//! run, and the rest: the training loop's own work. The parts add up to the interval.

use serde::Serialize;

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
        self.share(self.input_wait_sec)
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
}
