//! The graph: its nodes in OP_ID order and the values they read and write.
//!
//! A graph is recorded once and executed many times. Every op of a training iteration
//! (forward ops, the loss, the backward ops and the optimizer's updates) is a [`Node`];
//! a node's `OP_ID` is its index in recording order. Shapes are static: they are checked
//! and inferred when a node is recorded.

use wick_ops::Kernel;

use super::node_op::Op;
use super::pass_set::PassRecord;
use super::value::{Origin, ValueId, ValueInfo, ValueKind};
use crate::phase::Phase;

/// One recorded op: what it runs, on which values, in which phase.
#[derive(Debug, Clone)]
pub struct Node {
    /// The op and its settings (one of the node kinds in [`nodes`](crate::nodes)).
    pub op: Op,
    /// The values it reads.
    pub inputs: Vec<ValueId>,
    /// The values it writes (intermediates it creates, or persistent state it updates).
    pub outputs: Vec<ValueId>,
    /// Its phase.
    pub phase: Phase,
    /// Floating-point operations of one execution.
    pub flops: u64,
    /// Where the node comes from: its layer, the forward node it differentiates, the
    /// parameter it updates.
    pub origin: Origin,
}

impl Node {
    /// The kernel the node runs: what passes and hooks match on.
    pub fn kernel(&self) -> Kernel {
        self.op.kernel()
    }

    /// The op's settings as node kind `T` (`node.op_as::<ops::conv::Conv2d>()`), if it is one.
    pub fn op_as<T: 'static>(&self) -> Option<&T> {
        self.op.as_any().downcast_ref::<T>()
    }
}

/// A recorded computation graph. Build it with [`GraphBuilder`](crate::GraphBuilder) and
/// run it with an [`Executor`](crate::Executor).
#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub(crate) values: Vec<ValueInfo>,
    pub(crate) nodes: Vec<Node>,
    /// Values the caller reads after an iteration (loss, logits): never freed early.
    pub(crate) outputs: Vec<ValueId>,
    /// The passes that rewrote it (see [`Graph::apply_passes`]).
    pub(crate) passes: Vec<PassRecord>,
    /// Micro-batches per update when the optimizer accumulates gradients: its updates
    /// run on every `k`-th step only.
    pub(crate) accumulate: Option<usize>,
    /// The precision policy its products were recorded under.
    pub(crate) precision: super::precision::Precision,
    /// Its dynamic loss scaling, if any.
    pub(crate) grad_scaler: Option<super::loss_scale::ScalerValues>,
    /// The tensors of its [`ValueKind::Constant`] values, on the host.
    pub(crate) constants: Vec<(ValueId, candle_core::Tensor)>,
}

impl Graph {
    /// The precision policy its products were recorded under.
    pub fn precision(&self) -> super::precision::Precision {
        self.precision
    }

    /// Its dynamic loss scaling's values, when
    /// [`set_grad_scaler`](crate::GraphBuilder::set_grad_scaler) turned it on.
    pub fn grad_scaler(&self) -> Option<&super::loss_scale::ScalerValues> {
        self.grad_scaler.as_ref()
    }

    /// Micro-batches per optimizer update (1 unless the optimizer accumulates).
    pub fn accumulation_steps(&self) -> usize {
        self.accumulate.unwrap_or(1)
    }

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

    /// The optimizer's state: the state values that optimizer-phase nodes update (momentum
    /// buffers, Adam's moments), in the order the nodes run. A parameter's own value is
    /// not included.
    pub fn optimizer_state(&self) -> Vec<ValueId> {
        let mut out = Vec::new();
        for n in self.nodes.iter().filter(|n| n.phase == Phase::Optimizer) {
            for v in &n.outputs {
                if self.values[v.0].kind == ValueKind::State && !out.contains(v) {
                    out.push(*v);
                }
            }
        }
        out
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

    /// The most memory the graph's values hold at once when run by the
    /// [`Executor`](crate::Executor): [`memory_plan`](Graph::memory_plan)'s peak. `None`
    /// when a size overflows (an absurd shape).
    pub fn peak_bytes(&self) -> Option<u128> {
        let peak = self.memory_plan().peak_bytes;
        (peak != u64::MAX).then_some(peak as u128)
    }

    /// The first node writing each value, by value index: `None` for a value no node
    /// writes (an input, or a parameter or state the graph never updates).
    pub(crate) fn first_writers(&self) -> Vec<Option<usize>> {
        let mut writers = vec![None; self.values.len()];
        for (op_id, node) in self.nodes.iter().enumerate() {
            for v in &node.outputs {
                writers[v.0].get_or_insert(op_id);
            }
        }
        writers
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
}
