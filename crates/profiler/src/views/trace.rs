//! The Chrome/Perfetto trace (JSON trace-event format) of every timed iteration:
//! - a `step` track with each iteration's span and the input wait, copy and loss
//!   read-back around it;
//! - one track per phase, with the phase's span and, nested in it, one complete event per
//!   op (args: OP_ID, layer, kernel, shapes, FLOPs, bytes);
//! - flow arrows from each forward op to the backward ops that differentiate it;
//! - one track per data loader thread, each batch it prepared for a timed step with its
//!   read, decode, augment and collate times (laid end to end);
//! - counter tracks of live memory: predicted after each op, and measured by the
//!   counting allocator (each op's peak while it runs, then what it leaves).
//!
//! A cap on the number of events keeps files small: whole iterations past it are left
//! out, and the trace and [`Trace::note`] say so.

use serde_json::{json, Value};

use crate::profile::data::{OpProfile, Profile};
use crate::profile::samples::IterationTimeline;
use wick_graph::ir::Phase;

/// The default cap: about 100 MB of JSON at most, far above a ResNet-50 run of ten
/// iterations (about 5 MB).
pub const MAX_EVENTS: usize = 500_000;

/// A trace file's contents and, when the cap was hit, what was left out.
#[derive(Debug, Clone)]
pub struct Trace {
    /// The JSON text (`{"traceEvents": [...]}`).
    pub json: String,
    /// Events written.
    pub events: usize,
    /// `Some(message)` when iterations were left out to stay under the cap.
    pub note: Option<String>,
}

/// The step track's thread id (the phases use 0, 1, 2).
const STEP_TID: usize = 3;

/// The first data loader thread's track (loader n is `LOADER_TID + n`).
const LOADER_TID: usize = 10;

/// The first process id of the per-rank tracks of a data-parallel run (rank r is
/// `RANK_PID + r`; process 0 is this process's own timeline).
pub const RANK_PID: usize = 1;

impl Profile {
    /// The trace of every timed iteration, capped at [`MAX_EVENTS`] events; `None` without
    /// per-op timings (below verbosity 2).
    pub fn chrome_trace(&self) -> Option<String> {
        self.chrome_trace_capped(MAX_EVENTS).map(|t| t.json)
    }

    /// The trace with at most `max_events` events (whole iterations only).
    pub fn chrome_trace_capped(&self, max_events: usize) -> Option<Trace> {
        let first = self.timeline.first()?;
        let mut w = TraceWriter {
            profile: self,
            origin: first.start - first.input_wait - first.copy,
            step_end: f64::MIN,
            flow_id: 0,
        };
        let mut events = w.metadata();
        let mut written = 0usize;
        for (k, it) in self.timeline.iter().enumerate() {
            let batch = w.iteration(k, it);
            if written + batch.len() > max_events {
                let note = format!(
                    "trace capped at {max_events} events: {k} of {} timed iterations written",
                    self.timeline.len()
                );
                events.push(json!({"ph": "i", "name": note, "s": "g", "pid": 0, "tid": STEP_TID, "ts": w.step_end}));
                return Some(Trace {
                    events: events.len(),
                    json: json!({"traceEvents": events, "displayTimeUnit": "ms"}).to_string(),
                    note: Some(note),
                });
            }
            written += batch.len();
            events.extend(batch);
        }
        events.extend(w.loader_tracks());
        if let Some(last) = self.timeline.last() {
            events.extend(self.rank_tracks(w.us(last.start)));
        }
        Some(Trace {
            events: events.len(),
            json: json!({"traceEvents": events, "displayTimeUnit": "ms"}).to_string(),
            note: None,
        })
    }

    /// A data-parallel run's per-rank tracks: one process per rank, each with its last
    /// timed iteration's ops (one thread per phase), starting at `at` microseconds (rank
    /// 0's last iteration). The ranks' clocks are their own, so each is aligned on its
    /// iteration's start.
    fn rank_tracks(&self, at: f64) -> Vec<Value> {
        let Some(dist) = &self.distributed else {
            return Vec::new();
        };
        let mut events = Vec::new();
        for (rank, ops) in dist.rank_ops.iter().enumerate() {
            let pid = RANK_PID + rank;
            let step = dist.ranks.get(rank).map_or(0.0, |r| r.iteration_median_sec);
            events.push(json!({"ph": "M", "name": "process_name", "pid": pid,
                "args": {"name": format!("rank {rank} of {} ({}), iteration median {:.4} s", dist.world_size, dist.engine, step)}}));
            events.push(json!({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}}));
            for p in Phase::ALL {
                events.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": p as usize, "args": {"name": p.as_str()}}));
            }
            for (op, (start, dur)) in self.ops.iter().zip(ops) {
                events.push(json!({
                    "ph": "X", "name": op.name, "cat": op.phase.as_str(), "pid": pid, "tid": op.phase as usize,
                    "ts": at + (start * 1e9).round() / 1e3, "dur": (dur * 1e9).round() / 1e3,
                    "args": {"op_id": op.op_id, "rank": rank, "layer": op.origin.layer}
                }));
            }
        }
        events
    }
}

/// Writes a profile's timed iterations as trace events, on one clock.
struct TraceWriter<'p> {
    profile: &'p Profile,
    /// Host-clock seconds of the trace's zero: the first iteration's input wait.
    origin: f64,
    /// Where the step track's last span ended (microseconds).
    step_end: f64,
    /// The last forward-to-backward flow's id.
    flow_id: u64,
}

