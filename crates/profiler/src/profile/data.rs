//! What the profiler measured, as plain numbers: [`Profile`], its per-node and per-op-type
//! rows, and its JSON form. The text formats live beside it (`singa`, `table`, `trace`).

use serde::{Deserialize, Serialize};
use wick_ops::{DeviceKind, Kernel, KernelClass, KernelVariant};

use crate::profile::schedule::Schedule;
use wick_graph::ir::{Origin, Phase};

/// The timing of one node, averaged over the iterations that timed it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpProfile {
    /// The node's OP_ID.
    pub op_id: usize,
    /// The kernel's name.
    pub name: String,
    /// The kernel's class ([`Kernel::class`](wick_ops::Kernel::class)).
    pub class: KernelClass,
    /// What sets the node apart from others of its kernel (a depthwise convolution).
    /// Absent in profiles written before wick recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<KernelVariant>,
    /// The node's phase.
    pub phase: Phase,
    /// Mean seconds per execution.
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
    /// Where the node comes from: layer, forward node, updated parameter.
    pub origin: Origin,
    /// Elements of the parameter an optimizer node updates (0 for other nodes).
    pub parameter_elements: u64,
    /// For an optimizer's update node, the parameters it updates (several for a merged
    /// update); 0 for other nodes. Absent in profiles written before wick recorded it.
    #[serde(default)]
    pub updated_parameters: Option<usize>,
    /// Bytes moved: inputs read and outputs written, once each.
    pub bytes: u64,
    /// On a device: mean host seconds of the node's dispatch (launching its kernels),
    /// beside `mean_sec`, its device time. `None` on the CPU, where the two are one.
    pub host_sec: Option<f64>,
    /// The dtype it computes in (`F32`, ...).
    pub dtype: String,
    /// On the CPU, for a kernel that runs as a chain of candle's generic tensor ops: how
    /// many ([`Kernel::cpu_generic_ops`](wick_ops::Kernel::cpu_generic_ops)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generic_ops: Option<u32>,
    /// Its measured memory in the last timed iteration (with a counting allocator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<crate::profile::memory::OpMemory>,
}

/// One phase's time per iteration, and the part of it spent inside ops.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct PhaseProfile {
    /// The phase.
    pub phase: Phase,
    /// Mean seconds from the phase's first op's start to its last op's end.
    pub sec: f64,
    /// Mean seconds inside the phase's ops (their kernels).
    pub ops_sec: f64,
}

impl OpProfile {
    /// The name of its per-type row: the kernel's, with its variant's label
    /// (`ConvForward (depthwise)`).
    pub fn type_name(&self) -> String {
        KernelVariant::type_name(self.variant, &self.name)
    }

    /// OP_ID 0 running `kernel` (its CPU name) in the forward phase for `sec` seconds in
    /// every timed iteration, with nothing else recorded: a profile made by hand (a test,
    /// a what-if) sets the rest with `..OpProfile::new(kernel, sec)`.
    pub fn new(kernel: Kernel, sec: f64) -> Self {
        OpProfile {
            op_id: 0,
            name: kernel.name(DeviceKind::Cpu).into(),
            class: kernel.class(),
            variant: None,
            phase: Phase::Forward,
            mean_sec: sec,
            min_sec: sec,
            max_sec: sec,
            flops: 0,
            input_shapes: Vec::new(),
            output_shapes: Vec::new(),
            origin: Origin::default(),
            parameter_elements: 0,
            updated_parameters: None,
            bytes: 0,
            dtype: "F32".into(),
            host_sec: None,
            generic_ops: None,
            memory: None,
        }
    }
}

impl PhaseProfile {
    /// Seconds of the phase outside its ops: the executor's work between them (hooks,
    /// freeing values, bookkeeping).
    pub fn overhead_sec(&self) -> f64 {
        self.sec - self.ops_sec
    }
}

/// One row of the per-op-type table: every node with the same kernel name and variant.
#[derive(Debug, Clone, Serialize)]
pub struct OpTypeRow {
    /// The kernel name.
    pub name: String,
    /// Nodes of this type in one iteration.
    pub nodes: usize,
    /// Seconds per iteration spent in this type (all its nodes).
    pub total_sec: f64,
    /// Fastest single node execution, seconds.
    pub min_sec: f64,
    /// Slowest single node execution, seconds.
    pub max_sec: f64,
    /// Mean seconds per node execution.
    pub mean_sec: f64,
    /// Median seconds of one node execution, over every timed execution of its nodes
    /// (one preempted run moves Max, not this).
    pub median_sec: f64,
    /// Share of all op time in an iteration.
    pub share: f64,
    /// FLOPs per iteration.
    pub flops: u64,
    /// On a device: host seconds per iteration spent dispatching this type.
    pub host_sec: Option<f64>,
    /// The input shapes of its nodes (one row per kernel and shapes in
    /// [`by_type_and_shape`](Profile::by_type_and_shape); empty in [`by_type`](Profile::by_type)).
    pub input_shapes: Vec<Vec<usize>>,
}

