//! What a graph node runs: the [`NodeOp`] trait, which each op family implements in its
//! own file under `ops/` (recording, backward rule, execution and FLOPs in one place),
//! and [`BackwardCtx`], what a backward rule reads and records into.

use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

use candle_core::{DType, Tensor};
use wick_ops::{DeviceKind, Kernel, OpError};

use super::update::{ParamSlots, UpdateCheck};
use super::value::{ValueId, ValueInfo};
use crate::error::{GraphError, Result};

/// A node's op: shared, immutable settings behind the [`NodeOp`] trait.
pub type Op = Arc<dyn NodeOp>;

/// The outputs of one kernel call, in the node's output order (`None`: an output the
/// kernel leaves unset, such as an absent bias gradient).
pub type Outputs = Vec<Option<Tensor>>;

/// The input tensors of one kernel call, in the node's input order (`None`: unset).
pub type Inputs<'a> = [Option<&'a Tensor>];

/// What a kernel call returns.
pub type KernelResult = std::result::Result<Outputs, OpError>;

/// Any node kind as [`Any`], to read its settings back (`Node::op_as`); implemented for
/// every type.
pub trait AsAny: Any {
    /// `self` as [`Any`].
    fn as_any(&self) -> &dyn Any;
}

impl<T: Any> AsAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// One kind of graph node: the kernel it runs and, for forward ops, how it is
/// differentiated.
pub trait NodeOp: Debug + Send + Sync + AsAny {
    /// The kernel this node runs (its name on each device comes from `wick-ops`).
    fn kernel(&self) -> Kernel;

    /// What sets this node apart from others of its kernel (a depthwise convolution),
    /// given its inputs' shapes: the profiler's per-type rows split a kernel by it.
    /// `None` for most nodes (the default).
    fn variant(&self, _input_shapes: &[Vec<usize>]) -> Option<wick_ops::KernelVariant> {
        None
    }

    /// The dtype its products run in when its values' dtypes do not say it (the weight
    /// gradient of a product whose weight autocast cast to bf16 reads only f32 values);
    /// `None` (the default): the narrowest float dtype among its inputs and outputs.
    fn compute_dtype(&self) -> Option<candle_core::DType> {
        None
    }

    /// Runs the kernel. `inputs` are the node's input tensors in order; every input is set
    /// except those [`optional_input`](NodeOp::optional_input) allows to be missing.
    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult;

    /// Whether input `i` may be unset when the node runs (SGD's momentum buffer before
    /// the first step). The executor reports any other unset input as
    /// [`GraphError::MissingValue`].
    fn optional_input(&self, _i: usize) -> bool {
        false
    }

    /// For an optimizer update: the same op with learning rate `lr`, or an error when the
    /// settings would be invalid ([`Executor::set_learning_rate`](crate::Executor::set_learning_rate)).
    /// `None` for ops without a learning rate.
    fn with_learning_rate(&self, _lr: f64) -> Option<Result<Op>> {
        None
    }

    /// For an optimizer's update node: one [`ParamSlots`] per parameter it updates, in
    /// input order, saying which inputs are the parameter, its gradient and its state.
    /// Empty for every other node (the default).
    fn param_slots(&self) -> Vec<ParamSlots> {
        Vec::new()
    }

    /// For an update node: what its last run found about each parameter of
    /// [`param_slots`](NodeOp::param_slots), in that order, then forgotten. The default:
    /// [`UpdateCheck::Unchecked`] for each (the update did not look).
    fn take_update_checks(&self) -> Vec<UpdateCheck> {
        vec![UpdateCheck::Unchecked; self.param_slots().len()]
    }

    /// Scratch bytes the op's kernel takes on `device` beside its inputs and outputs, for
    /// inputs as `inputs` describe them: wick's CUDA kernels' partial sums and tables.
    /// The executor allocates the largest of any node once, from its memory plan, and
    /// lends it to every kernel ([`wick_ops::gpu::Workspace`]).
    fn workspace_bytes(&self, _inputs: &[&ValueInfo], _device: DeviceKind) -> u64 {
        0
    }

    /// Whether a run reads and writes its inputs and outputs (the default): the bytes
    /// the profile's roofline charges it. A view (a reshape) or a node returning what it
    /// kept (a kept cast) moves nothing.
    fn moves_data(&self) -> bool {
        true
    }

