//! `log_softmax`, `nll_loss` and `cross_entropy` over `[N, C, d1, ...]` with
//! `ignore_index` and `label_smoothing`: recording, backward rules, execution (kernels in
//! `wick_ops::tensor::nll`).

use std::sync::Arc;

use wick_ops::tensor::nll::{self as kernels, NllLoss};
use wick_ops::tensor::{dim_index, TensorKernel};
use wick_ops::{norm, Kernel};

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::{args, one, BackwardCtx, Inputs, KernelResult, NodeOp, ValueId};

/// `log_softmax(x, dim)`. in: x; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct LogSoftmax {
    /// The dimension normalised.
    pub dim: usize,
}

/// Its gradient. in: grad_y, y; out: grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct LogSoftmaxBackward {
    /// The dimension normalised.
    pub dim: usize,
}

/// `nll_loss(logp, target)`. in: logp, target; out: the loss.
#[derive(Debug, Clone, PartialEq)]
pub struct NllLossOp {
    /// The settings.
    pub loss: NllLoss,
}

/// Its gradient. in: grad_loss, logp, target; out: grad_logp.
#[derive(Debug, Clone, PartialEq)]
pub struct NllLossBackward {
    /// The settings.
    pub loss: NllLoss,
}

impl GraphBuilder {
    /// `F.log_softmax(x, dim)`, computed stably.
    ///
    /// # Examples
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let logits = b.input("logits", &[4, 32, 65], DType::F32)?;
    /// let logp = b.log_softmax(logits, -1)?;
    /// assert_eq!(b.shape(logp), &[4, 32, 65]);
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn log_softmax(&mut self, x: ValueId, dim: isize) -> Result<ValueId> {
        self.forward_only("log_softmax")?;
        self.expect_float("log_softmax", "the input", x)?;
        let xs = self.shape(x).to_vec();
        let d = dim_index("log_softmax", xs.len(), dim).map_err(self.build_err("log_softmax"))?;
        let flops = norm::softmax_flops(&xs);
        let new = vec![("log_softmax", xs, self.dtype_of(x))];
        Ok(self.push(Arc::new(LogSoftmax { dim: d }), vec![x], new, vec![], flops)[0])
    }

    /// `F.nll_loss(logp, target, ignore_index=, reduction=)` of log-probabilities `[C]`,
    /// `[N, C]` or `[N, C, d1, ...]` against integer classes `[]`, `[N]` or `[N, d1,
    /// ...]` (`label_smoothing` as `F.cross_entropy` applies it).
    ///
    /// # Examples
    ///
    /// Per-pixel classes of a segmentation map, with `255` ignored:
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    /// use wick_ops::tensor::nll::{LossReduction, NllLoss};
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let logits = b.input("logits", &[2, 5, 8, 8], DType::F32)?;
    /// let labels = b.input("labels", &[2, 8, 8], DType::I64)?;
    /// let logp = b.log_softmax(logits, 1)?;
    /// let settings = NllLoss { ignore_index: Some(255), reduction: LossReduction::Mean, ..Default::default() };
    /// let loss = b.nll_loss(logp, labels, settings)?;
    /// assert!(b.shape(loss).is_empty());
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn nll_loss(&mut self, logp: ValueId, target: ValueId, loss: NllLoss) -> Result<ValueId> {
        self.forward_only("nll_loss")?;
        self.expect_float("nll_loss", "the input", logp)?;
        let (ls, ts) = (self.shape(logp).to_vec(), self.shape(target).to_vec());
        let out = loss
            .out_shape(&ls, &ts, self.dtype_of(target))
            .map_err(self.build_err("nll_loss"))?;
        let flops = loss.flops(&ls);
        let new = ("nll_loss", out, self.dtype_of(logp));
        Ok(self.push_one(Arc::new(NllLossOp { loss }), vec![logp, target], new, flops))
    }

    /// `F.cross_entropy(logits, target, ignore_index=, reduction=, label_smoothing=)` over
    /// logits `[C]`, `[N, C]` or `[N, C, d1, ...]` (per pixel, per token): `log_softmax`
    /// over the class dimension, then [`nll_loss`](GraphBuilder::nll_loss). For `[N, C]`
    /// with the default settings, [`cross_entropy`](GraphBuilder::cross_entropy) is one
    /// fused kernel.
    ///
    /// # Examples
    ///
    /// A language model's loss over every token, padding ignored:
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    /// use wick_ops::tensor::nll::NllLoss;
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let logits = b.param("logits", &[2, 10, 7])?; // [N, vocab, T]
    /// let tokens = b.input("tokens", &[2, 7], DType::I64)?;
    /// let settings = NllLoss { ignore_index: Some(0), label_smoothing: 0.1, ..Default::default() };
    /// let loss = b.cross_entropy_with(logits, tokens, settings)?;
    /// assert!(b.shape(loss).is_empty());
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn cross_entropy_with(
        &mut self,
        logits: ValueId,
        target: ValueId,
        loss: NllLoss,
    ) -> Result<ValueId> {
        let class_dim = if self.shape(logits).len() == 1 { 0 } else { 1 };
        let logp = self.log_softmax(logits, class_dim)?;
        self.nll_loss(logp, target, loss)
    }
}

impl NodeOp for LogSoftmax {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::LogSoftmaxForward)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [x] = args(inputs, "log_softmax")?;
        one(kernels::log_softmax(x, self.dim)?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let xs = ctx.shape(ctx.input(0));
        let flops = norm::softmax_flops(&xs);
        let op = LogSoftmaxBackward { dim: self.dim };
        ctx.record_input_grad(op, vec![gy, ctx.output(0)], "grad.log_softmax", flops)
    }
}

impl NodeOp for LogSoftmaxBackward {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::LogSoftmaxBackward)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [gy, y] = args(inputs, "log_softmax")?;
        one(kernels::log_softmax_backward(gy, y, self.dim)?)
    }
}

impl NodeOp for NllLossOp {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::NllLossForward)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [logp, target] = args(inputs, "nll_loss")?;
        one(self.loss.forward(logp, target)?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let (logp, target) = (ctx.input(0), ctx.input(1));
        let ls = ctx.shape(logp);
        let flops = ls.iter().product::<usize>() as u64;
        let op = NllLossBackward { loss: self.loss };
        ctx.record_grad_of(logp, op, vec![gy, logp, target], "grad.nll_loss", flops);
        Ok(())
    }
}

impl NodeOp for NllLossBackward {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::NllLossBackward)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [gy, logp, target] = args(inputs, "nll_loss")?;
        one(self.loss.backward(gy, logp, target)?)
    }
}
