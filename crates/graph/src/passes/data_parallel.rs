//! The data-parallel pass: every gradient the optimizer reads is averaged over the ranks
//! before it is applied. Gradients are grouped into buckets of about `bucket_bytes` (PyTorch
//! DDP's idea, 25 MB by default there) in the order backward produces them. Each bucket's
//! [`DistAllReduce`] node runs right after the node that produces its last gradient and
//! starts the sum on the communication thread, so it overlaps the rest of backward; its
//! [`DistWait`] node, at the end of backward, waits for it.
//!
//! With [`DataParallelOptions::sync_batch_norm`], the training batch norms become
//! [`SyncBatchNormTrain`] (statistics over every rank's shard, as PyTorch's
//! `SyncBatchNorm`); without it their statistics stay per rank, as in PyTorch DDP.

use std::collections::HashMap;
use std::sync::Arc;
use wick_ops::Kernel;

use super::Uses;
use crate::collective::{CommQueue, Communicator};
use crate::error::{GraphError, Result};
use crate::ir::Op;
use crate::ir::{Graph, Node, Origin, Phase, ValueId, ValueInfo, ValueKind};
use crate::ops::all_reduce::{DistAllReduce, DistWait};
use crate::ops::batchnorm::{BatchNormTrain, BatchNormTrainBackward};
use crate::ops::fused_train::BatchNormReluTrain;
use crate::ops::sync_batchnorm::{SyncBatchNormTrain, SyncBatchNormTrainBackward};

/// PyTorch DDP's default bucket size.
pub const DEFAULT_BUCKET_BYTES: u64 = 25 * 1024 * 1024;

/// How to make a training graph data-parallel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataParallelOptions {
    /// A bucket closes once it holds this many bytes of gradients.
    pub bucket_bytes: u64,
    /// Batch-norm statistics over every rank's shard (PyTorch's `SyncBatchNorm`) instead
    /// of per rank.
    pub sync_batch_norm: bool,
}

impl Default for DataParallelOptions {
    /// [`DEFAULT_BUCKET_BYTES`], batch-norm statistics per rank.
    fn default() -> Self {
        DataParallelOptions {
            bucket_bytes: DEFAULT_BUCKET_BYTES,
            sync_batch_norm: false,
        }
    }
}

/// One bucket the pass made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    /// The OP_ID of its [`DistAllReduce`] node (which starts the sum).
    pub op_id: usize,
    /// The OP_ID of its [`DistWait`] node (which waits for it).
    pub wait_op_id: usize,
    /// The gradients it averages, in the order backward produces them.
    pub gradients: Vec<ValueId>,
    /// Their bytes.
    pub bytes: u64,
}

/// What the pass made: the buckets, and the queue their collectives run through (with
/// their timings).
#[derive(Debug, Clone)]
pub struct DataParallel {
    /// The buckets, in the order their all-reduces start.
    pub buckets: Vec<Bucket>,
    /// The graph's collectives and their timings.
    pub queue: Arc<CommQueue>,
    /// Batch norms made synchronised (0 without [`DataParallelOptions::sync_batch_norm`]).
    pub sync_batch_norms: usize,
}

impl Graph {
    /// Makes this training graph data-parallel over `comm` with buckets of about
    /// `bucket_bytes` and per-rank batch-norm statistics: see
    /// [`apply_data_parallel_with`](Graph::apply_data_parallel_with).
    pub fn apply_data_parallel(
        &mut self,
        comm: Arc<dyn Communicator>,
        bucket_bytes: u64,
    ) -> Result<DataParallel> {
        let options = DataParallelOptions {
            bucket_bytes,
            ..DataParallelOptions::default()
        };
        self.apply_data_parallel_with(comm, &options)
    }

