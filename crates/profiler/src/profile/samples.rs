//! What makes a profile file self-describing and comparable: its schema version, the
//! run it comes from ([`RunInfo`]), a hash of the graph, and the per-iteration samples
//! ([`Samples`]) from which statistics can be recomputed later (`wick-prof diff`). Also
//! the [`Timeline`] of every timed iteration that the trace draws (kept in memory only).

use serde::{Deserialize, Serialize};

use wick_graph::hooks::NodeInfo;

/// The profile file's schema. Bumped when a field changes meaning; readers refuse
/// another major version.
pub const SCHEMA: &str = "wick-profile/2";

/// The run a profile comes from, as the caller knows it (the examples fill every field).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// wick's version.
    pub wick_version: String,
    /// The model (`resnet50`, ...).
    pub model: String,
    /// Images per batch.
    pub batch: usize,
    /// Image width x height (`224x224`).
    pub image_size: String,
    /// The compute dtype.
    pub dtype: String,
    /// The device's name (`cpu`, `cuda:0 NVIDIA H200`, ...).
    pub device_name: String,
    /// The CPU model (`/proc/cpuinfo`'s model name).
    pub cpu_model: String,
    /// CPU threads the kernels use.
    pub threads: usize,
    /// Graph passes applied (none yet: the graph runs as recorded).
    pub passes: Vec<String>,
    /// The command line.
    pub command_line: Vec<String>,
    /// Whether the CPU has bfloat16 instructions (AVX512-BF16's `vdpbf16ps`), which
    /// bf16 autocast uses.
    #[serde(default)]
    pub cpu_bf16: bool,
}

impl RunInfo {
    /// The machine's part: CPU model, kernel threads and the command line. The caller
    /// adds the model, sizes, dtype, device and wick version.
    pub fn detect() -> Self {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, name)| name.trim().to_string())
            })
            .unwrap_or_default();
        RunInfo {
            cpu_model,
            threads: rayon::current_num_threads(),
            command_line: std::env::args().collect(),
            cpu_bf16: wick_ops::bf16::has_avx512_bf16(),
            ..Default::default()
        }
    }
}

/// Per-iteration samples of every timed iteration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Samples {
    /// Seconds of each timed iteration.
    pub iterations: Vec<f64>,
    /// Per timed iteration: seconds of the forward, backward and optimizer phases (0 for
    /// a phase the graph lacks).
    pub phases: Vec<[f64; 3]>,
    /// Per timed iteration at verbosity 2: seconds of every node, in OP_ID order.
    pub ops: Vec<Vec<f64>>,
}

/// A hash of the graph's structure: every node's kernel, phase, shapes and layer, in
/// OP_ID order (FNV-1a, 64 bits, hex). Two profiles with the same hash ran the same graph.
pub fn graph_hash(nodes: &[NodeInfo]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for n in nodes {
        eat(n.name.as_bytes());
        eat(n.phase.as_str().as_bytes());
        eat(format!("{:?}{:?}", n.input_shapes, n.output_shapes).as_bytes());
        eat(n.origin.layer.as_deref().unwrap_or("").as_bytes());
        eat(b";");
    }
    format!("{h:016x}")
}

/// One timed iteration as the trace draws it, in seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IterationTimeline {
    /// Host-clock time of the iteration's start (seconds since the profiler's origin).
    pub start: f64,
    /// Input wait and copy reported before it, and the loss read-back after it.
    pub input_wait: f64,
    /// The batch copy before it.
    pub copy: f64,
    /// The loss read-back after it.
    pub read_back: f64,
    /// The iteration's length (its timer's marks).
    pub length: f64,
    /// Each present phase's (start, duration), relative to the iteration's start.
    pub phases: Vec<(wick_graph::ir::Phase, f64, f64)>,
    /// Each node's (start, duration), relative to the iteration's start, in OP_ID order.
    pub ops: Vec<(f64, f64)>,
    /// Each node's measured memory, in OP_ID order (empty without a counting allocator).
    pub memory: Vec<crate::profile::memory::OpMemory>,
}

/// Every timed iteration's timeline (verbosity 2), for the trace.
pub type Timeline = Vec<IterationTimeline>;

/// One batch a loader thread prepared, as the trace draws it: its stages laid end to end
/// from the moment the thread started on it (the stages interleave image by image; their
/// sums are exact, their order within the batch is not).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoaderSpan {
    /// The loader thread.
    pub thread: usize,
    /// Host-clock seconds (the profiler's origin) when the thread started on the batch.
    pub start: f64,
    /// Seconds in each stage ([`InputStage`](wick_graph::InputStage) order).
    pub stages: [f64; 4],
    /// Images in the batch.
    pub images: usize,
}