    /// Bytes the op itself keeps between iterations, beyond the graph's values, given
    /// the bytes of each of its inputs: a cache such as a folded batch norm's weights.
    /// The memory plan counts them as pass products.
    fn held_bytes(&self, _input_bytes: &[u64]) -> u64 {
        0
    }

    /// Appends the backward nodes of this forward node (reverse-mode autodiff). Ops that
    /// are not forward ops (gradients, optimizer updates) keep the default, an error.
    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        Err(GraphError::Usage(format!(
            "backward: OP_ID{} ({:?}) is not a forward op",
            ctx.op_id, self
        )))
    }
}

/// Input `i` of a kernel call; the executor has checked that required inputs are set.
pub fn arg<'a>(
    inputs: &Inputs<'a>,
    i: usize,
    op: &'static str,
) -> std::result::Result<&'a Tensor, OpError> {
    inputs
        .get(i)
        .copied()
        .flatten()
        .ok_or_else(|| wick_ops::invalid!(op, "input {i} is not set"))
}

/// One output wrapped as [`Outputs`].
pub fn one(t: Tensor) -> KernelResult {
    Ok(vec![Some(t)])
}

/// Inputs `0..N` of a node, each required.
pub fn args<'a, const N: usize>(
    inputs: &Inputs<'a>,
    op: &'static str,
) -> std::result::Result<[&'a Tensor; N], OpError> {
    let mut out = [None; N];
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = Some(arg(inputs, i, op)?);
    }
    Ok(out.map(|t| t.expect("every slot was filled above")))
}

/// Inputs `0..n` of a node, each required: a node with a variable number of operands
/// (`cat`'s parts, the gradients that clipping scales).
pub fn leading_args<'a>(
    inputs: &Inputs<'a>,
    n: usize,
    op: &'static str,
) -> std::result::Result<Vec<&'a Tensor>, OpError> {
    (0..n).map(|i| arg(inputs, i, op)).collect()
}

/// The one output of a node that computes `f` of its two inputs.
pub fn binary<E>(
    inputs: &Inputs<'_>,
    op: &'static str,
    f: impl FnOnce(&Tensor, &Tensor) -> std::result::Result<Tensor, E>,
) -> KernelResult
where
    OpError: From<E>,
{
    let [a, b] = args(inputs, op)?;
    one(f(a, b)?)
}

/// A new value a recorded node creates: its name stem, shape and dtype.
pub type NewValue = (&'static str, Vec<usize>, DType);

/// A new node's outputs: name, shape and dtype of each.
pub(crate) type NewValues = Vec<(String, Vec<usize>, DType)>;

/// Where backward rules record their nodes: the graph builder, seen only through what a
/// rule needs, so that this file does not depend on it.
pub(crate) trait NodeRecorder {
    /// The value `v`.
    fn value_info(&self, v: ValueId) -> &ValueInfo;
    /// Whether a gradient must flow to `v`.
    fn needs_grad(&self, v: ValueId) -> bool;
    /// Appends a node in the current phase; returns its new outputs.
    fn record(&mut self, op: Op, ins: Vec<ValueId>, outs: NewValues, flops: u64) -> Vec<ValueId>;
}

/// What a forward node's backward rule sees and does: the node, the gradients of its
/// outputs, and the builder to record backward nodes into.
pub struct BackwardCtx<'b> {
    pub(crate) recorder: &'b mut dyn NodeRecorder,
    pub(crate) inputs: Vec<ValueId>,
    pub(crate) outputs: Vec<ValueId>,
    pub(crate) op_id: usize,
    pub(crate) grad_y: Option<ValueId>,
    pub(crate) grads: Vec<Option<ValueId>>,
    pub(crate) contributions: &'b mut Vec<Vec<ValueId>>,
}

