//! Gradient accumulation in the graph: each run adds its gradient, divided by `k`, to an
//! accumulator (`<param>.grad_accum`, optimizer state), and the updates read the
//! accumulator and run on every `k`-th step only ([`OptimizerConfig::accumulate`]).
//! Over `k` micro-batches of a mean loss the update is that of one `k`-times batch.
//!
//! [`OptimizerConfig::accumulate`]: super::OptimizerConfig::accumulate

use candle_core::Tensor;
use wick_ops::{Kernel, OpError};

use crate::ir::{arg, one, Inputs, KernelResult, NodeOp};

/// Adds one micro-batch's gradient to its accumulator. in: step, grad, accumulator (unset
/// before the first step); out: the accumulator, `grad / k` on the first micro-batch of
/// a cycle (`step % k == 0`) and `accumulator + grad / k` after.
#[derive(Debug, Clone, PartialEq)]
pub struct AccumulateMicroBatch {
    /// Micro-batches per update.
    pub k: usize,
}

impl NodeOp for AccumulateMicroBatch {
    fn kernel(&self) -> Kernel {
        Kernel::AccumulateMicroBatch
    }

    fn optional_input(&self, i: usize) -> bool {
        i == 2
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        const OP: &str = "accumulate_gradients";
        let step = step_of(arg(inputs, 0, OP)?)?;
        let g = wick_ops::broadcast::scale(arg(inputs, 1, OP)?, 1.0 / self.k as f64)?;
        match inputs.get(2).copied().flatten() {
            Some(acc) if step % self.k as u64 != 0 => one(wick_ops::elementwise::add(acc, &g)?),
            _ => one(g),
        }
    }
}

/// The optimizer's own step count under accumulation: `step / k`, the updates done
/// before this one (Adam's bias correction counts updates, not micro-batches, as
/// `torch.optim` does). in: step; out: the count (0-dim `i64`).
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateCount {
    /// Micro-batches per update.
    pub k: usize,
}

impl NodeOp for UpdateCount {
    fn kernel(&self) -> Kernel {
        Kernel::UpdateCount
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let step = arg(inputs, 0, "accumulate_gradients")?;
        let count = (step_of(step)? / self.k as u64) as i64;
        one(Tensor::new(count, step.device())
            .map_err(|e| OpError::candle("accumulate_gradients", e))?)
    }
}

/// The step counter's value.
pub(crate) fn step_of(step: &Tensor) -> Result<u64, OpError> {
    let v = step
        .to_dtype(candle_core::DType::I64)
        .and_then(|s| s.to_scalar::<i64>())
        .map_err(|e| OpError::candle("step", e))?;
    u64::try_from(v).map_err(|_| wick_ops::invalid!("step", "the step counter is negative: {v}"))
}
