//! The measuring half of the profiler: [`TimeProfiler`], the hook that marks iterations,
//! phases and ops on a [`Timer`] and accumulates the figures a [`Profile`] reports.

use candle_core::Device;

use crate::profile::data::{OpProfile, PhaseProfile, Profile};
use crate::profile::machine_peaks::MachinePeaks;
use crate::profile::samples::{graph_hash, IterationTimeline, RunInfo, Samples, Timeline, SCHEMA};
use crate::profile::schedule::{RecordLevel, Schedule};
use crate::profile::stats::median;
use crate::record::input_pipeline::InputRecorder;
use crate::record::machine_peaks::PeakProbes;
use crate::record::memory_probe::{MemoryCounter, MemoryRecorder};
use crate::record::slots::{Mark, SlotLayout};
use crate::record::step_parts::{instant_clock, StepRecorder, WallClock};
use crate::record::thread_times::ContentionProbe;
use crate::record::timer::{default_timer, Timer};
use wick_graph::error::{GraphError, Result};
use wick_graph::hooks::{Hook, LoaderWork, NodeInfo, StepPart};
use wick_graph::ir::Phase;
use wick_graph::MemoryPlan;

/// Running sums of one node's timings, over the iterations that timed it.
#[derive(Debug, Clone, Copy)]
struct OpStats {
    count: usize,
    sum: f64,
    min: f64,
    max: f64,
}

impl Default for OpStats {
    fn default() -> Self {
        OpStats {
            count: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: 0.0,
        }
    }
}

/// SINGA-style time profiler. Attach it to an [`Executor`](wick_graph::Executor), run, then
/// [`print`](TimeProfiler::print) it or take its [`profile`](TimeProfiler::profile).
pub struct TimeProfiler {
    level: RecordLevel,
    /// The SINGA verbosity the report prints at (3: only the communication ops' lines).
    report_verbosity: u8,
    schedule: Schedule,
    timer: Option<Box<dyn Timer>>,
    nodes: Vec<NodeInfo>,
    device: String,
    phases_present: [bool; 3],
    layout: SlotLayout,
    marks: Vec<f64>,
    prepared: bool,
    timing: bool,
    seen: usize,
    timed: usize,
    iter_times: Vec<f64>,
    phase_sum: [f64; 3],
    phase_ops_sum: [f64; 3],
    ops: Vec<OpStats>,
    samples: Samples,
    timeline: Timeline,
    /// Whether the last timeline entry still waits for its read-back.
    timeline_open: bool,
    run: RunInfo,
    graph_hash: String,
    wall: WallClock,
    run_started: f64,
    steps: StepRecorder,
    input: InputRecorder,
    /// The memory plan and what the counting allocator and the device measured.
    memory: MemoryRecorder,
    /// On a device: each node's host dispatch seconds, summed over timed iterations.
    host_ops: Option<Vec<f64>>,
    host_started: Option<std::time::Instant>,
    /// The threads' run-queue wait over the timed iterations.
    contention: ContentionProbe,
    /// The machine's peaks, measured beside the timed iterations (`with_peak_probes`).
    peak_probes: PeakProbes,
    /// The executor's device, for the peak probes.
    attached_device: Option<Device>,
}

impl std::fmt::Debug for TimeProfiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimeProfiler")
            .field("level", &self.level)
            .field("schedule", &self.schedule)
            .field("seen", &self.seen)
            .field("timed", &self.timed)
            .finish()
    }
}

impl TimeProfiler {
    /// SINGA's two settings: a profiler at `verbosity` (0 off, 1 phases, 2 every op, 3 as
    /// 2 but the report prints SINGA's per-op lines only for the communication ops; higher
    /// values are clamped to 3) that leaves the first `skip` iterations untimed (SINGA's
    /// default is 5). It picks the timer that fits the executor's device when attached.
    pub fn new(verbosity: u8, skip: usize) -> Self {
        let mut p =
            Self::with_schedule(Schedule::skip(skip), RecordLevel::from_verbosity(verbosity));
        p.report_verbosity = verbosity.min(3);
        p
    }

