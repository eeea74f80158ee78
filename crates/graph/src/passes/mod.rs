//! Graph passes: rewrites of a recorded graph before it runs, Paddle-style. Each pass
//! matches subgraphs by pattern and replaces each with one fused node, and reports how
//! many it matched:
//!
//! ```text
//! --- Running IR pass [fold_batch_norm] --- detected 53 subgraphs
//! ```
//!
//! OP_IDs are the node indices after the passes. Inference passes:
//! - [`fold_batch_norm`](PassName::FoldBatchNorm): an inference batch norm after a
//!   bias-free convolution becomes that convolution's weights and bias (exact algebra,
//!   rounded once);
//! - [`conv_epilogue`](PassName::ConvEpilogue): the residual add and the ReLU after a
//!   fused convolution are applied as it writes its output;
//! - [`max_pool_values`](PassName::MaxPoolValues): a max pooling whose argmax indices
//!   nothing reads computes its values alone.
//!
//! Training passes (the same arithmetic as the unfused graph, bit for bit):
//! - [`batch_norm_relu`](PassName::BatchNormRelu): batch norm + ReLU forward in one
//!   output pass, and their backward with ReLU's mask read inside batch norm's;
//! - [`add_relu`](PassName::AddRelu): add + ReLU in one pass;
//! - [`multi_tensor_update`](PassName::MultiTensorUpdate): the SGD (or Adam) updates
//!   with equal settings as one node, one launch on CUDA (not in `default` on the CPU: it merges the
//!   per-layer optimizer rows).
//!
//! Each pass leaves a graph it has no pattern in as recorded.

mod add_relu;
mod batch_norm_relu;
mod conv_epilogue;
pub mod data_parallel;
mod fold_batch_norm;
mod max_pool_values;
pub mod multi_tensor_update;

use crate::ir::{Graph, Node, ValueId};
pub use crate::ir::{PassName, PassRecord, PassSet};

/// Runs `pass` over `graph`; returns the number of subgraphs it replaced.
fn run(pass: PassName, graph: &mut Graph) -> usize {
    match pass {
        PassName::FoldBatchNorm => fold_batch_norm::run(graph),
        PassName::ConvEpilogue => conv_epilogue::run(graph),
        PassName::MaxPoolValues => max_pool_values::run(graph),
        PassName::BatchNormRelu => batch_norm_relu::run(graph),
        PassName::AddRelu => add_relu::run(graph),
        PassName::MultiTensorUpdate => multi_tensor_update::run(graph),
    }
}

impl Graph {
    /// Runs the selected passes in pipeline order, logs each (`tracing`, info) and keeps
    /// their records ([`Graph::passes`]). Nodes are renumbered: OP_IDs are assigned after
    /// the passes.
    pub fn apply_passes(&mut self, set: PassSet) -> &[PassRecord] {
        for pass in set.passes() {
            let subgraphs = run(pass, self);
            let record = PassRecord { pass, subgraphs };
            tracing::info!("{record}");
            self.passes.push(record);
        }
        &self.passes
    }

    /// The passes that ran on this graph, in order.
    pub fn passes(&self) -> &[PassRecord] {
        &self.passes
    }
}

/// Who reads and who writes each value, for pattern matching.
pub(crate) struct Uses {
    /// For each value, the nodes that read it, in order.
    pub readers: Vec<Vec<usize>>,
    /// For each value, the node that writes it last (its producer for intermediates).
    pub writer: Vec<Option<usize>>,
}

impl Uses {
    pub(crate) fn of(graph: &Graph) -> Self {
        let mut readers = vec![Vec::new(); graph.values.len()];
        let mut writer = vec![None; graph.values.len()];
        for (i, node) in graph.nodes.iter().enumerate() {
            for v in &node.inputs {
                readers[v.0].push(i);
            }
            for v in &node.outputs {
                writer[v.0] = Some(i);
            }
        }
        Uses { readers, writer }
    }

    /// The one node that reads `v`, if exactly one does and `v` is not a graph output.
    pub(crate) fn only_reader(&self, graph: &Graph, v: ValueId) -> Option<usize> {
        match self.readers[v.0].as_slice() {
            [one] if !graph.outputs.contains(&v) => Some(*one),
            _ => None,
        }
    }
}

/// Drops the nodes marked in `removed` and renumbers the rest; backward nodes' links to
/// their forward node follow the renumbering.
pub(crate) fn remove_nodes(graph: &mut Graph, removed: &[bool]) {
    let mut new_id = vec![None; graph.nodes.len()];
    let mut next = 0;
    for (i, gone) in removed.iter().enumerate() {
        if !gone {
            new_id[i] = Some(next);
            next += 1;
        }
    }
    let nodes: Vec<Node> = std::mem::take(&mut graph.nodes)
        .into_iter()
        .zip(removed)
        .filter(|(_, gone)| !**gone)
        .map(|(mut node, _)| {
            node.origin.forward_op = node.origin.forward_op.and_then(|f| new_id[f]);
            node
        })
        .collect();
    graph.nodes = nodes;
}
