//! The data-parallel pass: every gradient the optimizer reads is averaged over the ranks
//! before it is applied. Gradients are grouped into buckets of about `bucket_bytes` (PyTorch
//! DDP's idea, 25 MB by default there) in the order backward produces them, and each
//! bucket's [`DistAllReduce`] node runs right after the node that produces its last
//! gradient, so an engine that can overlap starts while the rest of backward runs.

use std::sync::Arc;

use super::Uses;
use crate::dist::Communicator;
use crate::error::{GraphError, Result};
use crate::ir::{Graph, Node, Origin, Phase, ValueId, ValueInfo, ValueKind};
use crate::ops::dist::DistAllReduce;
use crate::ops::optim::SgdUpdate;

/// PyTorch DDP's default bucket size.
pub const DEFAULT_BUCKET_BYTES: u64 = 25 * 1024 * 1024;

/// One bucket the pass made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    /// The OP_ID of its all-reduce node.
    pub op_id: usize,
    /// The gradients it averages, in the order backward produces them.
    pub gradients: Vec<ValueId>,
    /// Their bytes.
    pub bytes: u64,
}

impl Graph {
    /// Makes this training graph data-parallel over `comm`: every gradient an optimizer
    /// node reads is replaced by its mean over the ranks, computed by one
    /// [`DistAllReduce`] node per bucket of about `bucket_bytes`. Returns the buckets.
    /// An error if the graph has no optimizer node, or was made data-parallel already.
    pub fn apply_data_parallel(
        &mut self,
        comm: Arc<dyn Communicator>,
        bucket_bytes: u64,
    ) -> Result<Vec<Bucket>> {
        if self
            .nodes
            .iter()
            .any(|n| n.op_as::<DistAllReduce>().is_some())
        {
            return Err(GraphError::Usage(
                "apply_data_parallel: the graph is data-parallel already".into(),
            ));
        }
        let uses = Uses::of(self);
        // (producer OP_ID, gradient, the optimizer nodes reading it), by producer.
        let mut grads: Vec<(usize, ValueId)> = Vec::new();
        for node in &self.nodes {
            if node.op_as::<SgdUpdate>().is_some() {
                let g = node.inputs[1];
                let producer = uses.writer[g.0].ok_or_else(|| {
                    GraphError::Usage(format!(
                        "apply_data_parallel: gradient `{}` has no producer",
                        self.values[g.0].name
                    ))
                })?;
                if !grads.iter().any(|(_, v)| *v == g) {
                    grads.push((producer, g));
                }
            }
        }
        if grads.is_empty() {
            return Err(GraphError::Usage(
                "apply_data_parallel: no optimizer node reads a gradient (is this a training graph?)".into(),
            ));
        }
        grads.sort();
        let sizes: std::collections::HashMap<ValueId, u64> = grads
            .iter()
            .map(|(_, g)| {
                let info = &self.values[g.0];
                let bytes =
                    info.shape.iter().product::<usize>() as u64 * info.dtype.size_in_bytes() as u64;
                (*g, bytes)
            })
            .collect();
        let bytes_of = |v: ValueId| sizes[&v];
        // Greedy buckets in production order; each closes once it holds bucket_bytes.
        let mut buckets: Vec<(usize, Vec<ValueId>, u64)> = Vec::new();
        for (producer, g) in grads {
            let open = buckets.last().is_some_and(|b| b.2 < bucket_bytes.max(1));
            if !open {
                buckets.push((producer, Vec::new(), 0));
            }
            let b = buckets.last_mut().expect("a bucket was just opened");
            b.0 = b.0.max(producer);
            b.1.push(g);
            b.2 += bytes_of(g);
        }
        // The averaged gradients, and the optimizer's inputs rewired to them.
        let mut mean_of = std::collections::HashMap::new();
        let mut new_nodes: Vec<(usize, Node)> = Vec::new();
        for (i, (after, gs, _)) in buckets.iter().enumerate() {
            let mut outputs = Vec::with_capacity(gs.len());
            for g in gs {
                let info = self.values[g.0].clone();
                self.values.push(ValueInfo {
                    name: format!("{}.mean", info.name),
                    kind: ValueKind::Intermediate,
                    ..info
                });
                let m = ValueId(self.values.len() - 1);
                mean_of.insert(*g, m);
                outputs.push(m);
            }
            let node = Node {
                op: Arc::new(DistAllReduce {
                    comm: comm.clone(),
                    bucket: i,
                }),
                inputs: gs.clone(),
                outputs,
                phase: Phase::Backward,
                flops: gs.iter().map(|g| bytes_of(*g) / 4).sum(),
                origin: Origin::default(),
            };
            new_nodes.push((*after, node));
        }
        for node in &mut self.nodes {
            if node.op_as::<SgdUpdate>().is_some() {
                node.inputs[1] = mean_of[&node.inputs[1]];
            }
        }
        // Insert each all-reduce right after its bucket's last producer. Producers are
        // backward nodes, after every forward node, so forward OP_IDs do not move.
        let old = std::mem::take(&mut self.nodes);
        let mut made = Vec::with_capacity(buckets.len());
        let mut pending = new_nodes.into_iter().peekable();
        for (i, node) in old.into_iter().enumerate() {
            self.nodes.push(node);
            while pending.peek().is_some_and(|(after, _)| *after == i) {
                let (_, n) = pending.next().expect("peeked");
                made.push(self.nodes.len());
                self.nodes.push(n);
            }
        }
        Ok(buckets
            .into_iter()
            .zip(made)
            .map(|((_, gradients, bytes), op_id)| Bucket {
                op_id,
                gradients,
                bytes,
            })
            .collect())
    }
}