impl OpTypeRow {
    /// Its FLOP rate, GFLOP/s (0 when no time was measured).
    pub fn gflops(&self) -> f64 {
        super::stats::giga_per_sec(self.flops, self.total_sec)
    }
}

/// Everything the profiler measured. The report prints what it holds: per-op lines when
/// `ops` is filled (verbosity 2), the phase lines otherwise.
///
/// # Examples
///
/// ```
/// use candle_core::{DType, Device, Tensor};
/// use wick_profiler::{RecordLevel, Schedule};
/// use wick_graph::{Executor, GraphBuilder, Mode, Phase};
/// use wick_profiler::TimeProfiler;
///
/// let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
/// let x = b.input("x", &[64, 64], DType::F32)?;
/// let y = b.in_layer("act", |b| b.silu(x))?;
/// let y = b.softmax(y, 1)?;
/// b.output(y);
/// let mut exec = Executor::new(b.finish(), &Device::Cpu);
/// let schedule = Schedule { wait: 1, warmup: 0, active: 2, repeat: 1 };
/// exec.add_hook(TimeProfiler::with_schedule(schedule, RecordLevel::PerOp))?;
/// exec.set("x", &Tensor::ones((64, 64), DType::F32, &Device::Cpu)?)?;
/// for _ in 0..3 {
///     exec.run()?;
/// }
/// let profile = exec.hook::<TimeProfiler>().unwrap().profile();
/// assert_eq!(profile.timed_iterations, 2);
/// let silu = &profile.ops[0];
/// assert_eq!((silu.name.as_str(), silu.phase), ("SiLU", Phase::Forward));
/// assert_eq!(silu.origin.layer.as_deref(), Some("act"));
/// let rows = profile.by_type(); // one row per kernel name, as PyTorch's key_averages
/// assert!(rows.iter().any(|r| r.name == "SoftmaxForward"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Profile {
    /// The SINGA verbosity the report prints at (1 phases, 2 every op, 3 only the
    /// communication ops' lines); set it to change what [`singa_lines`](Profile::singa_lines) shows.
    pub verbosity: u8,
    /// Which iterations were timed.
    pub schedule: Schedule,
    /// Iterations run untimed at the start (`None` when nothing was timed).
    pub skipped: Option<usize>,
    /// Iterations every phase and iteration figure is averaged over.
    pub timed_iterations: usize,
    /// The device.
    pub device: String,
    /// The timing method (host clock or CUDA events; `None` when nothing was timed).
    pub method: Option<String>,
    /// Mean seconds of the forward phase (its first op's start to its last op's end).
    pub forward_sec: f64,
    /// Mean seconds of the backward phase.
    pub backward_sec: f64,
    /// Mean seconds of the optimizer phase.
    pub optimizer_sec: f64,
    /// Each phase present in the graph, with its op time.
    pub phases: Vec<PhaseProfile>,
    /// Mean seconds of a whole iteration: every node, from before the first to after the
    /// last, with the executor's work between them. It excludes feeding the batch and
    /// reading results (the loss) back.
    pub iteration_sec: f64,
    /// Median seconds of a whole iteration (0 before any timed iteration).
    pub iteration_median_sec: f64,
    /// Fastest timed iteration, in seconds (0 before any).
    pub iteration_min_sec: f64,
    /// Slowest timed iteration, in seconds.
    pub iteration_max_sec: f64,
    /// Per-node timings in OP_ID order (verbosity 2).
    pub ops: Vec<OpProfile>,
    /// The file's schema ([`SCHEMA`](crate::profile::samples::SCHEMA)).
    pub schema: String,
    /// The run this profile comes from (filled by the caller).
    pub run: crate::profile::samples::RunInfo,
    /// A hash of the graph's structure: equal hashes, same graph.
    pub graph_hash: String,
    /// Per-iteration samples, from which `wick-prof diff` recomputes statistics.
    pub samples: crate::profile::samples::Samples,
    /// Every timed iteration's timeline (verbosity 2), for the trace; not in the JSON.
    #[serde(skip)]
    pub timeline: crate::profile::samples::Timeline,
    /// The whole step, input wait and loss read-back included (when the session or the
    /// training loop reported those parts).
    pub step: Option<crate::profile::step::StepProfile>,
    /// The data loader's stages (read, decode, augment, collate) per loader thread, for
    /// the timed steps' batches (when the training loop reported them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_pipeline: Option<crate::profile::input_pipeline::InputPipeline>,
    /// Those batches' spans on the loader threads, for the trace; not in the JSON.
    #[serde(skip)]
    pub loader_spans: Vec<crate::profile::samples::LoaderSpan>,
    /// Predicted and measured memory (after a timed iteration).
    pub memory: Option<crate::profile::memory::MemoryProfile>,
    /// This machine's measured peaks, for the roofline (set by the caller:
    /// [`MachinePeaks::measure`](crate::profile::machine_peaks::MachinePeaks::measure)).
    pub machine: Option<crate::profile::machine_peaks::MachinePeaks>,
    /// How long the threads waited for a core during the timed iterations (Linux).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_contention: Option<crate::profile::contention::CpuContention>,
    /// A data-parallel run's ranks, buckets and overlap (rank 0, after
    /// [`DistProfile::gather`](crate::profile::ranks::DistProfile::gather)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distributed: Option<crate::profile::ranks::DistProfile>,
}

