//! The graph IR: values, ops, nodes and the graph that holds them.
//!
//! A graph is recorded once and executed many times. Every op of a training iteration
//! (forward ops, the loss, the backward ops and the optimizer's updates) is a [`Node`];
//! a node's `OP_ID` is its index in recording order. Shapes are static: they are checked
//! and inferred when a node is recorded.

use candle_core::DType;
use wick_ops::{BatchNorm2dParams, Conv2dParams, Kernel, Pool2dParams, SgdParams};

/// The index of a value in its graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub usize);

/// Where a value's tensor comes from and how long it lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueKind {
    /// Fed by the caller every iteration (images, labels).
    Input,
    /// A trainable parameter: set once, kept across iterations, updated by the optimizer.
    Param,
    /// Persistent non-trainable state (batch-norm running statistics, momentum buffers),
    /// kept across iterations and updated by the nodes that own it.
    State,
    /// Produced by a node and freed right after its last consumer.
    Intermediate,
}

/// Everything the graph knows about one value.
#[derive(Debug, Clone)]
pub struct ValueInfo {
    /// A name: the parameter's state-dict name for params and state, a generated one otherwise.
    pub name: String,
    /// The static shape.
    pub shape: Vec<usize>,
    /// The dtype.
    pub dtype: DType,
    /// Its role.
    pub kind: ValueKind,
}

/// Which part of the training iteration a node belongs to. Set when the node is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// The forward pass, including the loss.
    Forward,
    /// The backward pass (gradients).
    Backward,
    /// The optimizer's parameter updates.
    Optimizer,
}

impl Phase {
    /// All phases in execution order.
    pub const ALL: [Phase; 3] = [Phase::Forward, Phase::Backward, Phase::Optimizer];

    /// A lowercase name (`forward`, `backward`, `optimizer`).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
        }
    }
}

/// One op of the graph and its settings. Inputs and outputs are listed on the [`Node`];
/// each variant's comment gives their order.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// in: x, weight, `[bias]`; out: y.
    Conv2d {
        /// Stride, padding, dilation, groups.
        params: Conv2dParams,
        /// Whether a bias input follows the weight.
        has_bias: bool,
    },
    /// in: grad_y, weight; out: grad_x.
    ConvBackwardData {
        /// The forward settings.
        params: Conv2dParams,
        /// The forward input's shape.
        input_shape: Vec<usize>,
    },
    /// in: grad_y, x; out: grad_weight.
    ConvBackwardFilter {
        /// The forward settings.
        params: Conv2dParams,
        /// The weight's shape.
        weight_shape: Vec<usize>,
    },
    /// in: grad_y; out: grad_bias.
    ConvBackwardBias,
    /// in: x, weight, bias, running_mean, running_var; out: y, mean, inv_std, and the
    /// running_mean and running_var state values, updated in place.
    BatchNormTrain {
        /// eps and momentum.
        params: BatchNorm2dParams,
    },
    /// in: x, weight, bias, running_mean, running_var; out: y.
    BatchNormEval {
        /// eps (momentum unused).
        params: BatchNorm2dParams,
    },
    /// in: grad_y, x, weight, mean, inv_std; out: grad_x, grad_weight, grad_bias.
    BatchNormTrainBackward,
    /// in: grad_y, x, weight, running_mean, running_var; out: grad_x, grad_weight, grad_bias.
    BatchNormEvalBackward {
        /// eps.
        params: BatchNorm2dParams,
    },
    /// in: x; out: y.
    Relu,
    /// in: grad_y, y (the forward output: y > 0 exactly where x > 0); out: grad_x.
    ReluBackward,
    /// in: a, b; out: a + b.
    Add,
    /// in: a, b (two gradients of one value); out: their sum.
    AccumulateGrad,
    /// in: x; out: y, indices.
    MaxPool2d {
        /// Kernel, stride, padding.
        params: Pool2dParams,
    },
    /// in: grad_y, indices; out: grad_x.
    MaxPool2dBackward {
        /// The forward settings.
        params: Pool2dParams,
        /// The forward input's shape.
        input_shape: Vec<usize>,
    },
    /// in: x; out: y.
    AvgPool2d {
        /// Kernel, stride, padding.
        params: Pool2dParams,
    },
    /// in: grad_y; out: grad_x.
    AvgPool2dBackward {
        /// The forward settings.
        params: Pool2dParams,
        /// The forward input's shape.
        input_shape: Vec<usize>,
    },
    /// in: x [N, C, H, W]; out: y [N, C, 1, 1].
    GlobalAvgPool,
    /// in: grad_y; out: grad_x.
    GlobalAvgPoolBackward {
        /// The forward input's shape.
        input_shape: Vec<usize>,
    },
    /// in: x; out: x reshaped to `shape` (flatten and its backward).
    Reshape {
        /// The output shape.
        shape: Vec<usize>,
    },
    /// in: x `[N, in]`, weight `[out, in]`, `[bias]`; out: y `[N, out]`.
    Linear {
        /// Whether a bias input follows the weight.
        has_bias: bool,
    },
    /// in: grad_y, x, weight; out: grad_x, grad_weight, `[grad_bias]`.
    LinearBackward {
        /// Whether the layer has a bias.
        has_bias: bool,
    },
    /// in: logits `[N, C]`, labels `[N]`; out: the mean loss (0-dim).
    CrossEntropy,
    /// in: logits, labels; out: grad_logits for a loss gradient of 1 (the loss is the root).
    CrossEntropyBackward,
    /// in: param, grad, `[momentum_buf]`; out: the param and (with momentum) the
    /// momentum buffer, updated in place.
    SgdUpdate {
        /// lr, momentum, weight decay, dampening, nesterov.
        params: SgdParams,
    },
}

