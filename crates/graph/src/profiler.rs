//! The time profiler: a [`Hook`] that reproduces Apache SINGA's time-profiling output and
//! fixes its flaws (see `shared/spec/time-profiling.md`).
//!
//! - Verbosity 0: nothing is timed and nothing is recorded. 1: the time of each phase
//!   (forward, backward, optimizer) and of the whole iteration. 2: also every op.
//! - The first `skip` iterations run untimed (warm-up); every figure is an average over
//!   the timed iterations.
//! - Each phase is measured directly, from its first op's start to its last op's end,
//!   using the phase each node was recorded with, not guessed from kernel names.
//! - Beyond SINGA: a per-op-type table (Calls, Total, Min, Max, Ave, Ratio, GFLOP/s),
//!   the step-time breakdown and framework overhead, a Chrome trace of the last timed
//!   iteration, and the whole [`Profile`] as a struct or JSON.

use std::fmt::Write as _;

use candle_core::Device;
use serde::Serialize;

use crate::error::{GraphError, Result};
use crate::float_format::cpp_float;
use crate::hooks::{Hook, NodeInfo};
use crate::ir::Phase;
use crate::timer::{HostTimer, Timer};

const ITER_START: usize = 0;
const ITER_END: usize = 1;
const fn phase_start(p: Phase) -> usize {
    2 + 2 * p as usize
}
const fn phase_end(p: Phase) -> usize {
    3 + 2 * p as usize
}
const fn op_start(op_id: usize) -> usize {
    8 + 2 * op_id
}
const fn op_end(op_id: usize) -> usize {
    9 + 2 * op_id
}

/// SINGA-style time profiler. Attach it to an [`Executor`](crate::Executor), run, then
/// [`print`](TimeProfiler::print) it or take its [`profile`](TimeProfiler::profile).
pub struct TimeProfiler {
    verbosity: u8,
    skip: usize,
    timer: Option<Box<dyn Timer>>,
    nodes: Vec<NodeInfo>,
    device: String,
    phases_present: [bool; 3],
    marks: Vec<f64>,
    prepared: bool,
    timing: bool,
    seen: usize,
    timed: usize,
    iter_sum: f64,
    /// Seconds of each timed iteration, for the median and spread.
    iter_times: Vec<f64>,
    phase_sum: [f64; 3],
    op_sum: Vec<f64>,
    op_min: Vec<f64>,
    op_max: Vec<f64>,
    last_marks: Vec<f64>,
}

impl std::fmt::Debug for TimeProfiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimeProfiler")
            .field("verbosity", &self.verbosity)
            .field("skip", &self.skip)
            .field("seen", &self.seen)
            .field("timed", &self.timed)
            .finish()
    }
}

impl TimeProfiler {
    /// A profiler at `verbosity` (0, 1 or 2; higher counts as 2) that leaves the first
    /// `skip` iterations untimed (SINGA's default is 5). It picks the timer that fits the
    /// executor's device when attached.
    pub fn new(verbosity: u8, skip: usize) -> Self {
        TimeProfiler {
            verbosity: verbosity.min(2),
            skip,
            timer: None,
            nodes: Vec::new(),
            device: String::new(),
            phases_present: [false; 3],
            marks: Vec::new(),
            prepared: false,
            timing: false,
            seen: 0,
            timed: 0,
            iter_sum: 0.0,
            iter_times: Vec::new(),
            phase_sum: [0.0; 3],
            op_sum: Vec::new(),
            op_min: Vec::new(),
            op_max: Vec::new(),
            last_marks: Vec::new(),
        }
    }

    /// The same profiler with an injected timer (a fake clock in tests, say).
    pub fn with_timer(mut self, timer: Box<dyn Timer>) -> Self {
        self.timer = Some(timer);
        self
    }

    /// The verbosity level.
    pub fn verbosity(&self) -> u8 {
        self.verbosity
    }

    /// Changes the verbosity for the iterations that follow.
    pub fn set_verbosity(&mut self, verbosity: u8) {
        self.verbosity = verbosity.min(2);
    }

