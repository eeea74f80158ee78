//! Softmax cross-entropy, the loss every backward pass starts from: recording, backward
//! rule, execution (kernels in `wick_ops::loss`).

use std::sync::Arc;

use candle_core::Tensor;
use wick_ops::{loss, Kernel, OpError};

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::ValueId;
use crate::ir::{arg, one, BackwardCtx, Inputs, KernelResult, NodeOp};

const OP: &str = "cross_entropy";

/// Mean softmax cross-entropy. in: logits `[N, C]`, labels `[N]`; out: the loss (0-dim).
#[derive(Debug, Clone, PartialEq)]
pub struct CrossEntropy;

/// Its backward. in: logits, labels, `[grad_loss]` (absent when the loss is the root of
/// the backward pass: a gradient of 1); out: grad_logits.
#[derive(Debug, Clone, PartialEq)]
pub struct CrossEntropyBackward;

impl GraphBuilder {
    /// Mean softmax cross-entropy of `logits` `[N, C]` against integer `labels` `[N]`: a
    /// 0-dim loss.
    pub fn cross_entropy(&mut self, logits: ValueId, labels: ValueId) -> Result<ValueId> {
        self.forward_only(OP)?;
        let (ls, ys) = (self.shape(logits).to_vec(), self.shape(labels).to_vec());
        match (ls.as_slice(), ys.as_slice()) {
            (&[n, _], &[m]) if n == m => {}
            _ => {
                return Err(self.build_err(OP)(wick_ops::invalid!(
                OP,
                "logits must be [N, classes] and labels [N], got logits {ls:?} and labels {ys:?}"
            )))
            }
        }
        let flops = loss::cross_entropy_flops(&ls);
        let new = ("loss", vec![], self.dtype_of(logits));
        Ok(self.push_one(Arc::new(CrossEntropy), vec![logits, labels], new, flops))
    }
}

impl NodeOp for CrossEntropy {
    fn kernel(&self) -> Kernel {
        Kernel::SoftmaxCrossEntropyForward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        one(loss::cross_entropy(
            arg(inputs, 0, OP)?,
            arg(inputs, 1, OP)?,
        )?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let (logits, labels) = (ctx.input(0), ctx.input(1));
        let s = ctx.shape(logits);
        let flops = loss::cross_entropy_backward_flops(&s);
        let mut inputs = vec![logits, labels];
        inputs.extend(ctx.grad_y_if_any());
        ctx.record_grad_of(logits, CrossEntropyBackward, inputs, "grad.logits", flops);
        Ok(())
    }
}

impl NodeOp for CrossEntropyBackward {
    fn kernel(&self) -> Kernel {
        Kernel::SoftmaxCrossEntropyBackward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let logits = arg(inputs, 0, OP)?;
        let seed = match inputs.get(2).copied().flatten() {
            Some(g) => g.clone(),
            None => Tensor::ones((), logits.dtype(), logits.device())
                .map_err(|e| OpError::candle(OP, e))?,
        };
        one(loss::cross_entropy_backward(
            &seed,
            logits,
            arg(inputs, 1, OP)?,
        )?)
    }
}
