//! Stochastic gradient descent with momentum, weight decay, dampening and nesterov, with
//! PyTorch's `torch.optim.SGD` semantics: one fused update per parameter.

use candle_core::Tensor;

use crate::error::{CandleContext, OpError, Result};

const OP: &str = "sgd";

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
            return Err(OpError::invalid(
                OP,
                format!(
                    "lr, momentum and weight decay must be non-negative, got lr {}, momentum {}, weight decay {}",
                    self.lr, self.momentum, self.weight_decay
                ),
            ));
        }
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(OpError::invalid(
                OP,
                "nesterov momentum needs a momentum above 0 and zero dampening",
            ));
        }
        Ok(())
    }

    /// FLOPs of one update of a parameter with `n` elements.
    pub fn flops(&self, n: usize) -> u64 {
        6 * n as u64
    }
}

/// One SGD step (`SgdUpdate`) of `param` with gradient `grad`. `momentum_buf` is the
/// buffer from the previous step (`None` on the first step, when the buffer becomes the
/// gradient, as in PyTorch). Returns the new parameter and the new buffer (`None` when
/// momentum is 0).
pub fn sgd_step(
    param: &Tensor,
    grad: &Tensor,
    momentum_buf: Option<&Tensor>,
    p: &SgdParams,
) -> Result<(Tensor, Option<Tensor>)> {
    p.validate()?;
    crate::shape::same(OP, "gradient", grad.dims(), "parameter", param.dims())?;
    if let Some(buf) = momentum_buf {
        crate::shape::same(OP, "momentum buffer", buf.dims(), "parameter", param.dims())?;
    }
    let mut d = grad.clone();
    if p.weight_decay != 0.0 {
        d = (d + (param * p.weight_decay).ctx(OP)?).ctx(OP)?;
    }
    let mut new_buf = None;
    if p.momentum != 0.0 {
        let buf = match momentum_buf {
            None => d.clone(),
            Some(buf) => {
                ((buf * p.momentum).ctx(OP)? + (&d * (1.0 - p.dampening)).ctx(OP)?).ctx(OP)?
            }
        };
        d = if p.nesterov {
            (d + (&buf * p.momentum).ctx(OP)?).ctx(OP)?
        } else {
            buf.clone()
        };
        new_buf = Some(buf);
    }
    let new_param = (param - (d * p.lr).ctx(OP)?).ctx(OP)?;
    Ok((new_param, new_buf))
}
