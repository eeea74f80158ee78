//! `wick-prof import-torch`: a PyTorch profiler trace (the Chrome trace JSON of
//! `prof.export_chrome_trace`) read as a wick [`Profile`], so that `wick-prof diff`
//! compares a PyTorch run with a wick run of the same model per phase, op type and layer.
//!
//! What the trace must hold, as `scripts/torch_trace.py` records it:
//! - each step inside the profiler's `ProfilerStep#N` range (a schedule and `prof.step()`);
//! - each module's forward inside a `record_function` scope `wick.module.<state-dict
//!   prefix>`, for the layer names; a backward op finds its module through the forward op
//!   with the same sequence number;
//! - optionally the phases inside `wick.phase.forward`, `wick.phase.backward` and
//!   `wick.phase.optimizer` scopes. Without them an autograd function is backward, an
//!   `Optimizer.step#` range the optimizer, and every other op forward.
//!
//! An op of the profile is a top-level CPU op (one no other op encloses), named in wick's
//! vocabulary by [`torch_names`](crate::compare::torch_names); an optimizer step is one op.
//! Times are as wick takes them: an op's duration, a phase from its first op's start to
//! its last op's end, an iteration from the step's first op to its last.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;
use wick_graph::ir::{Origin, Phase};

use crate::compare::torch_names::{backward_op, forward_op, optimizer_op, TorchOp};
use crate::profile::data::{OpProfile, PhaseProfile, Profile};
use crate::profile::samples::{RunInfo, Samples, SCHEMA};
use crate::profile::schedule::Schedule;

/// The timing method an imported profile states; [`Profile::is_from_torch`] reads it.
pub const TORCH_METHOD: &str = "PyTorch profiler (imported by wick-prof import-torch)";

/// The prefix of the scopes that name a module's forward.
pub const MODULE_SCOPE: &str = "wick.module.";
/// The prefix of the scopes that mark a phase.
pub const PHASE_SCOPE: &str = "wick.phase.";

/// Why a trace could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// Not JSON, or not a Chrome trace.
    #[error("not a PyTorch profiler trace (Chrome trace JSON with traceEvents): {0}")]
    NotATrace(String),
    /// No step ranges.
    #[error("the trace has no ProfilerStep#N ranges: record it under torch.profiler.profile(schedule=...) and call prof.step() after each step, as scripts/torch_trace.py does")]
    NoSteps,
    /// A trace with GPU kernels: its CPU ops' durations are launch times.
    #[error("the trace holds {0} GPU kernel events: import-torch reads CPU traces (ProfilerActivity.CPU alone), where an op's duration is its work; on a GPU it would be the launch, not the kernel")]
    DeviceTrace(usize),
    /// A step without an op in it.
    #[error("{0} holds no CPU op: record the trace with activities=[ProfilerActivity.CPU]")]
    EmptyStep(String),
    /// Steps that ran different ops.
    #[error("{other} ran other ops than {first}: at op {position}, {first} ran {a:?} and {other} ran {b:?}; time steps of one graph (leave the first steps untimed with the schedule's warmup)")]
    StepsDiffer {
        /// The first step's name.
        first: String,
        /// The step that differs.
        other: String,
        /// The first op that differs (0-based).
        position: usize,
        /// The first step's op there.
        a: String,
        /// The other step's op there (`end` when it ran fewer).
        b: String,
    },
}

/// The run as `scripts/torch_trace.py` describes it beside the events.
#[derive(Debug, Default, Deserialize)]
struct TraceRun {
    #[serde(default)]
    model: String,
    #[serde(default)]
    batch: usize,
    #[serde(default)]
    image_size: String,
    #[serde(default)]
    threads: usize,
    #[serde(default)]
    torch_version: String,
    #[serde(default)]
    cpu_model: String,
}

#[derive(Deserialize)]
struct TraceFile {
    #[serde(rename = "traceEvents")]
    events: Vec<Value>,
    #[serde(default)]
    wick_run: Option<TraceRun>,
}

/// What a range is.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Step,
    Phase(Phase),
    Module(String),
    OptimizerStep,
    /// A range whose ops are not part of the step wick times (`Optimizer.zero_grad#`).
    Outside,
    Op,
    Other,
}

/// One complete ("X") event, in microseconds.
#[derive(Debug, Clone)]
struct Span {
    thread: String,
    start: f64,
    end: f64,
    name: String,
    kind: Kind,
    sequence: Option<i64>,
    shapes: Vec<Vec<usize>>,
    scalars: Vec<String>,
}