    /// A profiler that records at `level` in the iterations `schedule` times.
    pub fn with_schedule(schedule: Schedule, level: RecordLevel) -> Self {
        TimeProfiler {
            level,
            report_verbosity: level.verbosity(),
            schedule,
            timer: None,
            nodes: Vec::new(),
            device: String::new(),
            phases_present: [false; 3],
            layout: SlotLayout::new(0),
            marks: Vec::new(),
            prepared: false,
            timing: false,
            seen: 0,
            timed: 0,
            iter_times: Vec::new(),
            phase_sum: [0.0; 3],
            phase_ops_sum: [0.0; 3],
            ops: Vec::new(),
            samples: Samples::default(),
            timeline: Timeline::new(),
            timeline_open: false,
            run: RunInfo::default(),
            graph_hash: String::new(),
            wall: instant_clock(),
            run_started: 0.0,
            steps: StepRecorder::default(),
            input: InputRecorder::new(std::time::Instant::now()),
            memory: MemoryRecorder::default(),
            host_ops: None,
            host_started: None,
            contention: ContentionProbe::default(),
            peak_probes: PeakProbes::default(),
            attached_device: None,
        }
    }

    /// The same profiler measuring the machine's peaks (the roofline's roofs, about a
    /// second) when it is attached, before any timed iteration, and at the end of each
    /// schedule cycle that another follows after untimed iterations (a bounded `repeat`
    /// of 2 or more, with `wait` or `warmup`: no timed iteration waits on the probe).
    /// [`profile_with_peaks`](Self::profile_with_peaks) measures them again and keeps the
    /// range of every probe, so a machine that changed during the run is seen
    /// ([`Profile::roofline_unreliable`]).
    pub fn with_peak_probes(mut self) -> Self {
        self.peak_probes.enabled = true;
        self
    }

    /// The peak probes taken so far (`with_peak_probes`), not counting the one
    /// [`profile_with_peaks`](Self::profile_with_peaks) takes.
    pub fn peak_probes_taken(&self) -> usize {
        self.peak_probes.count()
    }

    /// [`profile`](Self::profile) with the machine's peaks for its roofline: measured now
    /// on the executor's device, their range joined with the probe taken when attached
    /// ([`with_peak_probes`](Self::with_peak_probes)).
    pub fn profile_with_peaks(&self) -> Result<Profile> {
        let device = self.attached_device.as_ref().ok_or_else(|| {
            GraphError::Usage("profile_with_peaks: the profiler is not attached".into())
        })?;
        let mut p = self.profile();
        p.machine = Some(self.peak_probes.with(MachinePeaks::measure(device)?));
        Ok(p)
    }

    /// The same profiler measuring the process's allocation peak over the timed
    /// iterations with `counter` (the examples pass `wick::allocator::Counter`).
    pub fn with_memory_counter(mut self, counter: Box<dyn MemoryCounter>) -> Self {
        self.memory.counter = Some(counter);
        self
    }

    /// The same profiler recording `run` (model, sizes, device, command line) in its
    /// profiles.
    pub fn with_run_info(mut self, run: RunInfo) -> Self {
        self.run = run;
        self
    }

    /// The same profiler with an injected host clock for the whole-step figures (a
    /// scripted clock in tests).
    pub fn with_wall_clock(mut self, clock: WallClock) -> Self {
        self.wall = clock;
        self
    }

    /// The same profiler with an injected timer (a fake clock in tests, say).
    pub fn with_timer(mut self, timer: Box<dyn Timer>) -> Self {
        self.timer = Some(timer);
        self
    }

    /// The SINGA verbosity its report prints at ([`Profile::verbosity`]); 3 keeps only the
    /// communication ops' per-op lines. Recording is unchanged.
    pub fn reporting_at(mut self, verbosity: u8) -> Self {
        self.report_verbosity = verbosity.min(3);
        self
    }

    /// What the profiler records.
    pub fn level(&self) -> RecordLevel {
        self.level
    }

    /// Changes what the iterations that follow record. Figures taken so far stay; each
    /// op's mean is over the iterations that timed it.
    pub fn set_level(&mut self, level: RecordLevel) {
        self.level = level;
        self.report_verbosity = level.verbosity();
    }

    /// The schedule.
    pub fn schedule(&self) -> Schedule {
        self.schedule
    }

    /// How many iterations have been timed so far.
    pub fn timed_iterations(&self) -> usize {
        self.timed
    }