impl Op {
    /// The kernel this op runs.
    pub fn kernel(&self) -> Kernel {
        match self {
            Op::Conv2d { .. } => Kernel::ConvForward,
            Op::ConvBackwardData { .. } => Kernel::ConvBackwardData,
            Op::ConvBackwardFilter { .. } => Kernel::ConvBackwardFilter,
            Op::ConvBackwardBias => Kernel::ConvBackwardBias,
            Op::BatchNormTrain { .. } => Kernel::BatchNormForwardTraining,
            Op::BatchNormEval { .. } => Kernel::BatchNormForwardInference,
            Op::BatchNormTrainBackward | Op::BatchNormEvalBackward { .. } => {
                Kernel::BatchNormBackward
            }
            Op::Relu => Kernel::ReLU,
            Op::ReluBackward => Kernel::ReLUBackward,
            Op::Add => Kernel::Add,
            Op::AccumulateGrad => Kernel::AccumulateGrad,
            Op::MaxPool2d { .. } | Op::AvgPool2d { .. } => Kernel::PoolingForward,
            Op::MaxPool2dBackward { .. } | Op::AvgPool2dBackward { .. } => Kernel::PoolingBackward,
            Op::GlobalAvgPool => Kernel::GlobalAvgPoolForward,
            Op::GlobalAvgPoolBackward { .. } => Kernel::GlobalAvgPoolBackward,
            Op::Reshape { .. } => Kernel::Reshape,
            Op::Linear { .. } => Kernel::LinearForward,
            Op::LinearBackward { .. } => Kernel::LinearBackward,
            Op::CrossEntropy => Kernel::SoftmaxCrossEntropyForward,
            Op::CrossEntropyBackward => Kernel::SoftmaxCrossEntropyBackward,
            Op::SgdUpdate { .. } => Kernel::SgdUpdate,
        }
    }
}

/// One recorded op: what it runs, on which values, in which phase.
#[derive(Debug, Clone)]
pub struct Node {
    /// The op and its settings.
    pub op: Op,
    /// The values it reads.
    pub inputs: Vec<ValueId>,
    /// The values it writes (intermediates it creates, or persistent state it updates).
    pub outputs: Vec<ValueId>,
    /// Its phase.
    pub phase: Phase,
    /// Floating-point operations of one execution.
    pub flops: u64,
}

/// A recorded computation graph. Build it with [`GraphBuilder`](crate::GraphBuilder) and
/// run it with an [`Executor`](crate::Executor).
#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub(crate) values: Vec<ValueInfo>,
    pub(crate) nodes: Vec<Node>,
    /// Values the caller reads after an iteration (loss, logits): never freed early.
    pub(crate) outputs: Vec<ValueId>,
}

impl Graph {
    /// The nodes in OP_ID order.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The value `id`.
    pub fn value(&self, id: ValueId) -> &ValueInfo {
        &self.values[id.0]
    }

    /// All values, indexed by [`ValueId`].
    pub fn values(&self) -> &[ValueInfo] {
        &self.values
    }

    /// The value named `name`, if any.
    pub fn find(&self, name: &str) -> Option<ValueId> {
        self.values.iter().position(|v| v.name == name).map(ValueId)
    }

    /// The values of kind `kind`, in creation order.
    pub fn values_of(&self, kind: ValueKind) -> impl Iterator<Item = ValueId> + '_ {
        self.values
            .iter()
            .enumerate()
            .filter(move |(_, v)| v.kind == kind)
            .map(|(i, _)| ValueId(i))
    }

    /// The values kept for the caller after each iteration.
    pub fn outputs(&self) -> &[ValueId] {
        &self.outputs
    }

    /// The graph outputs, to add values the caller wants to read after each iteration
    /// (a gradient, say). Add them before making the executor.
    pub fn outputs_mut(&mut self) -> &mut Vec<ValueId> {
        &mut self.outputs
    }

    /// For each node, the intermediate values whose last use it is: the executor frees them
    /// right after that node. Intermediates that no node reads are freed right after the
    /// node that makes them. Graph outputs are never freed.
    pub fn last_uses(&self) -> Vec<Vec<ValueId>> {
        let mut last: Vec<Option<usize>> = vec![None; self.values.len()];
        for (op_id, node) in self.nodes.iter().enumerate() {
            for v in node.inputs.iter().chain(&node.outputs) {
                last[v.0] = Some(op_id);
            }
        }
        let mut frees = vec![Vec::new(); self.nodes.len()];
        for (v, at) in last.iter().enumerate() {
            let id = ValueId(v);
            if let Some(op_id) = at {
                if self.values[v].kind == ValueKind::Intermediate && !self.outputs.contains(&id) {
                    frees[*op_id].push(id);
                }
            }
        }
        frees
    }

    /// Total FLOPs of one iteration, per phase.
    pub fn flops_by_phase(&self) -> [u64; 3] {
        let mut f = [0u64; 3];
        for n in &self.nodes {
            f[n.phase as usize] += n.flops;
        }
        f
    }
}