fn span(event: &Value) -> Option<Span> {
    if event.get("ph")?.as_str()? != "X" {
        return None;
    }
    let name = event.get("name")?.as_str()?.to_string();
    let category = event.get("cat").and_then(Value::as_str).unwrap_or("");
    let kind = match category {
        "cpu_op" => Kind::Op,
        "user_annotation" if name.starts_with("ProfilerStep#") => Kind::Step,
        "user_annotation" if name.starts_with("Optimizer.step#") => Kind::OptimizerStep,
        "user_annotation" if name.starts_with("Optimizer.zero_grad#") => Kind::Outside,
        "user_annotation" => match (
            name.strip_prefix(MODULE_SCOPE),
            name.strip_prefix(PHASE_SCOPE),
        ) {
            (Some(module), _) => Kind::Module(module.to_string()),
            (_, Some(phase)) => Phase::ALL
                .into_iter()
                .find(|p| p.as_str().eq_ignore_ascii_case(phase))
                .map_or(Kind::Other, Kind::Phase),
            _ => Kind::Other,
        },
        _ => return None,
    };
    let start = event.get("ts")?.as_f64()?;
    let args = event.get("args");
    let arg = |key: &str| args.and_then(|a| a.get(key));
    Some(Span {
        thread: event.get("tid").map(Value::to_string).unwrap_or_default(),
        start,
        end: start + event.get("dur")?.as_f64()?,
        name,
        kind,
        sequence: arg("Sequence number").and_then(Value::as_i64),
        shapes: arg("Input Dims").map(tensor_shapes).unwrap_or_default(),
        scalars: arg("Concrete Inputs")
            .and_then(Value::as_array)
            .map(|v| {
                v.iter()
                    .map(|s| s.as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// The trace's "Input Dims": one shape per argument, empty for a scalar, a list or an
/// absent tensor.
fn tensor_shapes(dims: &Value) -> Vec<Vec<usize>> {
    let shape = |d: &Value| -> Option<Vec<usize>> {
        d.as_array()?
            .iter()
            .map(|x| x.as_u64().map(|x| x as usize))
            .collect()
    };
    dims.as_array()
        .map(|all| all.iter().map(|d| shape(d).unwrap_or_default()).collect())
        .unwrap_or_default()
}

/// A top-level op before it is named: its range, and the module scope around it.
struct TopOp {
    span: Span,
    module: Option<String>,
}

/// The forward op a sequence number belongs to: its module and input shapes.
type Forward = HashMap<i64, (Option<String>, Vec<Vec<usize>>)>;

/// Every top-level op on every thread, with its module; and the forward ops by
/// sequence number.
fn top_ops(spans: &[Span]) -> (Vec<TopOp>, Forward) {
    let mut by_thread: HashMap<&str, Vec<&Span>> = HashMap::new();
    for s in spans {
        by_thread.entry(&s.thread).or_default().push(s);
    }
    let (mut ops, mut forward) = (Vec::new(), Forward::new());
    for mut thread in by_thread.into_values() {
        thread.sort_by(|a, b| a.start.total_cmp(&b.start).then(b.end.total_cmp(&a.end)));
        // The enclosing ranges: their end, module, and whether an op encloses them.
        let mut stack: Vec<(f64, Option<String>, bool)> = Vec::new();
        for s in thread {
            while stack.last().is_some_and(|top| s.end > top.0 + 1e-3) {
                stack.pop();
            }
            let (mut module, mut in_op) = stack
                .last()
                .map_or((None, false), |top| (top.1.clone(), top.2));
            match &s.kind {
                Kind::Module(name) => module = Some(name.clone()),
                Kind::Outside => in_op = true,
                Kind::Op | Kind::OptimizerStep if !in_op => {
                    ops.push(TopOp {
                        span: s.clone(),
                        module: module.clone(),
                    });
                    in_op = true;
                }
                _ => {}
            }
            if let (Kind::Op, Some(seq)) = (&s.kind, s.sequence) {
                if !s.name.starts_with("autograd::") && !s.name.ends_with("Backward0") {
                    forward
                        .entry(seq)
                        .or_insert_with(|| (module.clone(), s.shapes.clone()));
                }
            }
            stack.push((s.end, module, in_op));
        }
    }
    ops.sort_by(|a, b| a.span.start.total_cmp(&b.span.start));
    (ops, forward)
}

/// One op of one step, named.
struct StepOp {
    op: TorchOp,
    phase: Phase,
    layer: Option<String>,
    start: f64,
    end: f64,
    shapes: Vec<Vec<usize>>,
}

/// A top-level op's phase: the phase scope around its start, or, without phase scopes,
/// what its name says. `None` outside every phase scope.
fn phase_of(op: &TopOp, scopes: &[(f64, f64, Phase)]) -> Option<Phase> {
    if !scopes.is_empty() {
        let t = op.span.start;
        return scopes
            .iter()
            .find(|(start, end, _)| *start <= t && t <= *end)
            .map(|s| s.2);
    }
    Some(match op.span.kind {
        Kind::OptimizerStep => Phase::Optimizer,
        _ if op
            .span
            .name
            .starts_with("autograd::engine::evaluate_function") =>
        {
            Phase::Backward
        }
        _ => Phase::Forward,
    })
}

fn name_op(top: TopOp, phase: Phase, forward: &Forward) -> StepOp {
    let s = &top.span;
    let (op, layer) = match (phase, &s.kind) {
        (_, Kind::OptimizerStep) => (optimizer_op(&s.name), None),
        (Phase::Backward, _) => {
            let fwd = s.sequence.and_then(|seq| forward.get(&seq));
            let shapes = fwd.map(|f| f.1.as_slice()).unwrap_or(&[]);
            let layer = fwd.and_then(|f| f.0.clone()).or(top.module.clone());
            (backward_op(&s.name, shapes), layer)
        }
        _ => (
            forward_op(&s.name, &s.shapes, &s.scalars),
            top.module.clone(),
        ),
    };
    StepOp {
        op,
        phase,
        layer,
        start: s.start,
        end: s.end,
        shapes: s.shapes.iter().filter(|d| !d.is_empty()).cloned().collect(),
    }
}

/// Reads a trace's text as a profile of its steps.
pub fn import_torch_trace(text: &str) -> Result<Profile, ImportError> {
    let file: TraceFile =
        serde_json::from_str(text).map_err(|e| ImportError::NotATrace(e.to_string()))?;
    let kernels = file
        .events
        .iter()
        .filter(|e| e.get("cat").and_then(Value::as_str) == Some("kernel"))
        .count();
    if kernels > 0 {
        return Err(ImportError::DeviceTrace(kernels));
    }
    let spans: Vec<Span> = file.events.iter().filter_map(span).collect();
    let mut steps: Vec<&Span> = spans.iter().filter(|s| s.kind == Kind::Step).collect();
    if steps.is_empty() {
        return Err(ImportError::NoSteps);
    }
    steps.sort_by(|a, b| a.start.total_cmp(&b.start));
    let scopes: Vec<(f64, f64, Phase)> = spans
        .iter()
        .filter_map(|s| match s.kind {
            Kind::Phase(p) => Some((s.start, s.end, p)),
            _ => None,
        })
        .collect();
    let (ops, forward) = top_ops(&spans);
    let mut per_step: Vec<Vec<StepOp>> = steps.iter().map(|_| Vec::new()).collect();
    for top in ops {
        let t = top.span.start;
        let Some(step) = steps.iter().position(|s| s.start <= t && t < s.end) else {
            continue;
        };
        if let Some(phase) = phase_of(&top, &scopes) {
            per_step[step].push(name_op(top, phase, &forward));
        }
    }
    for (step, ops) in steps.iter().zip(&per_step) {
        if ops.is_empty() {
            return Err(ImportError::EmptyStep(step.name.clone()));
        }
    }
    check_same_ops(&steps, &per_step)?;
    Ok(assemble(&per_step, file.wick_run.unwrap_or_default()))
}

/// The op's identity across steps.
fn label(op: &StepOp) -> String {
    let layer = op.layer.as_deref().unwrap_or("-");
    format!("{} in {layer}", op.op.name)
}

fn check_same_ops(steps: &[&Span], per_step: &[Vec<StepOp>]) -> Result<(), ImportError> {
    let first = &per_step[0];
    for (k, ops) in per_step.iter().enumerate().skip(1) {
        let n = first.len().max(ops.len());
        let at = |v: &[StepOp], i: usize| v.get(i).map_or("end".to_string(), label);
        if let Some(i) = (0..n).find(|&i| at(first, i) != at(ops, i)) {
            return Err(ImportError::StepsDiffer {
                first: steps[0].name.clone(),
                other: steps[k].name.clone(),
                position: i,
                a: at(first, i),
                b: at(ops, i),
            });
        }
    }
    Ok(())
}

/// Seconds from the first op's start to the last op's end among `ops` (0 for none).
fn extent<'a>(ops: impl Iterator<Item = &'a StepOp>) -> f64 {
    let (lo, hi) = ops.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), o| {
        (lo.min(o.start), hi.max(o.end))
    });
    if hi > lo {
        (hi - lo) / 1e6
    } else {
        0.0
    }
}

fn assemble(per_step: &[Vec<StepOp>], run: TraceRun) -> Profile {
    let n = per_step.len();
    let samples = Samples {
        iterations: per_step.iter().map(|ops| extent(ops.iter())).collect(),
        phases: per_step
            .iter()
            .map(|ops| Phase::ALL.map(|ph| extent(ops.iter().filter(|o| o.phase == ph))))
            .collect(),
        ops: per_step
            .iter()
            .map(|ops| ops.iter().map(|o| (o.end - o.start) / 1e6).collect())
            .collect(),
    };
    let ops = op_profiles(&per_step[0], &samples.ops);
    let phase_mean =
        |ph: Phase| samples.phases.iter().map(|p| p[ph as usize]).sum::<f64>() / n as f64;
    let phases: Vec<PhaseProfile> = Phase::ALL
        .into_iter()
        .filter(|&ph| ops.iter().any(|o| o.phase == ph))
        .map(|ph| PhaseProfile {
            phase: ph,
            sec: phase_mean(ph),
            ops_sec: ops
                .iter()
                .filter(|o| o.phase == ph)
                .map(|o| o.mean_sec)
                .sum(),
        })
        .collect();
    let iterations = &samples.iterations;
    Profile {
        verbosity: 2,
        schedule: Schedule {
            wait: 0,
            warmup: 0,
            active: n,
            repeat: 1,
        },
        skipped: Some(0),
        timed_iterations: n,
        device: "Cpu".into(),
        method: Some(TORCH_METHOD.into()),
        forward_sec: phase_mean(Phase::Forward),
        backward_sec: phase_mean(Phase::Backward),
        optimizer_sec: phase_mean(Phase::Optimizer),
        phases,
        iteration_sec: iterations.iter().sum::<f64>() / n as f64,
        iteration_median_sec: crate::profile::stats::median(iterations),
        iteration_min_sec: iterations.iter().copied().fold(f64::INFINITY, f64::min),
        iteration_max_sec: iterations.iter().copied().fold(0.0, f64::max),
        graph_hash: graph_hash(&per_step[0]),
        ops,
        schema: SCHEMA.into(),
        run: RunInfo {
            wick_version: format!("PyTorch {}", run.torch_version).trim().to_string(),
            model: run.model,
            batch: run.batch,
            image_size: run.image_size,
            dtype: "F32".into(),
            device_name: "Cpu".into(),
            cpu_model: run.cpu_model,
            threads: run.threads,
            ..RunInfo::default()
        },
        samples,
        ..Profile::default()
    }
}

/// One row per op of a step, timed over every step's `samples`.
fn op_profiles(step: &[StepOp], samples: &[Vec<f64>]) -> Vec<OpProfile> {
    step.iter()
        .enumerate()
        .map(|(j, o)| {
            let times: Vec<f64> = samples.iter().map(|it| it[j]).collect();
            OpProfile {
                op_id: j,
                name: o.op.name.clone(),
                class: o.op.class,
                variant: o.op.variant,
                phase: o.phase,
                mean_sec: times.iter().sum::<f64>() / times.len().max(1) as f64,
                min_sec: times.iter().copied().fold(f64::INFINITY, f64::min),
                max_sec: times.iter().copied().fold(0.0, f64::max),
                input_shapes: o.shapes.clone(),
                origin: Origin {
                    layer: o.layer.clone(),
                    ..Origin::default()
                },
                ..OpProfile::new(wick_ops::Kernel::Reshape, 0.0)
            }
        })
        .collect()
}

/// FNV-1a over the ops' names and layers: equal for two traces of one model.
fn graph_hash(ops: &[StepOp]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for o in ops {
        for b in label(o).bytes().chain([b';']) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    format!("torch-{h:016x}")
}

impl Profile {
    /// Whether this profile was imported from a PyTorch trace
    /// ([`import_torch_trace`]).
    pub fn is_from_torch(&self) -> bool {
        self.method.as_deref() == Some(TORCH_METHOD)
    }
}