    /// How many iterations have been timed so far.
    pub fn timed_iterations(&self) -> usize {
        self.timed
    }

    /// Forgets every measurement; the next `skip` iterations are skipped again.
    pub fn reset(&mut self) {
        self.seen = 0;
        self.timed = 0;
        self.iter_sum = 0.0;
        self.iter_times.clear();
        self.phase_sum = [0.0; 3];
        self.op_sum.iter_mut().for_each(|v| *v = 0.0);
        self.op_min.iter_mut().for_each(|v| *v = f64::INFINITY);
        self.op_max.iter_mut().for_each(|v| *v = 0.0);
        self.last_marks.clear();
    }

    fn mark(&mut self, slot: usize) {
        if let Some(t) = self.timer.as_mut() {
            t.mark(slot);
        }
    }

    /// The results so far.
    pub fn profile(&self) -> Profile {
        let n = self.timed.max(1) as f64;
        let ops = if self.verbosity >= 2 && self.timed > 0 {
            self.nodes
                .iter()
                .enumerate()
                .map(|(i, info)| OpProfile {
                    op_id: info.op_id,
                    name: info.name.to_string(),
                    phase: info.phase,
                    mean_sec: self.op_sum[i] / n,
                    min_sec: self.op_min[i],
                    max_sec: self.op_max[i],
                    flops: info.flops,
                    input_shapes: info.input_shapes.clone(),
                    output_shapes: info.output_shapes.clone(),
                })
                .collect()
        } else {
            Vec::new()
        };
        let phase = |p: Phase| self.phase_sum[p as usize] / n;
        let trace = if self.verbosity >= 2 && !self.last_marks.is_empty() {
            self.nodes
                .iter()
                .map(|info| {
                    let start = self.last_marks[op_start(info.op_id)] - self.last_marks[ITER_START];
                    let end = self.last_marks[op_end(info.op_id)] - self.last_marks[ITER_START];
                    (start, end - start)
                })
                .collect()
        } else {
            Vec::new()
        };
        Profile {
            verbosity: self.verbosity,
            skipped: self.seen.min(self.skip),
            timed_iterations: self.timed,
            device: self.device.clone(),
            method: self
                .timer
                .as_ref()
                .map(|t| t.method())
                .unwrap_or("none")
                .to_string(),
            forward_sec: phase(Phase::Forward),
            backward_sec: phase(Phase::Backward),
            optimizer_sec: phase(Phase::Optimizer),
            iteration_sec: self.iter_sum / n,
            iteration_median_sec: median(&self.iter_times),
            iteration_min_sec: self
                .iter_times
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min),
            iteration_max_sec: self.iter_times.iter().copied().fold(0.0, f64::max),
            ops,
            last_iteration_trace: trace,
        }
    }

    /// Prints the report (SINGA's lines, then wick's) to standard output.
    pub fn print(&self) {
        print!("{}", self.profile());
    }
}

impl Hook for TimeProfiler {
    fn on_attach(&mut self, nodes: &[NodeInfo], device: &Device) -> Result<()> {
        self.nodes = nodes.to_vec();
        self.device = format!("{:?}", device.location());
        self.phases_present = [false; 3];
        for n in nodes {
            self.phases_present[n.phase as usize] = true;
        }
        if self.timer.is_none() {
            self.timer = Some(default_timer(device)?);
        }
        self.op_sum = vec![0.0; nodes.len()];
        self.op_min = vec![f64::INFINITY; nodes.len()];
        self.op_max = vec![0.0; nodes.len()];
        self.marks = vec![0.0; op_start(nodes.len())];
        self.prepared = false;
        self.reset();
        Ok(())
    }

    fn on_iteration_start(&mut self, _iteration: usize) {
        self.timing = self.verbosity > 0 && self.seen >= self.skip;
        if self.timing {
            if !self.prepared {
                let slots = self.marks.len();
                if let Some(t) = self.timer.as_mut() {
                    // A timer that cannot prepare leaves this iteration untimed.
                    self.timing = t.prepare(slots).is_ok();
                }
                self.prepared = self.timing;
            }
            if self.timing {
                self.mark(ITER_START);
            }
        }
    }

