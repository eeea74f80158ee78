//! SGD's fused update node (kernels in `wick_ops::optim`); the optimizer phase that
//! records it is in `optimizer.rs`.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use wick_ops::optim::FiniteCheck;
use wick_ops::{optim, Kernel, SgdParams};

use crate::ir::{args, Graph, Inputs, KernelResult, NodeOp};

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

impl Graph {
    /// Every update node's parameter (by value name) with what its last run found, in
    /// OP_ID order; each node's finding is then forgotten. Updates that do not check
    /// (Adam, custom optimizer ops) report [`UpdateCheck::Unchecked`].
    pub fn take_update_checks(&self) -> Vec<(&str, UpdateCheck)> {
        self.nodes
            .iter()
            .filter(|n| n.op.kernel().class() == wick_ops::KernelClass::Optimizer)
            .filter(|n| n.op.kernel() != Kernel::ClipGradNorm)
            .map(|n| {
                let check = match n.op_as::<SgdUpdate>() {
                    Some(sgd) => sgd.health.take(),
                    None => UpdateCheck::Unchecked,
                };
                (self.values[n.inputs[0].0].name.as_str(), check)
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
}
