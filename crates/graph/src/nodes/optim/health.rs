//! What an SGD update node found about its parameter since it was last asked.

use std::sync::atomic::{AtomicU8, Ordering};

use wick_ops::optim::FiniteCheck;

use crate::ir::UpdateCheck;

/// What an update node found about its parameter since it was last asked: the CPU
/// update checks the values it writes while they are in cache, so a training loop need
/// not read every parameter again to know they are finite.
#[derive(Debug, Default)]
pub struct UpdateHealth(AtomicU8);

impl UpdateHealth {
    pub(crate) fn record(&self, check: FiniteCheck) {
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
