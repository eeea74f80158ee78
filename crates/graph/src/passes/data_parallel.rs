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

use super::rewrite::Uses;
use crate::collective::{CommQueue, Communicator};
use crate::error::{GraphError, Result};
use crate::ir::Op;
use crate::ir::{Graph, Node, Origin, Phase, ValueId, ValueInfo, ValueKind};
use crate::nodes::all_reduce::{DistAllReduce, DistWait};
use crate::nodes::batchnorm::{BatchNormTrain, BatchNormTrainBackward};
use crate::nodes::fused_train::BatchNormReluTrain;
use crate::nodes::sync_batchnorm::{SyncBatchNormTrain, SyncBatchNormTrainBackward};

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
        if let Some(k) = self.accumulate {
            return Err(GraphError::Usage(format!(
                "data parallelism with gradient accumulation over {k} micro-batches is not supported yet: accumulate or go data-parallel"
            )));
        }
        if self
            .nodes
            .iter()
            .any(|n| n.kernel() == Kernel::DistAllReduce)
        {
            return Err(GraphError::Usage(
                "apply_data_parallel: the graph is data-parallel already".into(),
            ));
        }
        let grads = self.optimizer_gradients()?;
        let sizes: HashMap<ValueId, u64> = grads
            .iter()
            .map(|(_, g)| {
                let info = &self.values[g.0];
                let bytes =
                    info.shape.iter().product::<usize>() as u64 * info.dtype.size_in_bytes() as u64;
                (*g, bytes)
            })
            .collect();
        let buckets = plan_buckets(grads, &sizes, options.bucket_bytes);
        let queue = Arc::new(CommQueue::new(comm, buckets.len()));
        let sync_batch_norms = if options.sync_batch_norm {
            self.synchronise_batch_norms(&queue)
        } else {
            0
        };
        let (starts, waits) = self.collective_nodes(&buckets, &sizes, &queue);
        let (made, waited) = self.insert_collectives(starts, waits);
        Ok(DataParallel {
            buckets: buckets
                .into_iter()
                .zip(made.into_iter().zip(waited))
                .map(|(b, (op_id, wait_op_id))| Bucket {
                    op_id,
                    wait_op_id,
                    gradients: b.gradients,
                    bytes: b.bytes,
                })
                .collect(),
            queue,
            sync_batch_norms,
        })
    }

    /// Every gradient an optimizer node reads, with the OP_ID of the node that produces
    /// it, in production order.
    fn optimizer_gradients(&self) -> Result<Vec<(usize, ValueId)>> {
        let uses = Uses::of(self);
        let mut grads: Vec<(usize, ValueId)> = Vec::new();
        for node in &self.nodes {
            for g in gradient_inputs(node) {
                let producer = uses.writer[g.0].ok_or_else(|| {
                    GraphError::Usage(format!(
                        "apply_data_parallel: gradient `{}` has no producer",
                        self.values[g.0].name
                    ))
                })?;
                // Clipped gradients come from the clipping node, which reads the
                // backward pass's own.
                if self.nodes[producer].phase == Phase::Optimizer {
                    continue;
                }
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
        Ok(grads)
    }

    /// For each bucket, its all-reduce (with the OP_ID it must follow) and its wait, whose
    /// outputs are the gradients' means; the optimizer's inputs are rewired to the means.
    fn collective_nodes(
        &mut self,
        buckets: &[PlannedBucket],
        sizes: &HashMap<ValueId, u64>,
        queue: &Arc<CommQueue>,
    ) -> (Vec<(usize, Node)>, Vec<Node>) {
        let mut mean_of = HashMap::new();
        let (mut starts, mut waits) = (Vec::new(), Vec::new());
        for (bucket, b) in buckets.iter().enumerate() {
            let gs = &b.gradients;
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
            let start = DistAllReduce {
                queue: queue.clone(),
                bucket,
            };
            starts.push((b.after, node(Arc::new(start), Vec::new(), 0)));
            let wait = DistWait {
                queue: queue.clone(),
                bucket,
            };
            waits.push(node(Arc::new(wait), outputs, elements));
        }
        for node in &mut self.nodes {
            if !gradient_inputs(node).is_empty() {
                for v in &mut node.inputs {
                    if let Some(mean) = mean_of.get(v) {
                        *v = *mean;
                    }
                }
            }
        }
        (starts, waits)
    }

    /// Places each all-reduce right after its bucket's last producer (a backward node,
    /// after every forward node, so forward OP_IDs do not move) and the waits at the end
    /// of backward, right before the optimizer. Returns their OP_IDs.
    fn insert_collectives(
        &mut self,
        starts: Vec<(usize, Node)>,
        waits: Vec<Node>,
    ) -> (Vec<usize>, Vec<usize>) {
        let old = std::mem::take(&mut self.nodes);
        let mut made = Vec::with_capacity(starts.len());
        let mut waited = Vec::with_capacity(waits.len());
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
        (made, waited)
    }

    /// Replaces every training batch norm (fused with ReLU or not) and its backward by
    /// the synchronised ones over `queue`; returns how many forward nodes it replaced.
    fn synchronise_batch_norms(&mut self, queue: &Arc<CommQueue>) -> usize {
        let mut made = 0;
        for node in &mut self.nodes {
            let queue = queue.clone();
            // A training batch norm's settings and whether it has ReLU fused.
            let forward = match node.op_as::<BatchNormTrain>() {
                Some(bn) => Some((bn.params, false)),
                None => node
                    .op_as::<BatchNormReluTrain>()
                    .map(|bn| (bn.params, true)),
            };
            let backward_relu = if node.op_as::<BatchNormTrainBackward>().is_some() {
                Some(false)
            } else {
                (node.kernel() == Kernel::BatchNormReLUBackward).then_some(true)
            };
            let op: Option<Op> = match (forward, backward_relu) {
                (Some((params, relu)), _) => {
                    made += 1;
                    Some(Arc::new(SyncBatchNormTrain {
                        params,
                        relu,
                        queue,
                    }))
                }
                (None, Some(relu)) => Some(Arc::new(SyncBatchNormTrainBackward { relu, queue })),
                (None, None) => None,
            };
            if let Some(op) = op {
                node.op = op;
            }
        }
        made
    }
}

/// A bucket as planned: its gradients, their bytes, and the OP_ID of the last one's
/// producer (its all-reduce follows that node).
struct PlannedBucket {
    after: usize,
    gradients: Vec<ValueId>,
    bytes: u64,
}

/// Greedy buckets in production order; each closes once it holds `bucket_bytes`.
fn plan_buckets(
    grads: Vec<(usize, ValueId)>,
    sizes: &HashMap<ValueId, u64>,
    bucket_bytes: u64,
) -> Vec<PlannedBucket> {
    let mut buckets: Vec<PlannedBucket> = Vec::new();
    for (producer, g) in grads {
        let open = buckets
            .last()
            .is_some_and(|b| b.bytes < bucket_bytes.max(1));
        if !open {
            buckets.push(PlannedBucket {
                after: producer,
                gradients: Vec::new(),
                bytes: 0,
            });
        }
        let b = buckets.last_mut().expect("a bucket was just opened");
        b.after = b.after.max(producer);
        b.gradients.push(g);
        b.bytes += sizes[&g];
    }
    buckets
}

/// The backward pass's gradients a node reads: each gradient an update node names
/// ([`NodeOp::param_slots`](crate::NodeOp::param_slots)) unless clipping or loss scaling
/// produced it, every input of the clipping node, or the gradients a grad scaler's
/// unscale reads (so every rank checks the same, averaged gradients).
fn gradient_inputs(node: &crate::ir::Node) -> Vec<ValueId> {
    if node.kernel() == Kernel::ClipGradNorm {
        return node.inputs.clone();
    }
    if let Some(u) = node.op_as::<crate::nodes::optim::UnscaleGradients>() {
        return node.inputs[..u.gradients].to_vec();
    }
    node.op
        .param_slots()
        .iter()
        .map(|s| node.inputs[s.grad])
        .collect()
}