impl TraceWriter<'_> {
    /// Host-clock seconds as the trace's microseconds, to the nanosecond.
    fn us(&self, t: f64) -> f64 {
        ((t - self.origin) * 1e9).round() / 1e3
    }

    /// The process's and the tracks' names.
    fn metadata(&self) -> Vec<Value> {
        let mut events = vec![json!({
            "ph": "M", "name": "process_name", "pid": 0, "args": {"name": format!("wick ({})", self.profile.device)}
        })];
        for p in Phase::ALL {
            events.push(json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": p as usize, "args": {"name": p.as_str()}}));
        }
        events.push(json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": STEP_TID, "args": {"name": "step"}}));
        events
    }

    /// The loader threads' tracks: each batch, and its stages end to end inside it.
    fn loader_tracks(&self) -> Vec<Value> {
        let mut events = Vec::new();
        let mut named = std::collections::BTreeSet::new();
        for span in &self.profile.loader_spans {
            let tid = LOADER_TID + span.thread;
            if named.insert(span.thread) {
                events.push(
                    json!({"ph": "M", "name": "thread_name", "pid": 0, "tid": tid,
                    "args": {"name": format!("loader {}", span.thread)}}),
                );
            }
            let mut at = self.us(span.start);
            let total: f64 = span.stages.iter().sum();
            events.push(
                json!({"ph": "X", "name": "batch", "cat": "input", "pid": 0, "tid": tid,
                "ts": at, "dur": (total * 1e9).round() / 1e3, "args": {"images": span.images}}),
            );
            for (stage, sec) in wick_graph::InputStage::ALL.iter().zip(span.stages) {
                let dur = (sec * 1e9).round() / 1e3;
                events.push(
                    json!({"ph": "X", "name": stage.as_str(), "cat": "input", "pid": 0, "tid": tid,
                    "ts": at, "dur": dur}),
                );
                at += dur;
            }
        }
        events
    }

    /// Iteration `k`'s events: the step track, the phases, the ops with their flows and
    /// memory counters.
    fn iteration(&mut self, k: usize, it: &IterationTimeline) -> Vec<Value> {
        let mut batch = Vec::new();
        // The step track: input wait and copy right before the iteration, the read-back
        // right after; each span starts no earlier than the previous one ended.
        let spans = [
            (
                "input wait",
                it.start - it.copy - it.input_wait,
                it.input_wait,
            ),
            ("copy to device", it.start - it.copy, it.copy),
            ("iteration", it.start, it.length),
            ("loss read-back", it.start + it.length, it.read_back),
        ];
        for (name, start, dur) in spans {
            let start = self.us(start).max(self.step_end);
            let dur = (dur * 1e6 * 1e3).round() / 1e3;
            self.step_end = start + dur;
            batch.push(
                json!({"ph": "X", "name": name, "cat": "step", "pid": 0, "tid": STEP_TID,
                "ts": start, "dur": dur, "args": {"iteration": k}}),
            );
        }
        for (phase, start, dur) in &it.phases {
            batch.push(json!({"ph": "X", "name": phase.as_str(), "cat": "phase", "pid": 0, "tid": *phase as usize,
                "ts": self.us(it.start + start), "dur": (dur * 1e9).round() / 1e3, "args": {"iteration": k}}));
        }
        for (op, &(start, dur)) in self.profile.ops.iter().zip(&it.ops) {
            self.op(&mut batch, k, it, op, (start, dur));
        }
        batch
    }

    /// One op's span, its flow from the forward op it differentiates, and its memory.
    fn op(
        &mut self,
        batch: &mut Vec<Value>,
        k: usize,
        it: &IterationTimeline,
        op: &OpProfile,
        (start, dur): (f64, f64),
    ) {
        batch.push(json!({
            "ph": "X", "name": op.name, "cat": op.phase.as_str(), "pid": 0, "tid": op.phase as usize,
            "ts": self.us(it.start + start), "dur": (dur * 1e9).round() / 1e3,
            "args": {
                "op_id": op.op_id, "iteration": k, "layer": op.origin.layer, "kernel": op.name,
                "inputs": op.input_shapes, "outputs": op.output_shapes, "flops": op.flops, "bytes": op.bytes,
                "forward_op": op.origin.forward_op, "parameter": op.origin.parameter
            }
        }));
        let mid = |w: &Self, op: usize| w.us(it.start + it.ops[op].0 + it.ops[op].1 / 2.0);
        if let (Some(f), Phase::Backward) = (op.origin.forward_op, op.phase) {
            if f < it.ops.len() {
                self.flow_id += 1;
                batch.push(json!({"ph": "s", "name": "forward to backward", "cat": "flow", "id": self.flow_id,
                    "pid": 0, "tid": Phase::Forward as usize, "ts": mid(self, f)}));
                batch.push(json!({"ph": "f", "bp": "e", "name": "forward to backward", "cat": "flow", "id": self.flow_id,
                    "pid": 0, "tid": Phase::Backward as usize, "ts": mid(self, op.op_id)}));
            }
        }
        let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
        let live = self.profile.memory.as_ref().map(|m| &m.live_after);
        if let Some(bytes) = live.and_then(|l| l.get(op.op_id)) {
            batch.push(
                json!({"ph": "C", "name": "live memory (predicted)", "pid": 0,
                "ts": self.us(it.start + start + dur), "args": {"MiB": mib(*bytes)}}),
            );
        }
        // Measured: the op's peak while it runs, then what it leaves allocated.
        if let Some(m) = it.memory.get(op.op_id) {
            batch.push(
                json!({"ph": "C", "name": "live memory (measured)", "pid": 0,
                "ts": self.us(it.start + start), "args": {"MiB": mib(m.peak_bytes)}}),
            );
            batch.push(
                json!({"ph": "C", "name": "live memory (measured)", "pid": 0,
                "ts": self.us(it.start + start + dur), "args": {"MiB": mib(m.exit_bytes)}}),
            );
        }
    }
}