    /// Forgets every measurement; the schedule starts over (the next `skip` iterations
    /// are skipped again).
    pub fn reset(&mut self) {
        self.seen = 0;
        self.timed = 0;
        self.iter_times.clear();
        self.phase_sum = [0.0; 3];
        self.phase_ops_sum = [0.0; 3];
        self.ops.iter_mut().for_each(|s| *s = OpStats::default());
        self.samples = Samples::default();
        self.timeline.clear();
        self.steps = StepRecorder::default();
        self.input.reset();
        self.memory.reset();
        self.contention = ContentionProbe::default();
        if let Some(h) = self.host_ops.as_mut() {
            h.iter_mut().for_each(|s| *s = 0.0);
        }
    }

    fn mark(&mut self, mark: Mark) {
        let slot = self.layout.slot(mark);
        if let Some(t) = self.timer.as_mut() {
            t.mark(slot);
        }
    }

    /// Adds a timed iteration's `marks` to the sums: the iteration, each phase, each op,
    /// and (recording per op) the iteration's timeline and samples.
    fn accumulate(&mut self, m: &[f64]) {
        let layout = self.layout;
        let span = |a: Mark, b: Mark| m[layout.slot(b)] - m[layout.slot(a)];
        let length = span(Mark::IterationStart, Mark::IterationEnd);
        self.iter_times.push(length);
        self.samples.iterations.push(length);
        let mut phase_secs = [0.0; 3];
        for p in Phase::ALL {
            if self.phases_present[p as usize] {
                phase_secs[p as usize] = span(Mark::PhaseStart(p), Mark::PhaseEnd(p));
                self.phase_sum[p as usize] += phase_secs[p as usize];
            }
        }
        self.samples.phases.push(phase_secs);
        let per_op = self.level == RecordLevel::PerOp;
        let mut op_secs = Vec::with_capacity(if per_op { self.nodes.len() } else { 0 });
        for (info, stats) in self.nodes.iter().zip(&mut self.ops) {
            let d = span(Mark::OpStart(info.op_id), Mark::OpEnd(info.op_id));
            self.phase_ops_sum[info.phase as usize] += d;
            if per_op {
                stats.count += 1;
                stats.sum += d;
                stats.min = stats.min.min(d);
                stats.max = stats.max.max(d);
                op_secs.push(d);
            }
        }
        if per_op {
            self.push_timeline(m, length, &op_secs);
            self.samples.ops.push(op_secs);
            self.timeline_open = true;
        }
    }

    /// The timed iteration's timeline from its `marks`: each phase's and op's start and
    /// length, and the step's parts around it.
    fn push_timeline(&mut self, m: &[f64], length: f64, op_secs: &[f64]) {
        let layout = self.layout;
        let at = |mark: Mark| m[layout.slot(mark)] - m[layout.slot(Mark::IterationStart)];
        let span = |a: Mark, b: Mark| m[layout.slot(b)] - m[layout.slot(a)];
        let phases = Phase::ALL
            .into_iter()
            .filter(|p| self.phases_present[*p as usize])
            .map(|p| {
                let (start, end) = (Mark::PhaseStart(p), Mark::PhaseEnd(p));
                (p, at(start), span(start, end))
            })
            .collect();
        let ops = self
            .nodes
            .iter()
            .zip(op_secs)
            .map(|(info, d)| (at(Mark::OpStart(info.op_id)), *d))
            .collect();
        let (input_wait, copy, read_back) = self.steps.last_parts();
        self.timeline.push(IterationTimeline {
            memory: self.memory.iteration_ops(self.nodes.len()),
            start: self.run_started,
            input_wait,
            copy,
            read_back,
            length,
            phases,
            ops,
        });
    }

