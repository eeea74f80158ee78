//! Hooks: code the executor calls around iterations, phases and ops. The profiler is one.

use std::any::Any;

use candle_core::Device;
use wick_ops::Kernel;

use crate::ir::Phase;

/// What a hook is told about a node: its identity, kernel and shapes.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// The node's OP_ID (its index in recording order).
    pub op_id: usize,
    /// The kernel it runs: its class, phase and whether it communicates
    /// ([`Kernel::class`], [`Kernel::phase`], [`Kernel::communicates`]).
    pub kernel: Kernel,
    /// The kernel's name on the executor's device (`ConvForward`, `cudnnConvForward`, ...).
    pub name: &'static str,
    /// What sets the node apart from others of its kernel ([`NodeOp::variant`](crate::NodeOp::variant)).
    pub variant: Option<wick_ops::KernelVariant>,
    /// The node's phase.
    pub phase: Phase,
    /// Shapes of the inputs, in the op's input order.
    pub input_shapes: Vec<Vec<usize>>,
    /// Shapes of the outputs.
    pub output_shapes: Vec<Vec<usize>>,
    /// FLOPs of one execution.
    pub flops: u64,
    /// Where the node comes from (layer, forward node, parameter).
    pub origin: crate::ir::Origin,
    /// Bytes the node moves: its inputs read and its outputs written, once each.
    pub bytes: u64,
    /// The dtype it computes in (its first output's).
    pub dtype: candle_core::DType,
    /// For an optimizer's update node, which inputs are each parameter, its gradient and
    /// its state ([`NodeOp::param_slots`](crate::NodeOp::param_slots)); empty otherwise.
    pub param_slots: Vec<crate::ir::ParamSlots>,
}

/// A part of a training step outside the graph's nodes, timed by the host clock and
/// reported through [`Executor::report_step_part`](crate::Executor::report_step_part).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepPart {
    /// Waiting for the data loader to hand over the next batch (before the iteration).
    InputWait,
    /// Copying the batch into the graph's inputs, onto the device (before the iteration).
    HostToDevice,
    /// Reading the loss back to the host (after the iteration).
    LossReadBack,
    /// Checking every parameter for NaN and infinity (after the iteration).
    NonFiniteCheck,
    /// The training loop scoring the batch: reading the logits back, accuracy.
    Metrics,
    /// Writing a periodic checkpoint.
    Checkpoint,
}

/// The stages of preparing one batch of images, in the order each image goes through
/// them (tf.data's input pipeline analysis splits the input the same way).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InputStage {
    /// Reading the file's bytes.
    Read,
    /// Decoding them into pixels (JPEG, PNG).
    Decode,
    /// Cropping, resizing, flipping and normalising.
    Augment,
    /// Putting the images and labels into the batch's tensors.
    Collate,
}

impl InputStage {
    /// Every stage, in order.
    pub const ALL: [InputStage; 4] = [
        InputStage::Read,
        InputStage::Decode,
        InputStage::Augment,
        InputStage::Collate,
    ];

    /// The stage's name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            InputStage::Read => "read",
            InputStage::Decode => "decode",
            InputStage::Augment => "augment",
            InputStage::Collate => "collate",
        }
    }
}

/// Seconds spent in each [`InputStage`], summed over a batch's images.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct InputStages(pub [f64; 4]);

impl InputStages {
    /// Adds `sec` to `stage`.
    pub fn add(&mut self, stage: InputStage, sec: f64) {
        self.0[stage as usize] += sec;
    }

    /// The seconds of `stage`.
    pub fn get(&self, stage: InputStage) -> f64 {
        self.0[stage as usize]
    }

    /// All stages' seconds.
    pub fn total(&self) -> f64 {
        self.0.iter().sum()
    }

    /// Each stage's share of the total, in words: `read 2.0%, decode 77.8%, ...`.
    pub fn shares(&self) -> String {
        let total = self.total().max(f64::MIN_POSITIVE);
        InputStage::ALL
            .iter()
            .map(|s| format!("{} {:.1}%", s.as_str(), 100.0 * self.get(*s) / total))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One batch a data loader thread prepared, reported through
/// [`Executor::report_loader_work`](crate::Executor::report_loader_work) when the training
/// loop takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoaderWork {
    /// The loader thread, from 0 (`wick-loader-N`).
    pub thread: usize,
    /// When the thread started on the batch.
    pub started: std::time::Instant,
    /// Seconds in each stage.
    pub stages: InputStages,
    /// Images in the batch.
    pub images: usize,
    /// Unreadable images skipped on the way (`--skip-bad-images`).
    pub skipped: usize,
    /// The thread's CPU time for the batch (`CLOCK_THREAD_CPUTIME_ID`); well under the stages'
    /// sum when the thread waited for a core (a cgroup limit, busy cores).
    pub cpu_sec: Option<f64>,
}

/// Called by the [`Executor`](crate::Executor) around iterations, phases and ops. Every
/// method has an empty default. With no hook attached the executor makes none of these
/// calls. A hook is `Send`: on the CPU the executor runs each iteration, and so calls its
/// hooks, on a thread of rayon's pool (see [`Executor::run`](crate::Executor::run)).
pub trait Hook: Any + Send {
    /// Once, when the hook is attached: the graph's nodes and the device they run on.
    fn on_attach(&mut self, _nodes: &[NodeInfo], _device: &Device) -> crate::Result<()> {
        Ok(())
    }
    /// Once, right after [`on_attach`](Hook::on_attach): the graph's predicted memory.
    fn on_memory_plan(&mut self, _plan: &crate::memory_plan::MemoryPlan) {}
    /// Before the first node of iteration `iteration` (counted from 0 for this executor).
    fn on_iteration_start(&mut self, _iteration: usize) {}
    /// After the last node of the iteration.
    fn on_iteration_end(&mut self, _iteration: usize) -> crate::Result<()> {
        Ok(())
    }
    /// Before the first node of `phase`.
    fn on_phase_start(&mut self, _phase: Phase) {}
    /// After the last node of `phase`.
    fn on_phase_end(&mut self, _phase: Phase) {}
    /// Right before the node's kernel runs.
    fn before_op(&mut self, _node: &NodeInfo) {}
    /// Right after the node's kernel returned.
    fn after_op(&mut self, _node: &NodeInfo) {}
    /// A part of the step outside the graph took `sec` seconds (host clock): input wait
    /// and the copy before an iteration, the loss read-back after it.
    fn on_step_part(&mut self, _part: StepPart, _sec: f64) {}
    /// The training loop took a batch a data loader thread prepared (before the
    /// iteration that uses it).
    fn on_loader_work(&mut self, _work: &LoaderWork) {}
}
