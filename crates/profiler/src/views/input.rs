//! The input pipeline's lines: each loader thread's stages and pace, and the stage to fix.

use wick_graph::InputStage;

use crate::profile::input_pipeline::InputPipeline;
use crate::profile::Profile;

/// The section: nothing when the training loop reported no loader work.
pub(crate) fn section(p: &Profile) -> String {
    p.input_pipeline
        .as_ref()
        .map(|i| i.lines(p.step.as_ref()))
        .unwrap_or_default()
}

impl InputPipeline {
    /// The report's lines: the stages per batch over every thread, one line per thread,
    /// and, when the step waits for data, what to change.
    pub fn lines(&self, step: Option<&crate::profile::StepProfile>) -> String {
        let total = self.total_sec().max(f64::MIN_POSITIVE);
        let (batches, images, skipped) = self.counts();
        let per_batch = |sec: f64| 1e3 * sec / batches.max(1) as f64;
        let stages: Vec<String> = InputStage::ALL
            .iter()
            .map(|s| {
                let sec = self.stage_sec(*s);
                format!(
                    "{} {:.2} ms ({:.1}%)",
                    s.as_str(),
                    per_batch(sec),
                    100.0 * sec / total
                )
            })
            .collect();
        let on_cpu = self
            .on_cpu_share()
            .map(|s| format!(", on a core {:.0}% of that time", 100.0 * s))
            .unwrap_or_default();
        let mut out = format!(
            "Input pipeline : {} loader thread(s), {batches} batches of the timed steps ({images} images, {skipped} skipped): a batch takes {:.2} ms on a thread = {}; {:.0} images/s per thread{on_cpu}\n",
            self.threads.len(),
            1e3 * self.sec_per_batch(),
            stages.join(" + "),
            self.images_per_sec_per_thread(),
        );
        for t in &self.threads {
            let pace = if t.total_sec() > 0.0 {
                t.images as f64 / t.total_sec()
            } else {
                0.0
            };
            out.push_str(&format!(
                "  loader {} : {} batches, {} images, {:.0} images/s: {}\n",
                t.thread,
                t.batches,
                t.images,
                pace,
                t.stages().shares()
            ));
        }
        let (stage, share) = self.slowest_stage();
        out.push_str(&format!(
            "Slowest input stage : {} ({:.1}% of the loader's time)\n",
            stage.as_str(),
            100.0 * share
        ));
        if let Some(fix) = step.and_then(|s| self.fix(s)) {
            out.push_str(&format!("Input fix : {fix}\n"));
        }
        out
    }
}
