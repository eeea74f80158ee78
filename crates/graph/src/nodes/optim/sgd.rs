//! SGD's update nodes: one parameter's fused update ([`SgdUpdate`]), and the same update
//! of many parameters in one node ([`SgdUpdateMultiTensor`], made by the
//! `multi_tensor_update` pass). Kernels in `wick_ops::optim::sgd`.

use std::sync::Arc;

use wick_ops::{optim, DeviceKind, Kernel, SgdParams};

use super::health::UpdateHealth;
use super::{checked, param_sizes};
use crate::error::Result;
use crate::ir::{arg, args, Inputs, KernelResult, NodeOp, Op, ParamSlots, UpdateCheck, ValueInfo};

/// One parameter's fused SGD update. in: param, grad, `[momentum_buf]`; out: the param
/// and (with momentum) the momentum buffer, updated in place.
#[derive(Debug, Clone)]
pub struct SgdUpdate {
    /// lr, momentum, weight decay, dampening, nesterov.
    pub params: SgdParams,
    /// Whether the last update left the parameter finite (read by
    /// [`Graph::take_update_checks`](crate::Graph::take_update_checks)).
    pub health: Arc<UpdateHealth>,
}

impl SgdUpdate {
    /// An update node with these settings.
    pub fn new(params: SgdParams) -> Self {
        SgdUpdate {
            params,
            health: Arc::default(),
        }
    }

    /// Inputs per parameter: param, grad and, with momentum, the buffer.
    pub fn stride(&self) -> usize {
        stride(&self.params)
    }
}

/// Inputs per parameter of an SGD update with `params`: param, grad and, with momentum,
/// the buffer.
fn stride(params: &SgdParams) -> usize {
    if params.momentum != 0.0 {
        3
    } else {
        2
    }
}

impl NodeOp for SgdUpdate {
    fn kernel(&self) -> Kernel {
        Kernel::SgdUpdate
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        // Parameters and buffers are owned by the executor (copied in by `set`), so the
        // CPU kernel may update them in place.
        let [param, grad] = args(inputs, "sgd")?;
        let buf = inputs.get(2).copied().flatten();
        let (p, b, finite) = optim::sgd_step_in_place_checked(param, grad, buf, &self.params)?;
        self.health.record(finite);
        Ok(if inputs.len() > 2 {
            vec![Some(p), b]
        } else {
            vec![Some(p)]
        })
    }

    /// The momentum buffer is empty before the first step.
    fn optional_input(&self, i: usize) -> bool {
        i == 2
    }

    /// param, grad and, with momentum, the buffer.
    fn param_slots(&self) -> Vec<ParamSlots> {
        vec![ParamSlots::consecutive(0, self.stride() - 2)]
    }

    fn take_update_checks(&self) -> Vec<UpdateCheck> {
        vec![self.health.take()]
    }

    fn with_learning_rate(&self, lr: f64) -> Option<Result<Op>> {
        let mut node = self.clone();
        node.params.lr = lr;
        Some(checked("sgd", node.params, SgdParams::validate).map(|_| Arc::new(node) as Op))
    }
}

/// The same SGD update of many parameters in one node, made by the `multi_tensor_update`
/// pass from [`SgdUpdate`] nodes with equal settings: one launch for all of them on CUDA.
/// in: per parameter `param, grad[, momentum_buf]`; out: per parameter `param[,
/// momentum_buf]`, updated in place. Each parameter keeps its own [`UpdateHealth`].
#[derive(Debug, Clone)]
pub struct SgdUpdateMultiTensor {
    /// The settings every member shares.
    pub params: SgdParams,
    /// One per parameter, in input order: the health of the node it replaced.
    pub health: Vec<Arc<UpdateHealth>>,
}

impl SgdUpdateMultiTensor {
    /// Inputs per parameter: param, grad and, with momentum, the buffer.
    pub fn stride(&self) -> usize {
        stride(&self.params)
    }
}

impl NodeOp for SgdUpdateMultiTensor {
    fn kernel(&self) -> Kernel {
        Kernel::SgdUpdateMultiTensor
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let stride = self.stride();
        let mut members = Vec::with_capacity(self.health.len());
        for k in 0..self.health.len() {
            let at = k * stride;
            members.push((
                arg(inputs, at, "sgd")?,
                arg(inputs, at + 1, "sgd")?,
                inputs
                    .get(at + 2)
                    .copied()
                    .flatten()
                    .filter(|_| stride == 3),
            ));
        }
        let updated = optim::sgd_step_multi_tensor_in_place(&members, &self.params)?;
        let mut out = Vec::with_capacity(updated.len() * (stride - 1));
        for ((p, b, finite), health) in updated.into_iter().zip(&self.health) {
            health.record(finite);
            out.push(Some(p));
            if stride == 3 {
                out.push(b);
            }
        }
        Ok(out)
    }

    /// The momentum buffers are empty before the first step.
    fn optional_input(&self, i: usize) -> bool {
        self.stride() == 3 && i % 3 == 2
    }

    fn param_slots(&self) -> Vec<ParamSlots> {
        let stride = self.stride();
        (0..self.health.len())
            .map(|k| ParamSlots::consecutive(k * stride, stride - 2))
            .collect()
    }

    fn take_update_checks(&self) -> Vec<UpdateCheck> {
        self.health.iter().map(|h| h.take()).collect()
    }

    /// The tables of one launch: a pointer per parameter and role, and the chunks.
    fn workspace_bytes(&self, inputs: &[&ValueInfo], device: DeviceKind) -> u64 {
        let sizes = param_sizes(&self.param_slots(), inputs);
        wick_ops::gpu::multi_tensor_workspace_bytes(device, &sizes, self.stride())
    }

    fn with_learning_rate(&self, lr: f64) -> Option<Result<Op>> {
        let mut node = self.clone();
        node.params.lr = lr;
        Some(checked("sgd", node.params, SgdParams::validate).map(|_| Arc::new(node) as Op))
    }
}
