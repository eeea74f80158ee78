//! Which nodes a run skips: the updates of a step that only accumulates gradients, and
//! the parameter updates of a step whose loss scaling found a non-finite gradient.

use super::Executor;
use crate::error::{GraphError, Result};
use crate::ir::Phase;

impl Executor {
    /// Whether this run only accumulates gradients: the optimizer accumulates over `k`
    /// micro-batches and the step counter is not at a cycle's last one.
    pub(super) fn accumulating(&self) -> Result<bool> {
        let k = self.graph.accumulation_steps();
        if k == 1 {
            return Ok(false);
        }
        let step = self.id(crate::nodes::dropout::STEP_INPUT)?;
        let t = self.get_id(step)?.ok_or_else(|| {
            GraphError::Usage(format!(
                "value `{}` has not been set or fed: the step counter decides which of the {k} accumulated steps updates",
                crate::nodes::dropout::STEP_INPUT
            ))
        })?;
        let step =
            crate::nodes::optim::accumulate::step_of(t).map_err(|source| GraphError::Build {
                op: "accumulate_gradients",
                layer: None,
                source,
            })?;
        Ok(step % k as u64 != k as u64 - 1)
    }

    /// Whether node `op_id` is a grad scaler's unscale that found a non-finite gradient
    /// in this run.
    pub(super) fn found_non_finite_gradient(&self, op_id: usize) -> Result<bool> {
        if self.graph.nodes[op_id].kernel() != wick_ops::Kernel::UnscaleGradients {
            return Ok(false);
        }
        let found = self.graph.grad_scaler().and_then(|s| s.found_non_finite);
        let Some(t) = found.and_then(|v| self.slots[v.0].as_ref()) else {
            return Ok(false);
        };
        let flag = t
            .to_scalar::<u8>()
            .map_err(|e| GraphError::Usage(format!("the grad scaler's flag: {e}")))?;
        Ok(flag != 0)
    }

    /// Whether node `op_id` is an optimizer update that gradient accumulation defers
    /// (every optimizer-phase node but the accumulation itself).
    pub(super) fn is_update(&self, op_id: usize) -> bool {
        let node = &self.graph.nodes[op_id];
        node.phase == Phase::Optimizer && node.op.kernel() != wick_ops::Kernel::AccumulateMicroBatch
    }
}