    fn on_phase_start(&mut self, phase: Phase) {
        if self.timing {
            self.mark(phase_start(phase));
        }
    }

    fn on_phase_end(&mut self, phase: Phase) {
        if self.timing {
            self.mark(phase_end(phase));
        }
    }

    fn before_op(&mut self, node: &NodeInfo) {
        if self.timing && self.verbosity >= 2 {
            self.mark(op_start(node.op_id));
        }
    }

    fn after_op(&mut self, node: &NodeInfo) {
        if self.timing && self.verbosity >= 2 {
            self.mark(op_end(node.op_id));
        }
    }

    fn on_iteration_end(&mut self, _iteration: usize) -> Result<()> {
        self.seen += 1;
        if !self.timing {
            return Ok(());
        }
        self.mark(ITER_END);
        let Some(timer) = self.timer.as_mut() else {
            return Ok(());
        };
        timer.read(&mut self.marks)?;
        let m = &self.marks;
        self.iter_sum += m[ITER_END] - m[ITER_START];
        self.iter_times.push(m[ITER_END] - m[ITER_START]);
        for p in Phase::ALL {
            if self.phases_present[p as usize] {
                self.phase_sum[p as usize] += m[phase_end(p)] - m[phase_start(p)];
            }
        }
        if self.verbosity >= 2 {
            for i in 0..self.nodes.len() {
                let d = m[op_end(i)] - m[op_start(i)];
                self.op_sum[i] += d;
                self.op_min[i] = self.op_min[i].min(d);
                self.op_max[i] = self.op_max[i].max(d);
            }
            self.last_marks.clone_from(&self.marks);
        }
        self.timed += 1;
        Ok(())
    }
}

/// The timer for `device`: the host clock on the CPU, CUDA events on a CUDA device.
fn default_timer(device: &Device) -> Result<Box<dyn Timer>> {
    match device {
        Device::Cpu => Ok(Box::new(HostTimer::default())),
        #[cfg(feature = "cuda")]
        Device::Cuda(dev) => Ok(Box::new(crate::timer::EventTimer::new(crate::timer::CudaEvents::new(dev)))),
        other => Err(GraphError::Usage(format!(
            "the time profiler has no timer for {:?}; build wick with the `cuda` feature for CUDA devices",
            other.location()
        ))),
    }
}

/// The timing of one node, averaged over the timed iterations.
#[derive(Debug, Clone, Serialize)]
pub struct OpProfile {
    /// The node's OP_ID.
    pub op_id: usize,
    /// The kernel's name.
    pub name: String,
    /// The node's phase.
    pub phase: Phase,
    /// Mean seconds per iteration.
    pub mean_sec: f64,
    /// Fastest single execution, seconds.
    pub min_sec: f64,
    /// Slowest single execution, seconds.
    pub max_sec: f64,
    /// FLOPs of one execution.
    pub flops: u64,
    /// Input shapes.
    pub input_shapes: Vec<Vec<usize>>,
    /// Output shapes.
    pub output_shapes: Vec<Vec<usize>>,
}

/// One row of the per-op-type table: every node with the same kernel name.
#[derive(Debug, Clone, Serialize)]
pub struct OpTypeRow {
    /// The kernel name.
    pub name: String,
    /// Nodes of this type run per iteration.
    pub calls: usize,
    /// Seconds per iteration spent in this type.
    pub total_sec: f64,
    /// Fastest single call, seconds.
    pub min_sec: f64,
    /// Slowest single call, seconds.
    pub max_sec: f64,
    /// Mean seconds per call.
    pub avg_sec: f64,
    /// Share of all op time.
    pub ratio: f64,
    /// FLOPs per iteration.
    pub flops: u64,
}

