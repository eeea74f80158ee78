//! Dynamic loss scaling's settings and rules (PyTorch's `GradScaler`), and the values a
//! graph keeps for it; the nodes and the builder's calls are in
//! `nodes::optim::grad_scaler`.

use wick_ops::OpError;

use super::value::ValueId;

const OP: &str = "grad_scaler";

/// `GradScaler`'s settings, with PyTorch's defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GradScaler {
    /// The scale of the first step (2^16).
    pub init_scale: f64,
    /// The factor the scale grows by after `growth_interval` good steps (2).
    pub growth_factor: f64,
    /// The factor the scale shrinks by on a step with a non-finite gradient (0.5).
    pub backoff_factor: f64,
    /// Good steps in a row before the scale grows (2000).
    pub growth_interval: u64,
}

impl Default for GradScaler {
    fn default() -> Self {
        GradScaler {
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
        }
    }
}

impl GradScaler {
    /// Checks the settings as PyTorch does: a positive finite scale, growth above 1,
    /// backoff in (0, 1), an interval of at least one step.
    pub fn validate(&self) -> std::result::Result<(), OpError> {
        let bad = |why: String| Err(OpError::invalid(OP, why));
        if !(self.init_scale.is_finite() && self.init_scale > 0.0) {
            return bad(format!(
                "init_scale must be positive and finite, got {}",
                self.init_scale
            ));
        }
        if !(self.growth_factor.is_finite() && self.growth_factor > 1.0) {
            return bad(format!(
                "growth_factor must be above 1, got {}",
                self.growth_factor
            ));
        }
        if !(self.backoff_factor > 0.0 && self.backoff_factor < 1.0) {
            return bad(format!(
                "backoff_factor must be in (0, 1), got {}",
                self.backoff_factor
            ));
        }
        if self.growth_interval == 0 {
            return bad("growth_interval must be at least 1 step".into());
        }
        Ok(())
    }

    /// The scale and growth count after a step: PyTorch's `_amp_update_scale_`.
    pub fn next(&self, scale: f64, tracker: u64, found_non_finite: bool) -> (f64, u64) {
        if found_non_finite {
            return (scale * self.backoff_factor, 0);
        }
        let good = tracker + 1;
        if good < self.growth_interval {
            return (scale, good);
        }
        let grown = scale * self.growth_factor;
        (if grown.is_finite() { grown } else { scale }, 0)
    }
}

/// A graph's loss-scaling values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScalerValues {
    /// The settings.
    pub settings: GradScaler,
    /// `grad_scaler.scale`: 0-dim f32 state, unset until the first update.
    pub scale: ValueId,
    /// `grad_scaler.growth_tracker`: good steps in a row, 0-dim i64 state.
    pub growth_tracker: ValueId,
    /// Whether this step found a non-finite gradient (0-dim u8), once recorded by
    /// [`GraphBuilder::optimize`](crate::GraphBuilder::optimize).
    pub found_non_finite: Option<ValueId>,
    /// The updates taken before this step (0-dim i64), what Adam counts its steps by, so
    /// that a skipped step does not count (PyTorch's `optimizer.step()` is not called).
    /// Recorded when the graph has an Adam update; read from the state
    /// `grad_scaler.updates`, or the step counter while that is unset.
    pub updates_before: Option<ValueId>,
}