    /// The results so far.
    pub fn profile(&self) -> Profile {
        let n = self.timed.max(1) as f64;
        let timed = self.timed > 0;
        let spread = |f: fn(f64, f64) -> f64, init: f64| {
            if timed {
                self.iter_times.iter().copied().fold(init, f)
            } else {
                0.0
            }
        };
        Profile {
            verbosity: self.report_verbosity,
            schedule: self.schedule,
            skipped: timed.then_some(self.seen - self.timed),
            timed_iterations: self.timed,
            device: self.device.clone(),
            method: self
                .timer
                .as_ref()
                .filter(|_| timed)
                .map(|t| t.method().to_string()),
            forward_sec: self.phase_sum[Phase::Forward as usize] / n,
            backward_sec: self.phase_sum[Phase::Backward as usize] / n,
            optimizer_sec: self.phase_sum[Phase::Optimizer as usize] / n,
            phases: self.phase_profiles(),
            iteration_sec: self.iter_times.iter().sum::<f64>() / n,
            iteration_median_sec: median(&self.iter_times),
            iteration_min_sec: spread(f64::min, f64::INFINITY),
            iteration_max_sec: spread(f64::max, 0.0),
            ops: self.op_profiles(),
            schema: SCHEMA.to_string(),
            run: self.run.clone(),
            graph_hash: self.graph_hash.clone(),
            samples: self.samples.clone(),
            timeline: self.timeline_so_far(),
            step: self.steps.profile(),
            input_pipeline: self.input.profile(),
            loader_spans: self.input.spans(),
            memory: (self.timed > 0)
                .then(|| self.memory.profile(&self.nodes))
                .flatten(),
            machine: None,
            cpu_contention: self.contention.total().filter(|_| timed),
            distributed: None,
        }
    }

    /// Each node's figures (per-op recording, once an op was timed); empty otherwise.
    fn op_profiles(&self) -> Vec<OpProfile> {
        let per_op = self.level == RecordLevel::PerOp && self.ops.iter().any(|s| s.count > 0);
        if !per_op {
            return Vec::new();
        }
        let cpu = self.attached_device.as_ref().is_none_or(Device::is_cpu);
        self.nodes
            .iter()
            .zip(&self.ops)
            .map(|(info, s)| OpProfile {
                op_id: info.op_id,
                name: info.name.to_string(),
                class: info.kernel.class(),
                variant: info.variant,
                phase: info.phase,
                mean_sec: s.sum / s.count.max(1) as f64,
                min_sec: if s.count > 0 { s.min } else { 0.0 },
                max_sec: s.max,
                flops: info.flops,
                input_shapes: info.input_shapes.clone(),
                output_shapes: info.output_shapes.clone(),
                origin: info.origin.clone(),
                parameter_elements: updated_elements(info),
                updated_parameters: Some(info.param_slots.len()),
                bytes: info.bytes,
                dtype: format!("{:?}", info.dtype),
                generic_ops: info.kernel.cpu_generic_ops().filter(|_| cpu),
                memory: self.memory.last_op(info.op_id),
                host_sec: self
                    .host_ops
                    .as_ref()
                    .map(|h| h[info.op_id] / s.count.max(1) as f64),
            })
            .collect()
    }

    /// Each phase the graph has, mean seconds and op seconds per timed iteration.
    fn phase_profiles(&self) -> Vec<PhaseProfile> {
        let n = self.timed.max(1) as f64;
        Phase::ALL
            .iter()
            .filter(|p| self.phases_present[**p as usize])
            .map(|&phase| PhaseProfile {
                phase,
                sec: self.phase_sum[phase as usize] / n,
                ops_sec: self.phase_ops_sum[phase as usize] / n,
            })
            .collect()
    }

    /// The timed iterations' timelines; the last one's read-back arrives after it ended.
    fn timeline_so_far(&self) -> Timeline {
        let mut t = self.timeline.clone();
        if let (Some(last), true) = (t.last_mut(), self.timeline_open) {
            last.read_back = self.steps.pending_read_back();
        }
        t
    }

    /// Prints the report (SINGA's lines, then wick's) to standard output.
    pub fn print(&self) {
        print!("{}", self.profile());
    }
}

impl Hook for TimeProfiler {
    fn on_attach(&mut self, nodes: &[NodeInfo], device: &Device) -> Result<()> {
        self.nodes = nodes.to_vec();
        self.graph_hash = graph_hash(nodes);
        self.device = format!("{:?}", device.location());
        self.phases_present = [false; 3];
        for n in nodes {
            self.phases_present[n.phase as usize] = true;
        }
        if self.timer.is_none() {
            self.timer = Some(default_timer(device)?);
        }
        // On a device the timer measures device time; the host clock measures dispatch.
        self.host_ops = (!device.is_cpu()).then(|| vec![0.0; nodes.len()]);
        self.memory.device = (!device.is_cpu()).then(|| device.clone());
        self.layout = SlotLayout::new(nodes.len());
        self.ops = vec![OpStats::default(); nodes.len()];
        self.marks = vec![0.0; self.layout.len()];
        self.prepared = false;
        self.reset();
        self.attached_device = Some(device.clone());
        self.peak_probes.probe(device)
    }

