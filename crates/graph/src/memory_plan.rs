//! The memory a graph holds while the [`Executor`](crate::Executor) runs it: every
//! value's bytes, the live bytes after each node (the executor frees each intermediate
//! right after its last use), the peak, the node where it happens, and what the peak is
//! made of, with the kernels' scratch on the device. This is the prediction; the profiler
//! sets a counting allocator's measured peak beside it.

use serde::Serialize;

use wick_ops::DeviceKind;

use crate::ir::{Graph, Phase, ValueInfo, ValueKind};

/// What the bytes live at the peak are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct MemorySplit {
    /// Trainable parameters.
    pub parameters: u64,
    /// Optimizer state: momentum buffers, Adam's moments, accumulated gradients.
    pub optimizer_state: u64,
    /// Other persistent state: batch norm's running statistics.
    pub statistics: u64,
    /// The fed inputs (images, labels) and the graph's constants.
    pub inputs: u64,
    /// Values made by backward nodes: gradients of parameters and of activations.
    pub gradients: u64,
    /// Forward values a backward node still has to read: activations kept for backward.
    pub saved_for_backward: u64,
    /// Other forward values: made and freed within the forward pass (or kept as outputs).
    pub transient: u64,
    /// What graph passes' ops keep beside the graph's values: a folded batch norm's
    /// weights and bias, per fused convolution.
    #[serde(default)]
    pub pass_products: u64,
    /// The kernels' scratch, allocated once and lent to each kernel in turn: the largest
    /// any node's kernel takes on the device (wick's CUDA kernels; 0 on the CPU).
    #[serde(default)]
    pub kernel_workspace: u64,
}

impl MemorySplit {
    /// The sum of every part.
    pub fn total(&self) -> u64 {
        [
            self.parameters,
            self.optimizer_state,
            self.statistics,
            self.inputs,
            self.gradients,
            self.saved_for_backward,
            self.transient,
            self.pass_products,
            self.kernel_workspace,
        ]
        .iter()
        .fold(0u64, |a, b| a.saturating_add(*b))
    }
}

/// The predicted memory of one iteration.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryPlan {
    /// Bytes of every value, by value index (saturating at `u64::MAX`).
    pub value_bytes: Vec<u64>,
    /// Bytes live right after each node ran (its outputs made, nothing freed yet),
    /// persistent values included.
    pub live_after: Vec<u64>,
    /// The largest of `live_after`.
    pub peak_bytes: u64,
    /// The node right after which the peak happens (`None` for a graph without nodes).
    pub peak_op: Option<usize>,
    /// What the peak is made of.
    pub split: MemorySplit,
    /// The node whose kernel takes the largest scratch (`split.kernel_workspace`), if any.
    pub workspace_op: Option<usize>,
}

impl Graph {
    /// The memory the executor will hold running this graph on the CPU, node by node.
    pub fn memory_plan(&self) -> MemoryPlan {
        self.memory_plan_on(DeviceKind::Cpu)
    }

    /// The largest scratch any node's kernel takes on `device`, and that node.
    pub fn kernel_workspace(&self, device: DeviceKind) -> (u64, Option<usize>) {
        let mut largest = (0, None);
        for (op_id, node) in self.nodes.iter().enumerate() {
            let inputs: Vec<&ValueInfo> = node.inputs.iter().map(|v| &self.values[v.0]).collect();
            let bytes = node.op.workspace_bytes(&inputs, device);
            if bytes > largest.0 {
                largest = (bytes, Some(op_id));
            }
        }
        largest
    }

