//! Global-norm gradient clipping, PyTorch's `clip_grad_norm_`, as one node over every
//! gradient.

use candle_core::Tensor;
use wick_ops::optim::clip_factor;
use wick_ops::{Kernel, OpError};

use crate::ir::{leading_args, Inputs, KernelResult, NodeOp};

/// Global-norm gradient clipping. in: every gradient; out: every gradient times
/// `min(1, max_norm / (‖g‖ + 1e-6))`, then the total norm `‖g‖` (0-dim).
#[derive(Debug, Clone, PartialEq)]
pub struct ClipGradNorm {
    /// The largest global norm let through.
    pub max_norm: f64,
}

impl NodeOp for ClipGradNorm {
    fn kernel(&self) -> Kernel {
        Kernel::ClipGradNorm
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let grads = leading_args(inputs, inputs.len(), "clip_grad_norm")?;
        let (total, coef) = clip_factor(&grads, self.max_norm)?;
        let candle = |e| OpError::candle("clip_grad_norm", e);
        let mut out = Vec::with_capacity(grads.len() + 1);
        for g in &grads {
            out.push(Some(wick_ops::broadcast::scale(g, coef)?));
        }
        let dtype = grads.first().map_or(candle_core::DType::F32, |g| g.dtype());
        let device = grads
            .first()
            .map_or(candle_core::Device::Cpu, |g| g.device().clone());
        let norm = Tensor::new(total, &device)
            .map_err(candle)?
            .to_dtype(dtype)
            .map_err(candle)?;
        out.push(Some(norm));
        Ok(out)
    }
}
