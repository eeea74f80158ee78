//! The data loader's side of the input: what each loader thread spent reading, decoding,
//! augmenting and collating the batches the timed steps trained on (tf.data's input
//! pipeline analysis), and which stage to fix when the step waits for data.

use serde::{Deserialize, Serialize};
use wick_graph::InputStage;

use crate::profile::step::{InputVerdict, StepProfile};

/// One loader thread's batches, summed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoaderThread {
    /// The thread, from 0 (`wick-loader-N`).
    pub thread: usize,
    /// Batches it prepared for timed steps.
    pub batches: usize,
    /// Images in them.
    pub images: usize,
    /// Unreadable images it skipped.
    pub skipped: usize,
    /// Seconds reading files.
    pub read_sec: f64,
    /// Seconds decoding them.
    pub decode_sec: f64,
    /// Seconds cropping, resizing, flipping and normalising.
    pub augment_sec: f64,
    /// Seconds building the batch's tensors.
    pub collate_sec: f64,
    /// The thread's CPU seconds over those batches (absent where it cannot be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_sec: Option<f64>,
}

impl LoaderThread {
    /// Seconds in `stage`.
    pub fn stage_sec(&self, stage: InputStage) -> f64 {
        match stage {
            InputStage::Read => self.read_sec,
            InputStage::Decode => self.decode_sec,
            InputStage::Augment => self.augment_sec,
            InputStage::Collate => self.collate_sec,
        }
    }

    /// Its stages' seconds.
    pub fn stages(&self) -> wick_graph::InputStages {
        wick_graph::InputStages(InputStage::ALL.map(|s| self.stage_sec(s)))
    }

    pub(crate) fn add(&mut self, stages: &wick_graph::InputStages) {
        self.read_sec += stages.get(InputStage::Read);
        self.decode_sec += stages.get(InputStage::Decode);
        self.augment_sec += stages.get(InputStage::Augment);
        self.collate_sec += stages.get(InputStage::Collate);
    }

    /// Seconds in every stage.
    pub fn total_sec(&self) -> f64 {
        InputStage::ALL.iter().map(|s| self.stage_sec(*s)).sum()
    }
}

/// Every loader thread's work for the timed steps.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InputPipeline {
    /// One entry per loader thread that reported, by thread.
    pub threads: Vec<LoaderThread>,
}

/// A stage's share of the loader's time from which it is named as the one to fix.
pub const DOMINANT_STAGE: f64 = 0.5;
/// The share of their working time the loader threads must run on a core; under it they
/// are starved of CPU, and more threads would be starved too.
pub const STARVED_BELOW: f64 = 0.5;

impl InputPipeline {
    /// Seconds in `stage`, over every thread.
    pub fn stage_sec(&self, stage: InputStage) -> f64 {
        self.threads.iter().map(|t| t.stage_sec(stage)).sum()
    }

    /// Seconds in every stage, over every thread.
    pub fn total_sec(&self) -> f64 {
        self.threads.iter().map(LoaderThread::total_sec).sum()
    }

    /// Batches, images and skipped images, over every thread.
    pub fn counts(&self) -> (usize, usize, usize) {
        self.threads.iter().fold((0, 0, 0), |(b, i, s), t| {
            (b + t.batches, i + t.images, s + t.skipped)
        })
    }

    /// The stage that takes longest, with its share of the loader's time.
    pub fn slowest_stage(&self) -> (InputStage, f64) {
        let total = self.total_sec().max(f64::MIN_POSITIVE);
        InputStage::ALL
            .into_iter()
            .map(|s| (s, self.stage_sec(s) / total))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((InputStage::Decode, 0.0))
    }

    /// Seconds one thread takes for a batch, on average.
    pub fn sec_per_batch(&self) -> f64 {
        let (batches, _, _) = self.counts();
        self.total_sec() / batches.max(1) as f64
    }

    /// Images a loader thread prepares per second while working.
    pub fn images_per_sec_per_thread(&self) -> f64 {
        let (_, images, _) = self.counts();
        let total = self.total_sec();
        if total > 0.0 {
            images as f64 / total
        } else {
            0.0
        }
    }

    /// The share of the loader threads' working time they ran on a core (their CPU time
    /// over the stages' sum); `None` where CPU time was not measured.
    pub fn on_cpu_share(&self) -> Option<f64> {
        let cpu: Option<f64> = self.threads.iter().map(|t| t.cpu_sec).sum();
        let total = self.total_sec();
        cpu.filter(|_| total > 0.0).map(|c| (c / total).min(1.0))
    }

    /// Loader threads needed for the loader to keep up with `step`'s compute (the step
    /// without its input wait), at this pace per thread.
    pub fn threads_needed(&self, step: &StepProfile) -> usize {
        let compute = (step.wall_sec - step.input_wait_sec).max(f64::MIN_POSITIVE);
        (self.sec_per_batch() / compute).ceil().max(1.0) as usize
    }