/// The median of `values` (the mean of the middle two for an even count; 0 when empty).
fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// Everything the profiler measured, as numbers.
#[derive(Debug, Clone, Serialize)]
pub struct Profile {
    /// The verbosity the figures were taken at.
    pub verbosity: u8,
    /// Iterations run untimed at the start.
    pub skipped: usize,
    /// Iterations every figure is averaged over.
    pub timed_iterations: usize,
    /// The device.
    pub device: String,
    /// The timing method (host clock or CUDA events).
    pub method: String,
    /// Mean seconds of the forward phase (its first op's start to its last op's end).
    pub forward_sec: f64,
    /// Mean seconds of the backward phase.
    pub backward_sec: f64,
    /// Mean seconds of the optimizer phase.
    pub optimizer_sec: f64,
    /// Mean seconds of a whole iteration.
    pub iteration_sec: f64,
    /// Median seconds of a whole iteration (0 before any timed iteration).
    pub iteration_median_sec: f64,
    /// Fastest timed iteration, in seconds (infinite before any).
    pub iteration_min_sec: f64,
    /// Slowest timed iteration, in seconds.
    pub iteration_max_sec: f64,
    /// Per-node timings in OP_ID order (verbosity 2).
    pub ops: Vec<OpProfile>,
    /// (start, duration) in seconds of each node in the last timed iteration (verbosity 2).
    pub last_iteration_trace: Vec<(f64, f64)>,
}

impl Profile {
    /// Seconds per iteration inside ops (verbosity 2).
    pub fn ops_sec(&self) -> f64 {
        self.ops.iter().map(|o| o.mean_sec).sum()
    }

    /// The per-op-type table, sorted by total time, longest first.
    pub fn by_type(&self) -> Vec<OpTypeRow> {
        let mut rows: Vec<OpTypeRow> = Vec::new();
        for op in &self.ops {
            let row = match rows.iter_mut().find(|r| r.name == op.name) {
                Some(r) => r,
                None => {
                    rows.push(OpTypeRow {
                        name: op.name.clone(),
                        calls: 0,
                        total_sec: 0.0,
                        min_sec: f64::INFINITY,
                        max_sec: 0.0,
                        avg_sec: 0.0,
                        ratio: 0.0,
                        flops: 0,
                    });
                    rows.last_mut().expect("just pushed")
                }
            };
            row.calls += 1;
            row.total_sec += op.mean_sec;
            row.min_sec = row.min_sec.min(op.min_sec);
            row.max_sec = row.max_sec.max(op.max_sec);
            row.flops += op.flops;
        }
        let all = self.ops_sec();
        for r in &mut rows {
            r.avg_sec = r.total_sec / r.calls as f64;
            r.ratio = if all > 0.0 { r.total_sec / all } else { 0.0 };
        }
        rows.sort_by(|a, b| b.total_sec.total_cmp(&a.total_sec));
        rows
    }

    /// SINGA's lines: `Time Profiling:`, then per-op lines (verbosity 2) or the forward and
    /// backward lines (verbosity 1), each time in seconds in C++ float formatting.
    pub fn singa_lines(&self) -> String {
        let mut s = String::from("Time Profiling:\n");
        if self.verbosity >= 2 {
            for op in &self.ops {
                let _ = writeln!(
                    s,
                    "OP_ID{}. {} : {} sec",
                    op.op_id,
                    op.name,
                    cpp_float(op.mean_sec)
                );
            }
        } else if self.verbosity == 1 {
            s.push_str(&self.phase_lines());
        }
        s
    }

    fn phase_lines(&self) -> String {
        format!(
            "Forward Propagation Time : {} sec\nBackward Propagation Time : {} sec\nOptimizer Time : {} sec\n",
            cpp_float(self.forward_sec),
            cpp_float(self.backward_sec),
            cpp_float(self.optimizer_sec)
        )
    }

