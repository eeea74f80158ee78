//! Mean-reduced element-wise losses (MSE, BCE with logits): recording, backward rule,
//! execution (kernels in `wick_ops::regression_loss`).

use std::sync::Arc;

use wick_ops::regression_loss::{self, ElementwiseLoss};
use wick_ops::{Kernel, Operand};

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::{args, one, BackwardCtx, Inputs, KernelResult, NodeOp, ValueId};

/// An element-wise loss. in: input, target; out: the mean loss (0-dim).
#[derive(Debug, Clone, PartialEq)]
pub struct LossOp {
    /// Which loss.
    pub kind: ElementwiseLoss,
}

/// The gradient for one operand. in: grad_loss, input, target; out: the gradient.
#[derive(Debug, Clone, PartialEq)]
pub struct LossBackward {
    /// Which loss.
    pub kind: ElementwiseLoss,
    /// Input (`Lhs`) or target (`Rhs`).
    pub operand: Operand,
}

impl GraphBuilder {
    /// Mean squared error of `input` against `target` (same shapes): a 0-dim loss.
    pub fn mse_loss(&mut self, input: ValueId, target: ValueId) -> Result<ValueId> {
        self.elementwise_loss(ElementwiseLoss::Mse, input, target)
    }

    /// Binary cross-entropy of the `logits` against `target` probabilities (same shapes),
    /// computed stably from the logits: a 0-dim loss.
    pub fn bce_with_logits(&mut self, logits: ValueId, target: ValueId) -> Result<ValueId> {
        self.elementwise_loss(ElementwiseLoss::BceWithLogits, logits, target)
    }

    /// `F.binary_cross_entropy(probabilities, target)` (same shapes), each log clamped to
    /// at least -100 as PyTorch's: a 0-dim loss. An input outside `[0, 1]` is an error
    /// when the node runs.
    ///
    /// # Examples
    ///
    /// A VAE's reconstruction term on sigmoid outputs:
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let logits = b.input("decoded", &[8, 784], DType::F32)?;
    /// let images = b.input("images", &[8, 784], DType::F32)?;
    /// let p = b.sigmoid(logits)?;
    /// let loss = b.binary_cross_entropy(p, images)?;
    /// assert!(b.shape(loss).is_empty());
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn binary_cross_entropy(
        &mut self,
        probabilities: ValueId,
        target: ValueId,
    ) -> Result<ValueId> {
        self.elementwise_loss(ElementwiseLoss::Bce, probabilities, target)
    }

    fn elementwise_loss(
        &mut self,
        kind: ElementwiseLoss,
        x: ValueId,
        t: ValueId,
    ) -> Result<ValueId> {
        let op = kind.op();
        self.forward_only(op)?;
        let (xs, ts) = (self.shape(x).to_vec(), self.shape(t).to_vec());
        regression_loss::check(kind, &xs, &ts).map_err(self.build_err(op))?;
        if self.dtype_of(x) != self.dtype_of(t) {
            return Err(self.build_err(op)(wick_ops::invalid!(
                op,
                "input has dtype {:?} and target {:?}",
                self.dtype_of(x),
                self.dtype_of(t)
            )));
        }
        let flops = regression_loss::flops(kind, &xs);
        let new = ("loss", vec![], self.dtype_of(x));
        Ok(self.push_one(Arc::new(LossOp { kind }), vec![x, t], new, flops))
    }
}

impl NodeOp for LossOp {
    fn kernel(&self) -> Kernel {
        Kernel::Loss(self.kind)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [x, t] = args(inputs, self.kind.op())?;
        one(regression_loss::forward(self.kind, x, t)?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let (x, t) = (ctx.input(0), ctx.input(1));
        for (v, operand) in [(x, Operand::Lhs), (t, Operand::Rhs)] {
            if !ctx.needs_grad(v) {
                continue;
            }
            let s = ctx.shape(v);
            let flops = regression_loss::backward_flops(self.kind, &s);
            let op = LossBackward {
                kind: self.kind,
                operand,
            };
            ctx.record_grad_of(v, op, vec![gy, x, t], "grad.loss", flops);
        }
        Ok(())
    }
}

impl NodeOp for LossBackward {
    fn kernel(&self) -> Kernel {
        Kernel::LossBackward(self.kind)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [g, x, t] = args(inputs, self.kind.backward_name())?;
        one(regression_loss::backward(self.kind, self.operand, g, x, t)?)
    }
}