    /// What to change when the step waits for data: more loader threads when too few run
    /// for the loader's pace, and the slowest stage's own remedy. `None` when the step is
    /// not input-bound.
    pub fn fix(&self, step: &StepProfile) -> Option<String> {
        if step.verdict() == InputVerdict::NotInputBound || self.threads.is_empty() {
            return None;
        }
        let (stage, share) = self.slowest_stage();
        let remedy = match stage {
            InputStage::Decode => "decoding: a faster decoder, smaller source images (decoding grows with their pixels), or decode once to a cache of resized images",
            InputStage::Read => "reading the files: faster storage, the files in the page cache (a local copy), or fewer, larger files",
            InputStage::Augment => "augmenting: a smaller output size, or cheaper transforms (resize work grows with the crop's pixels)",
            InputStage::Collate => "collating: fewer, larger batches",
        };
        let needed = self.threads_needed(step);
        let running = self.threads.len();
        let starved = self.on_cpu_share().filter(|s| *s < STARVED_BELOW);
        let threads = if let Some(on_cpu) = starved {
            format!(
                "the loader threads ran on a core only {:.0}% of their working time, so they are starved of CPU (a cgroup limit, or cores busy with other work): give them cores (more threads would be starved too), or ",
                100.0 * on_cpu
            )
        } else if needed > running {
            format!(
                "run {needed} loader threads instead of {running} (a batch takes {:.1} ms on a thread, the step's compute {:.1} ms), or ",
                1e3 * self.sec_per_batch(),
                1e3 * (step.wall_sec - step.input_wait_sec)
            )
        } else {
            format!("{running} loader threads should keep up at their measured pace, so they are starved of CPU (other work, the kernels' threads, a cgroup limit): give them cores, or ")
        };
        let named = if share >= DOMINANT_STAGE {
            format!(
                "{} is the stage to fix ({:.0}% of the loader's time)",
                stage.as_str(),
                100.0 * share
            )
        } else {
            format!(
                "no stage dominates ({} is the largest at {:.0}%)",
                stage.as_str(),
                100.0 * share
            )
        };
        Some(format!("{named}: {threads}speed up {remedy}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(wall: f64, wait: f64) -> StepProfile {
        StepProfile {
            intervals: 10,
            wall_sec: wall,
            input_wait_sec: wait,
            run_sec: wall - wait,
            ..StepProfile::default()
        }
    }

    fn thread(thread: usize, read: f64, decode: f64, augment: f64) -> LoaderThread {
        LoaderThread {
            thread,
            batches: 10,
            images: 160,
            skipped: 0,
            read_sec: read,
            decode_sec: decode,
            augment_sec: augment,
            collate_sec: 0.01,
            cpu_sec: None,
        }
    }

    #[test]
    fn the_fix_names_the_dominant_stage_and_the_threads_needed() {
        // Two threads, 10 batches each at 0.2 s a batch; the step computes in 0.05 s.
        let p = InputPipeline {
            threads: vec![thread(0, 0.1, 1.5, 0.39), thread(1, 0.1, 1.5, 0.39)],
        };
        assert_eq!(p.slowest_stage().0, InputStage::Decode);
        assert!((p.sec_per_batch() - 0.2).abs() < 1e-12);
        assert_eq!(p.threads_needed(&step(0.2, 0.15)), 4);
        let fix = p.fix(&step(0.2, 0.15)).unwrap();
        assert!(
            fix.starts_with("decode is the stage to fix (75% of"),
            "{fix}"
        );
        assert!(fix.contains("run 4 loader threads instead of 2"), "{fix}");
        // Not input-bound: nothing to fix.
        assert_eq!(p.fix(&step(0.2, 0.001)), None);
        // Reading dominates: the storage remedy.
        let p = InputPipeline {
            threads: vec![thread(0, 1.5, 0.2, 0.2)],
        };
        assert!(p.fix(&step(0.2, 0.15)).unwrap().contains("faster storage"));
    }

    #[test]
    fn enough_threads_that_still_fall_behind_are_starved_of_cpu() {
        let p = InputPipeline {
            threads: vec![thread(0, 0.01, 0.2, 0.1), thread(1, 0.01, 0.2, 0.1)],
        };
        // 0.032 s a batch, 0.1 s of compute: one thread would do, yet the step waits.
        let fix = p.fix(&step(0.3, 0.2)).unwrap();
        assert!(fix.contains("starved of CPU"), "{fix}");
        assert!(fix.starts_with("decode is the stage to fix"), "{fix}");
        // Measured CPU time under half the working time: starved, whatever the count says.
        let mut starved = p.clone();
        starved
            .threads
            .iter_mut()
            .for_each(|t| t.cpu_sec = Some(0.1 * t.total_sec()));
        let fix = starved.fix(&step(0.3, 0.2)).unwrap();
        assert!(
            fix.contains("ran on a core only 10% of their working time"),
            "{fix}"
        );
        let text = p.lines(Some(&step(0.3, 0.2)));
        assert!(text.contains("Slowest input stage : decode"), "{text}");
        assert!(text.contains("loader 1 : 10 batches, 160 images"), "{text}");
    }
}
