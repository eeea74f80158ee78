//! Synchronised batch norm (PyTorch's `SyncBatchNorm`) for data-parallel training: the
//! statistics, and the sums in the backward pass, are taken over every rank's shard, so
//! the replicas train exactly as one process on the whole batch, batch-norm statistics
//! included. Made by [`Graph::apply_data_parallel_with`](crate::Graph::apply_data_parallel_with)
//! from the training batch norms (fused with ReLU or not); never recorded by the builder.
//! Kernels in `wick_ops::batchnorm::sync`; the collectives go through the graph's
//! [`CommQueue`], in graph order on every rank.

use std::sync::Arc;

use candle_core::Tensor;

use wick_ops::batchnorm::sync::{self, GlobalGradSums, GlobalStats};
use wick_ops::batchnorm::BatchNorm2dParams;
use wick_ops::{Kernel, OpError};

use super::batchnorm::{grads, train_outputs};
use crate::collective::CommQueue;
use crate::ir::{arg, Inputs, KernelResult, NodeOp};

const OP: &str = "sync_batch_norm";

/// Batch norm forward with the statistics of every rank's shard (two small
/// all-reduces: the sums, then the centred squares), then ReLU with `relu`. in and out as
/// [`BatchNormTrain`](super::batchnorm::BatchNormTrain).
#[derive(Debug)]
pub struct SyncBatchNormTrain {
    /// eps and momentum.
    pub params: BatchNorm2dParams,
    /// Whether a ReLU follows in the same node (it replaced a fused batch norm + ReLU).
    pub relu: bool,
    /// The graph's collectives.
    pub queue: Arc<CommQueue>,
}

/// The backward of [`SyncBatchNormTrain`]: the input gradient from the sums of Σdy and
/// Σdy·x̂ over every rank (one small all-reduce). in: grad_y, x, weight, mean, inv_std (with
/// `relu`: grad_z, z, x, weight, mean, inv_std); out: grad_x, grad_weight, grad_bias.
#[derive(Debug)]
pub struct SyncBatchNormTrainBackward {
    /// Whether the forward node had a fused ReLU (its output's mask applies first).
    pub relu: bool,
    /// The graph's collectives.
    pub queue: Arc<CommQueue>,
}

/// Sums `local` (per-channel values, then the count last) over the ranks.
fn sum_over_ranks(queue: &CommQueue, mut local: Vec<f32>, what: &str) -> Result<Vec<f32>, OpError> {
    queue
        .all_reduce_now(&mut local, what)
        .map_err(|e| wick_ops::invalid!(OP, "{what} on {}: {e}", queue.who()))?;
    Ok(local)
}

/// Counts travel as two f32 parts below 2^12 each, so their sums stay exact in f32 up
/// to 2^36 values per channel over all ranks.
const COUNT_PART: usize = 1 << 12;

/// `values` with `count` appended, as one collective's buffer.
fn with_count(values: Vec<f32>, count: usize) -> Vec<f32> {
    let mut v = values;
    v.push((count / COUNT_PART) as f32);
    v.push((count % COUNT_PART) as f32);
    v
}

/// The per-channel part and the count of a summed buffer.
fn split_count(mut v: Vec<f32>) -> (Vec<f32>, usize) {
    let low = v.pop().unwrap_or(0.0).round() as usize;
    let high = v.pop().unwrap_or(0.0).round() as usize;
    (v, high * COUNT_PART + low)
}

/// `local`'s per-channel values and `x`'s count per channel, each summed over the ranks.
fn sum_with_count(
    queue: &CommQueue,
    local: Vec<f32>,
    x: &Tensor,
    what: &str,
) -> Result<(Vec<f32>, usize), OpError> {
    let local = with_count(local, sync::count_per_channel(x)?);
    Ok(split_count(sum_over_ranks(queue, local, what)?))
}

impl NodeOp for SyncBatchNormTrain {
    fn kernel(&self) -> Kernel {
        Kernel::SyncBatchNormForwardTraining
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let a = |i| arg(inputs, i, OP);
        let x = a(0)?;
        let local = sync::to_host(&sync::channel_sums(x)?)?;
        let (sums, count) = sum_with_count(&self.queue, local, x, "the batch-norm sums")?;
        let mean: Vec<f32> = sums.iter().map(|s| s / count.max(1) as f32).collect();
        let mean = sync::from_host(&mean, x)?;
        let squares = sync::to_host(&sync::centered_square_sums(x, &mean)?)?;
        let squares = sum_over_ranks(&self.queue, squares, "the batch-norm squares")?;
        let var: Vec<f32> = squares.iter().map(|s| s / count.max(1) as f32).collect();
        let stats = GlobalStats {
            mean,
            var: sync::from_host(&var, x)?,
            count,
        };
        let o = sync::train_from_stats(
            x,
            [a(1)?, a(2)?, a(3)?, a(4)?],
            &self.params,
            &stats,
            self.relu,
        )?;
        Ok(train_outputs(o))
    }
}

impl NodeOp for SyncBatchNormTrainBackward {
    fn kernel(&self) -> Kernel {
        Kernel::SyncBatchNormBackward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let a = |i| arg(inputs, i, OP);
        let (gy, relu_out, first) = if self.relu {
            (a(0)?, Some(a(1)?), 2)
        } else {
            (a(0)?, None, 1)
        };
        let [x, w, mean, inv_std] = [a(first)?, a(first + 1)?, a(first + 2)?, a(first + 3)?];
        let gy = sync::masked_grad(gy, relu_out)?;
        let (sum_dy, sum_dy_xhat) = sync::backward_sums(&gy, x, mean, inv_std)?;
        let mut local = sync::to_host(&sum_dy)?;
        let c = local.len();
        local.extend(sync::to_host(&sum_dy_xhat)?);
        let what = "the batch-norm gradient sums";
        let (sums, count) = sum_with_count(&self.queue, local, x, what)?;
        let global = GlobalGradSums {
            sum_dy: sync::from_host(&sums[..c], x)?,
            sum_dy_xhat: sync::from_host(&sums[c..], x)?,
            count,
        };
        let g = sync::backward_from_sums(&gy, x, w, mean, inv_std, (sum_dy, sum_dy_xhat), &global)?;
        Ok(grads(g))
    }
}
