//! The whole step's lines: where the step goes and the input verdict.

use crate::profile::step::{InputVerdict, StepProfile, INPUT_BOUND, PARTLY_INPUT_BOUND};

impl StepProfile {
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
