//! Recording the data loader's reports ([`LoaderWork`]) into an [`InputPipeline`] and the
//! trace's loader tracks.

use std::time::Instant;

use wick_graph::LoaderWork;

use crate::profile::input_pipeline::{InputPipeline, LoaderThread};
use crate::profile::samples::LoaderSpan;

/// Spans kept for the trace at most (about a thousand steps of eight-thread loading).
const MAX_SPANS: usize = 10_000;

/// The loader's work for the timed steps.
#[derive(Debug)]
pub(crate) struct InputRecorder {
    /// The host clock's origin, to place the loader's spans on the profiler's clock.
    origin: Instant,
    pipeline: InputPipeline,
    spans: Vec<LoaderSpan>,
}

impl InputRecorder {
    /// Nothing recorded; spans are placed relative to `origin`.
    pub(crate) fn new(origin: Instant) -> Self {
        InputRecorder {
            origin,
            pipeline: InputPipeline::default(),
            spans: Vec::new(),
        }
    }

    /// Forgets everything recorded.
    pub(crate) fn reset(&mut self) {
        *self = InputRecorder::new(self.origin);
    }

    /// A batch the training loop took for a timed step.
    pub(crate) fn record(&mut self, work: &LoaderWork) {
        let threads = &mut self.pipeline.threads;
        let at = match threads.binary_search_by_key(&work.thread, |t| t.thread) {
            Ok(i) => i,
            Err(i) => {
                threads.insert(
                    i,
                    LoaderThread {
                        thread: work.thread,
                        ..LoaderThread::default()
                    },
                );
                i
            }
        };
        let t = &mut threads[at];
        t.batches += 1;
        t.images += work.images;
        t.skipped += work.skipped;
        t.add(&work.stages);
        t.cpu_sec = match (t.batches, t.cpu_sec, work.cpu_sec) {
            (1, _, now) => now,
            (_, Some(sum), Some(now)) => Some(sum + now),
            _ => None,
        };
        if self.spans.len() < MAX_SPANS {
            self.spans.push(LoaderSpan {
                thread: work.thread,
                start: work
                    .started
                    .saturating_duration_since(self.origin)
                    .as_secs_f64(),
                stages: work.stages.0,
                images: work.images,
            });
        }
    }

    /// What was recorded; `None` before any report.
    pub(crate) fn profile(&self) -> Option<InputPipeline> {
        (!self.pipeline.threads.is_empty()).then(|| self.pipeline.clone())
    }

    /// The recorded batches' spans, for the trace.
    pub(crate) fn spans(&self) -> Vec<LoaderSpan> {
        self.spans.clone()
    }
}