    /// The memory the executor will hold running this graph on `device`, node by node:
    /// on CUDA, the kernels' scratch is part of it.
    pub fn memory_plan_on(&self, device: DeviceKind) -> MemoryPlan {
        let value_bytes: Vec<u64> = self
            .values
            .iter()
            .map(|v| {
                v.shape.iter().fold(v.dtype.size_in_bytes() as u64, |a, d| {
                    a.saturating_mul(*d as u64)
                })
            })
            .collect();
        // The optimizer's state as its state dict has it (what optimizer nodes write:
        // momentum, Adam's moments, accumulated gradients), whatever the names.
        let mut optimizer_state = vec![false; self.values.len()];
        for v in self.optimizer_state() {
            optimizer_state[v.0] = true;
        }
        let mut resident = MemorySplit::default();
        for ((i, v), bytes) in self.values.iter().enumerate().zip(&value_bytes) {
            let part = match v.kind {
                ValueKind::Param => &mut resident.parameters,
                ValueKind::State if optimizer_state[i] => &mut resident.optimizer_state,
                ValueKind::State => &mut resident.statistics,
                ValueKind::Input | ValueKind::Constant => &mut resident.inputs,
                ValueKind::Intermediate => continue,
            };
            *part = part.saturating_add(*bytes);
        }
        for node in &self.nodes {
            let inputs: Vec<u64> = node.inputs.iter().map(|v| value_bytes[v.0]).collect();
            resident.pass_products = resident
                .pass_products
                .saturating_add(node.op.held_bytes(&inputs));
        }
        let workspace_op;
        (resident.kernel_workspace, workspace_op) = self.kernel_workspace(device);
        let (made_by, last_phase) = self.producers_and_last_readers();
        let frees = self.last_uses();
        let mut live: Vec<usize> = Vec::new();
        let mut made = vec![false; self.values.len()];
        let mut live_after = Vec::with_capacity(self.nodes.len());
        let (mut peak_bytes, mut peak_op, mut split) = (resident.total(), None, resident);
        for (op_id, node) in self.nodes.iter().enumerate() {
            for v in &node.outputs {
                if self.values[v.0].kind == ValueKind::Intermediate && !made[v.0] {
                    made[v.0] = true;
                    live.push(v.0);
                }
            }
            let now = live
                .iter()
                .fold(resident.total(), |a, v| a.saturating_add(value_bytes[*v]));
            live_after.push(now);
            if peak_op.is_none() || now > peak_bytes {
                peak_bytes = now;
                peak_op = Some(op_id);
                split = resident;
                for &v in &live {
                    let producer = made_by[v].map(|n| self.nodes[n].phase);
                    let part = match (producer, last_phase[v]) {
                        (Some(Phase::Forward), Some(Phase::Backward)) => {
                            &mut split.saved_for_backward
                        }
                        (Some(Phase::Forward), _) => &mut split.transient,
                        _ => &mut split.gradients,
                    };
                    *part = part.saturating_add(value_bytes[v]);
                }
            }
            live.retain(|v| !frees[op_id].iter().any(|f| f.0 == *v));
        }
        MemoryPlan {
            value_bytes,
            live_after,
            peak_bytes,
            peak_op,
            split,
            workspace_op,
        }
    }

    /// For each value: the node that first makes it, and the phase of the last node that
    /// reads it.
    fn producers_and_last_readers(&self) -> (Vec<Option<usize>>, Vec<Option<Phase>>) {
        let mut last_phase = vec![None; self.values.len()];
        for node in &self.nodes {
            for v in &node.inputs {
                last_phase[v.0] = Some(node.phase);
            }
        }
        (self.first_writers(), last_phase)
    }
}

#[cfg(test)]
mod tests {
    use candle_core::DType;

    use crate::builder::{GraphBuilder, Mode};

    #[test]
    fn two_relus_peak_after_the_second_with_both_outputs_live() {
        let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
        let x = b.input("x", &[2, 3, 4, 4], DType::F32).unwrap();
        let h = b.relu(x).unwrap();
        let y = b.relu(h).unwrap();
        b.output(y);
        let plan = b.finish().memory_plan();
        // 96 floats: 384 bytes each for the input and both outputs.
        assert_eq!(plan.live_after, vec![768, 1152]);
        assert_eq!((plan.peak_bytes, plan.peak_op), (1152, Some(1)));
        assert_eq!(plan.split.inputs, 384);
        assert_eq!(plan.split.transient, 768);
        assert_eq!(plan.split.total(), plan.peak_bytes);
    }
}