impl Profile {
    /// Seconds per iteration inside ops: the sum over phases.
    pub fn ops_sec(&self) -> f64 {
        self.phases.iter().map(|p| p.ops_sec).sum()
    }

    /// Seconds per iteration inside the phases but outside any op.
    pub fn overhead_in_phases_sec(&self) -> f64 {
        self.phases.iter().map(|p| p.overhead_sec()).sum()
    }

    /// The per-op-type table, sorted by total time, longest first.
    pub fn by_type(&self) -> Vec<OpTypeRow> {
        self.group_ops(false)
    }

    /// The per-op-type table split by input shapes (PyTorch's `record_shapes`): one row
    /// per kernel and input shapes, longest first.
    pub fn by_type_and_shape(&self) -> Vec<OpTypeRow> {
        self.group_ops(true)
    }

    fn group_ops(&self, by_shape: bool) -> Vec<OpTypeRow> {
        let mut rows: Vec<OpTypeRow> = Vec::new();
        let mut executions: Vec<Vec<f64>> = Vec::new();
        let sampled = self
            .samples
            .ops
            .iter()
            .all(|iteration| iteration.len() == self.ops.len());
        for (index, op) in self.ops.iter().enumerate() {
            let name = op.type_name();
            let same =
                |r: &OpTypeRow| r.name == name && (!by_shape || r.input_shapes == op.input_shapes);
            let i = match rows.iter().position(same) {
                Some(i) => i,
                None => {
                    rows.push(OpTypeRow {
                        name: name.clone(),
                        nodes: 0,
                        total_sec: 0.0,
                        min_sec: f64::INFINITY,
                        max_sec: 0.0,
                        mean_sec: 0.0,
                        median_sec: 0.0,
                        share: 0.0,
                        flops: 0,
                        host_sec: None,
                        input_shapes: if by_shape {
                            op.input_shapes.clone()
                        } else {
                            Vec::new()
                        },
                    });
                    executions.push(Vec::new());
                    rows.len() - 1
                }
            };
            if sampled && !self.samples.ops.is_empty() {
                executions[i].extend(self.samples.ops.iter().map(|it| it[index]));
            } else {
                executions[i].push(op.mean_sec);
            }
            let row = &mut rows[i];
            row.nodes += 1;
            row.total_sec += op.mean_sec;
            row.min_sec = row.min_sec.min(op.min_sec);
            row.max_sec = row.max_sec.max(op.max_sec);
            row.flops = row.flops.saturating_add(op.flops);
            if let Some(h) = op.host_sec {
                row.host_sec = Some(row.host_sec.unwrap_or(0.0) + h);
            }
        }
        let all: f64 = self.ops.iter().map(|o| o.mean_sec).sum();
        for (r, times) in rows.iter_mut().zip(&executions) {
            r.mean_sec = r.total_sec / r.nodes as f64;
            r.median_sec = crate::profile::stats::median(times);
            r.share = if all > 0.0 { r.total_sec / all } else { 0.0 };
        }
        rows.sort_by(|a, b| b.total_sec.total_cmp(&a.total_sec));
        rows
    }
}
