//! Adam's and AdamW's update nodes: one parameter's fused update ([`AdamUpdate`]) and the
//! same update of many parameters in one node ([`AdamUpdateMultiTensor`]). Kernels in
//! `wick_ops::optim::adam`.

use std::sync::Arc;

use wick_ops::optim::adam;
use wick_ops::{AdamParams, DeviceKind, Kernel};

use super::{checked, param_sizes};
use crate::error::Result;
use crate::ir::{arg, Inputs, KernelResult, NodeOp, Op, ParamSlots, ValueInfo};

/// One parameter's fused Adam/AdamW update. in: param, grad, step (the 0-dim count of
/// steps done before this one), `[exp_avg]`, `[exp_avg_sq]`; out: param, exp_avg,
/// exp_avg_sq, updated.
#[derive(Debug, Clone, PartialEq)]
pub struct AdamUpdate {
    /// lr, betas, eps, weight decay and whether it is decoupled (AdamW).
    pub params: AdamParams,
}

impl NodeOp for AdamUpdate {
    fn kernel(&self) -> Kernel {
        Kernel::AdamUpdate
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let param = arg(inputs, 0, "adam")?;
        let grad = arg(inputs, 1, "adam")?;
        let done = wick_ops::dropout::read_step(arg(inputs, 2, "adam")?)
            .map_err(|e| wick_ops::invalid!("adam", "the step input: {e}"))?;
        let state = |i: usize| inputs.get(i).copied().flatten();
        let (p, m, v) = adam::adam_step(param, grad, state(3), state(4), done + 1, &self.params)?;
        Ok(vec![Some(p), Some(m), Some(v)])
    }

    /// The moments are empty before the first step.
    fn optional_input(&self, i: usize) -> bool {
        i >= 3
    }

    /// param, grad, then (after the step counter, input 2) the two moments.
    fn param_slots(&self) -> Vec<ParamSlots> {
        vec![ParamSlots {
            param: 0,
            grad: 1,
            state: vec![3, 4],
        }]
    }

    fn with_learning_rate(&self, lr: f64) -> Option<Result<Op>> {
        let params = checked(
            "adam",
            AdamParams { lr, ..self.params },
            AdamParams::validate,
        );
        Some(params.map(|params| Arc::new(AdamUpdate { params }) as Op))
    }
}

/// The same Adam or AdamW update of many parameters in one node, made by the
/// `multi_tensor_update` pass from [`AdamUpdate`] nodes
/// with equal settings: one launch for all of them on CUDA. in: the step counter, then per
/// parameter `param, grad, [exp_avg], [exp_avg_sq]`; out: per parameter `param, exp_avg,
/// exp_avg_sq`.
#[derive(Debug, Clone)]
pub struct AdamUpdateMultiTensor {
    /// The settings every member shares.
    pub params: wick_ops::AdamParams,
    /// How many parameters it updates.
    pub members: usize,
}

impl AdamUpdateMultiTensor {
    /// The input index of member `k`'s parameter (its gradient and moments follow).
    pub fn param_input(k: usize) -> usize {
        1 + 4 * k
    }
}

impl NodeOp for AdamUpdateMultiTensor {
    fn kernel(&self) -> Kernel {
        Kernel::AdamUpdateMultiTensor
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let done = wick_ops::dropout::read_step(arg(inputs, 0, "adam")?)
            .map_err(|e| wick_ops::invalid!("adam", "the step input: {e}"))?;
        let mut members = Vec::with_capacity(self.members);
        for k in 0..self.members {
            let at = Self::param_input(k);
            let state = |i: usize| inputs.get(i).copied().flatten();
            members.push((
                arg(inputs, at, "adam")?,
                arg(inputs, at + 1, "adam")?,
                state(at + 2),
                state(at + 3),
            ));
        }
        let updated =
            wick_ops::optim::adam::adam_step_multi_tensor(&members, done + 1, &self.params)?;
        Ok(updated
            .into_iter()
            .flat_map(|(p, m, v)| [Some(p), Some(m), Some(v)])
            .collect())
    }

    /// The moments are empty before the first step.
    fn optional_input(&self, i: usize) -> bool {
        i >= 1 && (i - 1) % 4 >= 2
    }

    /// The step counter, then `param, grad, exp_avg, exp_avg_sq` per member.
    fn param_slots(&self) -> Vec<ParamSlots> {
        (0..self.members)
            .map(|k| ParamSlots::consecutive(Self::param_input(k), 2))
            .collect()
    }

    fn workspace_bytes(&self, inputs: &[&ValueInfo], device: DeviceKind) -> u64 {
        let sizes = param_sizes(&self.param_slots(), inputs);
        wick_ops::gpu::multi_tensor_workspace_bytes(device, &sizes, 4)
    }

    fn with_learning_rate(&self, lr: f64) -> Option<Result<Op>> {
        let params = wick_ops::AdamParams { lr, ..self.params };
        let params = checked("adam", params, wick_ops::AdamParams::validate);
        let members = self.members;
        Some(params.map(|params| Arc::new(AdamUpdateMultiTensor { params, members }) as Op))
    }
}
