//! The optimizers' settings, with PyTorch's names and defaults.

use crate::error::{OpError, Result};

/// The settings of SGD.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SgdParams {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor (0 disables the momentum buffer).
    pub momentum: f64,
    /// L2 penalty added to the gradient: `d = g + weight_decay * p`.
    pub weight_decay: f64,
    /// Dampening of the gradient in the momentum update.
    pub dampening: f64,
    /// Nesterov momentum.
    pub nesterov: bool,
}

impl Default for SgdParams {
    fn default() -> Self {
        SgdParams {
            lr: 0.01,
            momentum: 0.0,
            weight_decay: 0.0,
            dampening: 0.0,
            nesterov: false,
        }
    }
}

impl SgdParams {
    /// Checks the settings as PyTorch does.
    pub fn validate(&self) -> Result<()> {
        let valid = |v: f64| v.is_finite() && v >= 0.0;
        if !valid(self.lr) || !valid(self.momentum) || !valid(self.weight_decay) {
            return Err(crate::invalid!("sgd", "lr, momentum and weight decay must be finite and non-negative, got lr {}, momentum {}, weight decay {}", self.lr, self.momentum, self.weight_decay));
        }
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(OpError::invalid(
                "sgd",
                "nesterov momentum needs a momentum above 0 and zero dampening",
            ));
        }
        Ok(())
    }

    /// FLOPs of one update of a parameter with `n` elements.
    pub fn flops(&self, n: usize) -> u64 {
        crate::shape::flop_count(6, &[n])
    }
}

/// One Adam step's constants in f64 ([`AdamParams::step_constants`]). The update of a
/// parameter `w` with gradient `d` and moments `m`, `v` is: `w *= decay` (decoupled) or
/// `d += w · decay`; `m += (d - m) · one_minus_beta1`; `v = v · beta2 + one_minus_beta2 ·
/// d · d`; `w -= m / (√v / bias2_sqrt + eps) · step_size`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamStepConstants {
    /// `1 - lr · weight_decay` when decoupled (1 without decay), else `weight_decay`.
    pub decay: f64,
    /// Whether the decay scales the parameter (AdamW, or no decay) or adds to the gradient.
    pub decoupled: bool,
    /// The second moment's decay.
    pub beta2: f64,
    /// `1 - beta1` (taken in f32 it would round differently).
    pub one_minus_beta1: f64,
    /// `1 - beta2` (in f32, 1 - 0.999 is 1.3e-5 off).
    pub one_minus_beta2: f64,
    /// Added to the denominator.
    pub eps: f64,
    /// `lr / (1 - beta1^t)`.
    pub step_size: f64,
    /// `√(1 - beta2^t)`.
    pub bias2_sqrt: f64,
}

/// The settings of Adam and AdamW.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamParams {
    /// Learning rate.
    pub lr: f64,
    /// Decay of the first moment's running average.
    pub beta1: f64,
    /// Decay of the second moment's running average.
    pub beta2: f64,
    /// Added to the denominator.
    pub eps: f64,
    /// Weight decay: an L2 penalty added to the gradient (Adam), or decoupled (AdamW:
    /// `p *= 1 - lr · weight_decay` before the update).
    pub weight_decay: f64,
    /// AdamW's decoupled weight decay.
    pub decoupled: bool,
}

impl AdamParams {
    /// `torch.optim.Adam`'s defaults at learning rate `lr` (betas 0.9, 0.999, eps 1e-8,
    /// no weight decay).
    pub fn adam(lr: f64) -> Self {
        AdamParams {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            decoupled: false,
        }
    }

    /// `torch.optim.AdamW`'s defaults at learning rate `lr` (weight decay 0.01).
    pub fn adamw(lr: f64) -> Self {
        AdamParams {
            weight_decay: 0.01,
            decoupled: true,
            ..Self::adam(lr)
        }
    }

    /// These settings with weight decay `weight_decay` (the `weight_decay=` argument of
    /// `torch.optim.Adam` and `AdamW`).
    pub fn with_weight_decay(self, weight_decay: f64) -> Self {
        AdamParams {
            weight_decay,
            ..self
        }
    }

    /// The constants of step `step` (1-based), each computed in f64 and to be rounded
    /// once to the element type, as PyTorch's Python scalars are: every kernel (CPU, CUDA)
    /// takes these, so that they compute the same update.
    pub fn step_constants(&self, step: u64) -> AdamStepConstants {
        let t = step as f64;
        let decoupled = self.decoupled || self.weight_decay == 0.0;
        AdamStepConstants {
            decay: if decoupled {
                1.0 - self.lr * self.weight_decay
            } else {
                self.weight_decay
            },
            decoupled,
            beta2: self.beta2,
            one_minus_beta1: 1.0 - self.beta1,
            one_minus_beta2: 1.0 - self.beta2,
            eps: self.eps,
            step_size: self.lr / (1.0 - self.beta1.powf(t)),
            bias2_sqrt: (1.0 - self.beta2.powf(t)).sqrt(),
        }
    }

    /// Checks the settings as PyTorch does.
    pub fn validate(&self) -> Result<()> {
        let ok = |v: f64| v.is_finite() && v >= 0.0;
        let beta = |b: f64| (0.0..1.0).contains(&b);
        if !ok(self.lr)
            || !ok(self.eps)
            || !ok(self.weight_decay)
            || !beta(self.beta1)
            || !beta(self.beta2)
        {
            return Err(crate::invalid!("adam", "lr, eps and weight decay must be finite and non-negative and betas in [0, 1), got lr {}, betas ({}, {}), eps {}, weight decay {}", self.lr, self.beta1, self.beta2, self.eps, self.weight_decay));
        }
        Ok(())
    }

    /// FLOPs of one update of a parameter with `n` elements.
    pub fn flops(&self, n: usize) -> u64 {
        crate::shape::flop_count(12, &[n])
    }
}