    /// Makes this training graph data-parallel over `comm`: every gradient an optimizer
    /// node reads is replaced by its mean over the ranks, computed by a [`DistAllReduce`]
    /// and a [`DistWait`] node per bucket. An error if the graph has no optimizer node,
    /// or was made data-parallel already.
    pub fn apply_data_parallel_with(
        &mut self,
        comm: Arc<dyn Communicator>,
        options: &DataParallelOptions,
    ) -> Result<DataParallel> {
        if self
            .nodes
            .iter()
            .any(|n| n.kernel() == Kernel::DistAllReduce)
        {
            return Err(GraphError::Usage(
                "apply_data_parallel: the graph is data-parallel already".into(),
            ));
        }
        let uses = Uses::of(self);
        // (producer OP_ID, gradient), by producer.
        let mut grads: Vec<(usize, ValueId)> = Vec::new();
        for node in &self.nodes {
            if node.kernel() == Kernel::SgdUpdate {
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
        let sizes: HashMap<ValueId, u64> = grads
            .iter()
            .map(|(_, g)| {
                let info = &self.values[g.0];
                let bytes =
                    info.shape.iter().product::<usize>() as u64 * info.dtype.size_in_bytes() as u64;
                (*g, bytes)
            })
            .collect();
        // Greedy buckets in production order; each closes once it holds bucket_bytes.
        let mut buckets: Vec<(usize, Vec<ValueId>, u64)> = Vec::new();
        for (producer, g) in grads {
            let open = buckets
                .last()
                .is_some_and(|b| b.2 < options.bucket_bytes.max(1));
            if !open {
                buckets.push((producer, Vec::new(), 0));
            }
            let b = buckets.last_mut().expect("a bucket was just opened");
            b.0 = b.0.max(producer);
            b.1.push(g);
            b.2 += sizes[&g];
        }
        let queue = Arc::new(CommQueue::new(comm, buckets.len()));
        let sync_batch_norms = if options.sync_batch_norm {
            self.synchronise_batch_norms(&queue)
        } else {
            0
        };
        // The averaged gradients, and the optimizer's inputs rewired to them.
        let mut mean_of = HashMap::new();
        let (mut starts, mut waits) = (Vec::new(), Vec::new());
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
            let node = |op: Op, outputs: Vec<ValueId>, flops: u64| Node {
                op,
                inputs: gs.clone(),
                outputs,
                phase: Phase::Backward,
                flops,
                origin: Origin::default(),
            };
            let elements = gs.iter().map(|g| sizes[g] / 4).sum();
            let (q, bucket) = (queue.clone(), i);
            starts.push((
                *after,
                node(Arc::new(DistAllReduce { queue: q, bucket }), Vec::new(), 0),
            ));
            let q = queue.clone();
            waits.push(node(
                Arc::new(DistWait { queue: q, bucket }),
                outputs,
                elements,
            ));
        }
        for node in &mut self.nodes {
            if node.kernel() == Kernel::SgdUpdate {
                node.inputs[1] = mean_of[&node.inputs[1]];
            }
        }
        // Each all-reduce starts right after its bucket's last producer (a backward node,
        // after every forward node, so forward OP_IDs do not move); the waits come at the
        // end of backward, right before the optimizer.
        let old = std::mem::take(&mut self.nodes);
        let mut made = Vec::with_capacity(buckets.len());
        let mut waited = Vec::with_capacity(buckets.len());
        let mut pending = starts.into_iter().peekable();
        let mut waits = Some(waits);
        for (i, node) in old.into_iter().enumerate() {
            if node.phase == Phase::Optimizer {
                for w in waits.take().into_iter().flatten() {
                    waited.push(self.nodes.len());
                    self.nodes.push(w);
                }
            }
            self.nodes.push(node);
            while pending.peek().is_some_and(|(after, _)| *after == i) {
                let (_, n) = pending.next().expect("peeked");
                made.push(self.nodes.len());
                self.nodes.push(n);
            }
        }
        Ok(DataParallel {
            buckets: buckets
                .into_iter()
                .zip(made.into_iter().zip(waited))
                .map(|((_, gradients, bytes), (op_id, wait_op_id))| Bucket {
                    op_id,
                    wait_op_id,
                    gradients,
                    bytes,
                })
                .collect(),
            queue,
            sync_batch_norms,
        })
    }

    /// Replaces every training batch norm (fused with ReLU or not) and its backward by
    /// the synchronised ones over `queue`; returns how many forward nodes it replaced.
    fn synchronise_batch_norms(&mut self, queue: &Arc<CommQueue>) -> usize {
        let mut made = 0;
        for node in &mut self.nodes {
            let queue = queue.clone();
            let op: Option<Op> = if let Some(bn) = node.op_as::<BatchNormTrain>() {
                made += 1;
                let params = bn.params;
                Some(Arc::new(SyncBatchNormTrain {
                    params,
                    relu: false,
                    queue,
                }))
            } else if let Some(bn) = node.op_as::<BatchNormReluTrain>() {
                made += 1;
                let params = bn.params;
                Some(Arc::new(SyncBatchNormTrain {
                    params,
                    relu: true,
                    queue,
                }))
            } else if node.op_as::<BatchNormTrainBackward>().is_some() {
                Some(Arc::new(SyncBatchNormTrainBackward { relu: false, queue }))
            } else if node.kernel() == Kernel::BatchNormReLUBackward {
                Some(Arc::new(SyncBatchNormTrainBackward { relu: true, queue }))
            } else {
                None
            };
            if let Some(op) = op {
                node.op = op;
            }
        }
        made
    }
}
