//! What a session reports of dynamic loss scaling ([`TrainOptions::loss_scaling`]): the
//! scale now, and the steps whose updates it skipped.
//!
//! [`TrainOptions::loss_scaling`]: super::TrainOptions::loss_scaling

use candle_core::DType;

use super::Session;
use crate::error::Result;

impl Session {
    /// The loss scale the next step runs with, when the session scales its loss
    /// (PyTorch's `scaler.get_scale()`).
    pub fn loss_scale(&self) -> Result<Option<f64>> {
        let Some(s) = self.exec.graph().grad_scaler() else {
            return Ok(None);
        };
        Ok(Some(match self.exec.get_id(s.scale)? {
            Some(t) => t.to_dtype(DType::F64)?.to_scalar::<f64>()?,
            None => s.settings.init_scale,
        }))
    }

    /// Steps whose updates loss scaling skipped because a gradient was infinite or NaN.
    pub fn skipped_steps(&self) -> u64 {
        self.skipped_steps
    }

    /// Counts the last step if loss scaling skipped its updates.
    pub(super) fn count_skipped_step(&mut self) -> Result<()> {
        let found = self
            .exec
            .graph()
            .grad_scaler()
            .and_then(|s| s.found_non_finite);
        if let Some(t) = found.map(|v| self.exec.get_id(v)).transpose()?.flatten() {
            self.skipped_steps += u64::from(t.to_scalar::<u8>()? != 0);
        }
        Ok(())
    }
}
