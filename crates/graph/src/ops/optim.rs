//! SGD's fused update node and the multi-tensor update nodes (kernels in `wick_ops::optim`
//! and `wick_ops::adam`); the optimizer phase that records updates is in `optimizer.rs`.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use wick_ops::optim::FiniteCheck;
use wick_ops::{optim, DeviceKind, Kernel, SgdParams};

use crate::error::{GraphError, Result};
use crate::ir::{args, Graph, Inputs, KernelResult, NodeOp, Op, ValueInfo};

/// One parameter's fused SGD update. in: param, grad, `[momentum_buf]`; out: the param
/// and (with momentum) the momentum buffer, updated in place.
#[derive(Debug, Clone)]
pub struct SgdUpdate {
    /// lr, momentum, weight decay, dampening, nesterov.
    pub params: SgdParams,
    /// Whether the last update left the parameter finite (read by
    /// [`Graph::take_update_checks`]).
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
}

/// What an update node found about its parameter since it was last asked: the CPU
/// update checks the values it writes while they are in cache, so a training loop need
/// not read every parameter again to know they are finite.
#[derive(Debug, Default)]
pub struct UpdateHealth(AtomicU8);

/// See [`UpdateHealth`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateCheck {
    /// The node has not run since it was last asked.
    NotRun,
    /// The updated parameter is finite.
    Finite,
    /// It holds a NaN or an infinity.
    NonFinite,
    /// The update did not check (a device, or another optimizer): look yourself.
    Unchecked,
}

impl UpdateHealth {
    fn record(&self, check: FiniteCheck) {
        let v = match check {
            FiniteCheck::Finite => 1,
            FiniteCheck::NonFinite => 2,
            FiniteCheck::Unchecked => 3,
        };
        self.0.store(v, Ordering::Relaxed);
    }

    /// What the last run found, and forgets it.
    pub fn take(&self) -> UpdateCheck {
        match self.0.swap(0, Ordering::Relaxed) {
            1 => UpdateCheck::Finite,
            2 => UpdateCheck::NonFinite,
            3 => UpdateCheck::Unchecked,
            _ => UpdateCheck::NotRun,
        }
    }
}

/// `params` validated for a learning-rate change, as a graph error naming `op`.
pub(crate) fn checked<P>(
    op: &'static str,
    params: P,
    validate: fn(&P) -> wick_ops::Result<()>,
) -> Result<P> {
    validate(&params).map_err(|source| GraphError::Build {
        op,
        layer: None,
        source,
    })?;
    Ok(params)
}

impl Graph {
    /// Every update node's parameter (by value name) with what its last run found, in
    /// OP_ID order; each node's finding is then forgotten. Updates that do not check
    /// (Adam, custom optimizer ops) report [`UpdateCheck::Unchecked`].
    pub fn take_update_checks(&self) -> Vec<(&str, UpdateCheck)> {
        self.nodes
            .iter()
            .filter(|n| n.op.kernel().class() == wick_ops::KernelClass::Optimizer)
            .filter(|n| n.op.kernel() != Kernel::ClipGradNorm)
            .flat_map(|n| {
                let name = |i: usize| self.values[n.inputs[i].0].name.as_str();
                if let Some(sgd) = n.op_as::<SgdUpdate>() {
                    vec![(name(0), sgd.health.take())]
                } else if let Some(group) = n.op_as::<SgdUpdateMultiTensor>() {
                    let health = group.health.iter().enumerate();
                    health
                        .map(|(k, h)| (name(k * group.stride()), h.take()))
                        .collect()
                } else if let Some(group) = n.op_as::<AdamUpdateMultiTensor>() {
                    (0..group.members)
                        .map(|k| {
                            (
                                name(AdamUpdateMultiTensor::param_input(k)),
                                UpdateCheck::Unchecked,
                            )
                        })
                        .collect()
                } else {
                    vec![(name(0), UpdateCheck::Unchecked)]
                }
            })
            .collect()
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

    fn with_learning_rate(&self, lr: f64) -> Option<Result<Op>> {
        let params = checked("sgd", SgdParams { lr, ..self.params }, SgdParams::validate);
        Some(params.map(|params| {
            Arc::new(SgdUpdate {
                params,
                health: self.health.clone(),
            }) as Op
        }))
    }
}

/// The element counts of a multi-tensor node's parameters: every `stride`-th input from
/// `first`.
fn member_sizes(inputs: &[&ValueInfo], first: usize, stride: usize) -> Vec<usize> {
    inputs
        .iter()
        .skip(first)
        .step_by(stride)
        .map(|v| v.shape.iter().product())
        .collect()
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
        if self.params.momentum != 0.0 {
            3
        } else {
            2
        }
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
                crate::ir::arg(inputs, at, "sgd")?,
                crate::ir::arg(inputs, at + 1, "sgd")?,
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

    /// The tables of one launch: a pointer per parameter and role, and the chunks.
    fn workspace_bytes(&self, inputs: &[&ValueInfo], device: DeviceKind) -> u64 {
        let sizes = member_sizes(inputs, 0, self.stride());
        wick_ops::gpu::multi_tensor_workspace_bytes(device, &sizes, self.stride())
    }

    fn with_learning_rate(&self, lr: f64) -> Option<Result<Op>> {
        let params = checked("sgd", SgdParams { lr, ..self.params }, SgdParams::validate);
        Some(params.map(|params| {
            Arc::new(SgdUpdateMultiTensor {
                params,
                health: self.health.clone(),
            }) as Op
        }))
    }
}

/// The same Adam or AdamW update of many parameters in one node, made by the
/// `multi_tensor_update` pass from [`AdamUpdate`](crate::ops::optimizer::AdamUpdate) nodes
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
        let done = wick_ops::dropout::read_step(crate::ir::arg(inputs, 0, "adam")?)
            .map_err(|e| wick_ops::OpError::invalid("adam", format!("the step input: {e}")))?;
        let mut members = Vec::with_capacity(self.members);
        for k in 0..self.members {
            let at = Self::param_input(k);
            let state = |i: usize| inputs.get(i).copied().flatten();
            members.push((
                crate::ir::arg(inputs, at, "adam")?,
                crate::ir::arg(inputs, at + 1, "adam")?,
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

    fn workspace_bytes(&self, inputs: &[&ValueInfo], device: DeviceKind) -> u64 {
        let sizes = member_sizes(inputs, 1, 4);
        wick_ops::gpu::multi_tensor_workspace_bytes(device, &sizes, 4)
    }

    fn with_learning_rate(&self, lr: f64) -> Option<Result<Op>> {
        let params = wick_ops::AdamParams { lr, ..self.params };
        let params = checked("adam", params, wick_ops::AdamParams::validate);
        let members = self.members;
        Some(params.map(|params| Arc::new(AdamUpdateMultiTensor { params, members }) as Op))
    }
}