    fn on_iteration_start(&mut self, _iteration: usize) {
        self.timing = self.level > RecordLevel::Off && self.schedule.is_timed(self.seen);
        if self.timing && !self.prepared {
            let slots = self.layout.len();
            if let Some(t) = self.timer.as_mut() {
                // A timer that cannot prepare leaves this iteration untimed.
                self.timing = t.prepare(slots).is_ok();
            }
            self.prepared = self.timing;
        }
        if self.timing {
            // Before the memory counter starts: reading the counters allocates.
            self.contention.iteration_start();
            self.memory.iteration_start();
            self.mark(Mark::IterationStart);
        }
        if self.timeline_open {
            if let Some(last) = self.timeline.last_mut() {
                last.read_back = self.steps.pending_read_back();
            }
            self.timeline_open = false;
        }
        let now = (self.wall)();
        self.steps.iteration_start(now, self.timing);
        self.run_started = now;
    }

    fn on_memory_plan(&mut self, plan: &MemoryPlan) {
        self.memory.plan = Some(plan.clone());
    }

    fn on_step_part(&mut self, part: StepPart, sec: f64) {
        self.steps.part(part, sec);
    }

    /// Counted when the iteration about to start is timed.
    fn on_loader_work(&mut self, work: &LoaderWork) {
        if self.schedule.is_timed(self.seen) {
            self.input.record(work);
        }
    }

    fn on_phase_start(&mut self, phase: Phase) {
        if self.timing {
            self.mark(Mark::PhaseStart(phase));
        }
    }

    fn on_phase_end(&mut self, phase: Phase) {
        if self.timing {
            self.mark(Mark::PhaseEnd(phase));
        }
    }

    fn before_op(&mut self, node: &NodeInfo) {
        if self.timing {
            // Read before the op's mark, so that the reading is not in its time.
            if self.level == RecordLevel::PerOp {
                self.memory.before_op();
            }
            self.mark(Mark::OpStart(node.op_id));
            if self.host_ops.is_some() && self.level == RecordLevel::PerOp {
                self.host_started = Some(std::time::Instant::now());
            }
        }
    }

    fn after_op(&mut self, node: &NodeInfo) {
        if self.timing {
            if let (Some(h), Some(t)) = (self.host_ops.as_mut(), self.host_started.take()) {
                h[node.op_id] += t.elapsed().as_secs_f64();
            }
            self.mark(Mark::OpEnd(node.op_id));
            self.memory.after_op();
        }
    }

    fn on_iteration_end(&mut self, _iteration: usize) -> Result<()> {
        let now = (self.wall)();
        self.steps.iteration_end(now - self.run_started);
        self.seen += 1;
        if !self.timing {
            return Ok(());
        }
        self.mark(Mark::IterationEnd);
        self.contention.iteration_end();
        self.memory.iteration_end(self.nodes.len());
        let Some(timer) = self.timer.as_mut() else {
            return Ok(());
        };
        timer.read(&mut self.marks)?;
        // The marks are read while the sums they feed are written.
        let marks = std::mem::take(&mut self.marks);
        self.accumulate(&marks);
        self.marks = marks;
        self.timed += 1;
        match &self.attached_device {
            Some(device) if self.schedule.ends_cycle_before_untimed(self.seen) => {
                self.peak_probes.probe(device)
            }
            _ => Ok(()),
        }
    }
}

/// Elements of the parameters an optimizer node updates: every parameter its inputs
/// name ([`NodeInfo::param_slots`]), or, for a custom update op recorded for a parameter
/// that does not describe its inputs, its first input's. 0 for other nodes.
fn updated_elements(info: &NodeInfo) -> u64 {
    let shapes = &info.input_shapes;
    let elements = |s: &Vec<usize>| wick_ops::shape::flop_count(1, s);
    if !info.param_slots.is_empty() {
        return info
            .param_slots
            .iter()
            .map(|slot| elements(&shapes[slot.param]))
            .sum();
    }
    match (&info.origin.parameter, shapes.first()) {
        (Some(_), Some(shape)) => elements(shape),
        _ => 0,
    }
}
