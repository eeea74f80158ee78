//! The HTML report's input pipeline: one stacked bar of stages per loader thread, and the
//! text report's lines (pace, slowest stage, what to fix).

use std::fmt::Write;

use wick_graph::InputStage;

use super::charts::{esc, stacked};
use crate::profile::Profile;

/// Colours of read, decode, augment and collate.
const STAGE_COLORS: [&str; 4] = ["#4e79a7", "#e15759", "#f28e2b", "#76b7b2"];

/// The section, when the training loop reported its loader's work.
pub(super) fn section(b: &mut String, p: &Profile) {
    let Some(input) = &p.input_pipeline else {
        return;
    };
    b.push_str("<h2>Input pipeline</h2>");
    for t in &input.threads {
        let parts: Vec<(&str, f64, &str)> = InputStage::ALL
            .iter()
            .zip(STAGE_COLORS)
            .map(|(s, color)| (s.as_str(), t.stage_sec(*s), color))
            .collect();
        let _ = write!(
            b,
            "<p>Loader thread {}: {} batches, {} images.</p>",
            t.thread, t.batches, t.images
        );
        b.push_str(&stacked(
            &format!("loader-{}", t.thread),
            &parts,
            "% of the thread's time",
        ));
    }
    let _ = write!(
        b,
        "<pre id=\"input-pipeline\">{}</pre>",
        esc(&input.lines(p.step.as_ref()))
    );
}