    /// The per-op-type table as text (times in ms per timed iteration).
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<30} {:>6} {:>11} {:>10} {:>10} {:>10} {:>7} {:>9}",
            "Event", "Calls", "Total(ms)", "Min(ms)", "Max(ms)", "Ave(ms)", "Ratio", "GFLOP/s"
        );
        for r in self.by_type() {
            let gflops = if r.total_sec > 0.0 {
                r.flops as f64 / r.total_sec / 1e9
            } else {
                0.0
            };
            let _ = writeln!(
                s,
                "{:<30} {:>6} {:>11.3} {:>10.3} {:>10.3} {:>10.3} {:>7.4} {:>9.1}",
                r.name,
                r.calls,
                r.total_sec * 1e3,
                r.min_sec * 1e3,
                r.max_sec * 1e3,
                r.avg_sec * 1e3,
                r.ratio,
                gflops
            );
        }
        s
    }

    /// The whole profile as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// The last timed iteration as a Chrome trace (`{"traceEvents": [...]}`), which
    /// Perfetto and chrome://tracing open: one complete event per op on the phase's
    /// thread. Empty below verbosity 2.
    pub fn chrome_trace(&self) -> String {
        let mut events = vec![serde_json::json!({
            "ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": format!("wick ({})", self.device)}
        })];
        for p in Phase::ALL {
            events.push(serde_json::json!({
                "ph": "M", "name": "thread_name", "pid": 0, "tid": p as usize, "args": {"name": p.as_str()}
            }));
        }
        for (op, (start, dur)) in self.ops.iter().zip(&self.last_iteration_trace) {
            events.push(serde_json::json!({
                "ph": "X", "name": op.name, "cat": op.phase.as_str(), "pid": 0, "tid": op.phase as usize,
                "ts": start * 1e6, "dur": dur * 1e6,
                "args": {"op_id": op.op_id, "inputs": op.input_shapes, "outputs": op.output_shapes, "flops": op.flops}
            }));
        }
        serde_json::json!({"traceEvents": events, "displayTimeUnit": "ms"}).to_string()
    }
}

impl std::fmt::Display for Profile {
    /// SINGA's lines, then (beyond SINGA) the phase lines at verbosity 2, the step-time
    /// breakdown, and the per-op-type table.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.verbosity == 0 {
            return writeln!(f, "Time Profiling: off (verbosity 0)");
        }
        f.write_str(&self.singa_lines())?;
        if self.verbosity >= 2 {
            writeln!(f)?;
            f.write_str(&self.phase_lines())?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "Iteration Time : {} sec (mean of {} timed iterations after {} skipped; {}; {})",
            cpp_float(self.iteration_sec),
            self.timed_iterations,
            self.skipped,
            self.device,
            self.method
        )?;
        if self.timed_iterations > 0 {
            writeln!(
                f,
                "Iteration spread : median {} sec, min {} sec, max {} sec",
                cpp_float(self.iteration_median_sec),
                cpp_float(self.iteration_min_sec),
                cpp_float(self.iteration_max_sec)
            )?;
        }
        if self.iteration_sec > 0.0 {
            let share = |t: f64| 100.0 * t / self.iteration_sec;
            let phases = self.forward_sec + self.backward_sec + self.optimizer_sec;
            writeln!(
                f,
                "Step breakdown : forward {:.1}%, backward {:.1}%, optimizer {:.1}%, between phases {:.1}%",
                share(self.forward_sec),
                share(self.backward_sec),
                share(self.optimizer_sec),
                share(self.iteration_sec - phases)
            )?;
        }
        if self.verbosity >= 2 && self.iteration_sec > 0.0 {
            let ops = self.ops_sec();
            writeln!(
                f,
                "Ops Time : {} sec; framework overhead (iteration time outside any op) {} sec, {:.2}%",
                cpp_float(ops),
                cpp_float(self.iteration_sec - ops),
                100.0 * (self.iteration_sec - ops) / self.iteration_sec
            )?;
            writeln!(f)?;
            writeln!(
                f,
                "Per-op-type summary (Total per timed iteration; Min/Max/Ave per call):"
            )?;
            f.write_str(&self.table())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_even_and_empty_sets() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
        assert_eq!(median(&[]), 0.0);
    }
}
