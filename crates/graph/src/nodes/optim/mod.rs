//! The optimizers as graph nodes, one file each: [`sgd`], [`adam`] (Adam and AdamW),
//! [`clip`] (global-norm clipping) and [`grad_scaler`] (dynamic loss scaling); [`config`] records the optimizer phase from an
//! [`OptimizerConfig`]. Every update node describes its inputs
//! ([`NodeOp::param_slots`](crate::NodeOp::param_slots)), so passes, data parallelism, the session's checks and the
//! profiler read them without knowing the optimizer. A new optimizer is a file here
//! with its node, its kernel in `wick_ops::optim`, and an [`Optimizer`] variant.

pub mod accumulate;
pub mod adam;
pub mod clip;
pub mod config;
pub mod grad_scaler;
pub mod health;
pub mod sgd;

pub use accumulate::AccumulateMicroBatch;
pub use adam::{AdamUpdate, AdamUpdateMultiTensor};
pub use clip::ClipGradNorm;
pub use config::{Optimizer, OptimizerConfig, ParamGroup, ParamSelector};
pub use grad_scaler::{GradScaler, ScaledLossSeed, ScalerValues, UnscaleGradients};
pub use health::UpdateHealth;
pub use sgd::{SgdUpdate, SgdUpdateMultiTensor};

use crate::error::{GraphError, Result};
use crate::ir::{Graph, ValueInfo};
pub use crate::ir::{ParamSlots, UpdateCheck};

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

/// The element counts of the parameters that `slots` name among `inputs`.
fn param_sizes(slots: &[ParamSlots], inputs: &[&ValueInfo]) -> Vec<usize> {
    slots
        .iter()
        .map(|s| inputs[s.param].shape.iter().product())
        .collect()
}

impl Graph {
    /// Every update node's parameters (by value name) with what its last run found, in
    /// OP_ID order; each finding is then forgotten. Updates that do not check (Adam, a
    /// custom update op) report [`UpdateCheck::Unchecked`]; a custom update op that does
    /// not describe its inputs ([`NodeOp::param_slots`](crate::NodeOp::param_slots)) counts as updating its first.
    pub fn take_update_checks(&self) -> Vec<(&str, UpdateCheck)> {
        let name = |n: &crate::ir::Node, i: usize| self.values[n.inputs[i].0].name.as_str();
        self.nodes
            .iter()
            .flat_map(|n| {
                let slots = n.op.param_slots();
                let custom_update = slots.is_empty()
                    && matches!(n.op.kernel(), wick_ops::Kernel::Custom(_))
                    && n.op.kernel().class() == wick_ops::KernelClass::Optimizer
                    && !n.inputs.is_empty();
                if custom_update {
                    return vec![(name(n, 0), UpdateCheck::Unchecked)];
                }
                let checks = n.op.take_update_checks();
                slots
                    .iter()
                    .zip(checks)
                    .map(|(s, c)| (name(n, s.param), c))
                    .collect()
            })
            .collect()
    }
}