impl BackwardCtx<'_> {
    /// The forward node's OP_ID.
    pub fn op_id(&self) -> usize {
        self.op_id
    }

    /// Input `i` of the forward node.
    pub fn input(&self, i: usize) -> ValueId {
        self.inputs[i]
    }

    /// Output `i` of the forward node.
    pub fn output(&self, i: usize) -> ValueId {
        self.outputs[i]
    }

    /// The gradient of the forward node's first output (absent for the loss, the root,
    /// and for a multi-output node whose first output no loss depends on: see
    /// [`grad_output`](BackwardCtx::grad_output)).
    pub fn grad_y(&self) -> Result<ValueId> {
        self.grad_y.ok_or_else(|| {
            GraphError::Usage(format!(
                "OP_ID{}: its first output has no gradient (read each output's with grad_output)",
                self.op_id
            ))
        })
    }

    /// The gradient of the forward node's output `i`, if it has one: a node with several
    /// outputs (a custom op's) is differentiated when any of them has a gradient, and
    /// `None` marks an output no loss depends on (its gradient is zero).
    pub fn grad_output(&self, i: usize) -> Option<ValueId> {
        self.grads.get(i).copied().flatten()
    }

    /// How many outputs the forward node has.
    pub fn num_outputs(&self) -> usize {
        self.outputs.len()
    }

    /// The gradient of the forward node's first output, or `None` when the node is the
    /// root of the backward pass and seeds its own gradient (cross-entropy).
    pub fn grad_y_if_any(&self) -> Option<ValueId> {
        self.grad_y
    }

    /// How many inputs the forward node has.
    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }

    /// The static shape of `v`.
    pub fn shape(&self, v: ValueId) -> Vec<usize> {
        self.recorder.value_info(v).shape.clone()
    }

    /// The dtype of `v`.
    pub fn value_dtype(&self, v: ValueId) -> DType {
        self.recorder.value_info(v).dtype
    }

    /// The dtype of the forward node's first output (the gradients' dtype).
    pub fn dtype(&self) -> DType {
        self.recorder.value_info(self.outputs[0]).dtype
    }

    /// Whether a gradient must flow to `v`.
    pub fn needs_grad(&self, v: ValueId) -> bool {
        self.recorder.needs_grad(v)
    }

    /// Records a backward node and returns its new outputs (name stems `&str` or
    /// `String`).
    pub fn record<N: AsRef<str>>(
        &mut self,
        op: impl NodeOp,
        inputs: Vec<ValueId>,
        outputs: Vec<(N, Vec<usize>, DType)>,
        flops: u64,
    ) -> Vec<ValueId> {
        let outputs = outputs
            .into_iter()
            .map(|(n, s, d)| (n.as_ref().to_string(), s, d))
            .collect();
        self.recorder.record(Arc::new(op), inputs, outputs, flops)
    }

    /// Records `op` as the one node that makes input 0's gradient: one output `name`,
    /// input 0's shape in the gradients' dtype, contributed to input 0 where it needs one.
    pub fn record_input_grad(
        &mut self,
        op: impl NodeOp,
        inputs: Vec<ValueId>,
        name: &str,
        flops: u64,
    ) -> Result<()> {
        let shape = self.shape(self.input(0));
        let g = self.record(op, inputs, vec![(name, shape, self.dtype())], flops);
        self.contribute_to_inputs(&g);
        Ok(())
    }

    /// Records `op` as a node that makes a gradient of `v`: one output `name`, `v`'s
    /// shape in the gradients' dtype, contributed to `v`.
    pub fn record_grad_of(
        &mut self,
        v: ValueId,
        op: impl NodeOp,
        inputs: Vec<ValueId>,
        name: &str,
        flops: u64,
    ) {
        let shape = self.shape(v);
        let g = self.record(op, inputs, vec![(name, shape, self.dtype())], flops);
        self.contribute(v, g[0]);
    }

    /// Adds `grad` to the gradient of `v` (summed with the value's other contributions).
    pub fn contribute(&mut self, v: ValueId, grad: ValueId) {
        if self.contributions.len() <= v.0 {
            self.contributions.resize(v.0 + 1, Vec::new());
        }
        self.contributions[v.0].push(grad);
    }

    /// [`contribute`](BackwardCtx::contribute) `grads[i]` to input `i` of the forward
    /// node, for every input in `0..grads.len()` that needs a gradient.
    pub fn contribute_to_inputs(&mut self, grads: &[ValueId]) {
        for (i, g) in grads.iter().enumerate() {
            let v = self.input(i);
            if self.needs_grad(v) {
                self.contribute(v, *g);
            }
        }
    }
}
