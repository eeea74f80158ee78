//! Reductions over dimensions with `keepdim` (`sum`, `mean`, `amax`, `amin`,
//! `logsumexp`, `var`, `argmax`, `argmin`): recording, backward rule, execution (kernels
//! in `wick_ops::tensor::reduce`).

use std::sync::Arc;

use wick_ops::tensor::reduce::{Reduce, Reduction};
use wick_ops::tensor::TensorKernel;
use wick_ops::Kernel;

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::{arg, args, one, BackwardCtx, Inputs, KernelResult, NodeOp, ValueId};

/// A reduction. in: x; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct ReduceOp {
    /// The reduction, its dimensions and settings.
    pub r: Reduce,
}

/// Its gradient. in: grad_y, then x and y where the reduction's gradient reads them;
/// out: grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct ReduceBackward {
    /// The reduction, its dimensions and settings.
    pub r: Reduce,
    /// The input's shape.
    pub shape: Vec<usize>,
}

impl GraphBuilder {
    /// The reduction `op` of `x` over `dims` (negative dimensions count from the end; an
    /// empty list reduces every dimension), keeping them as size 1 with `keepdim`.
    pub fn reduce(
        &mut self,
        op: Reduction,
        x: ValueId,
        dims: &[isize],
        keepdim: bool,
    ) -> Result<ValueId> {
        let r =
            Reduce::new(op, self.shape(x), dims, keepdim).map_err(self.build_err(op.op_name()))?;
        self.record_reduce(r, x)
    }

    fn record_reduce(&mut self, r: Reduce, x: ValueId) -> Result<ValueId> {
        let name = r.op.op_name();
        self.forward_only(name)?;
        self.expect_float(name, "the input", x)?;
        let xs = self.shape(x).to_vec();
        let new = (name, r.out_shape(&xs), r.out_dtype(self.dtype_of(x)));
        let flops = r.flops(&xs);
        let differentiable = r.op.differentiable();
        let y = self.push_one(Arc::new(ReduceOp { r }), vec![x], new, flops);
        if !differentiable {
            self.stop_gradient(y);
        }
        Ok(y)
    }

    /// `torch.sum(x, dims, keepdim)`.
    ///
    /// # Examples
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    /// let x = b.input("x", &[4, 3, 5], DType::F32)?;
    /// let rows = b.sum(x, &[-1], true)?; // over the last dimension, kept
    /// assert_eq!(b.shape(rows), &[4, 3, 1]);
    /// let total = b.sum(x, &[], false)?; // every dimension: a scalar
    /// assert!(b.shape(total).is_empty());
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn sum(&mut self, x: ValueId, dims: &[isize], keepdim: bool) -> Result<ValueId> {
        self.reduce(Reduction::Sum, x, dims, keepdim)
    }

    /// `torch.mean(x, dims, keepdim)`.
    ///
    /// # Examples
    ///
    /// Per-channel means of a feature map, over `N`, `H` and `W`:
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let x = b.input("x", &[8, 3, 32, 32], DType::F32)?;
    /// let m = b.mean(x, &[0, 2, 3], false)?;
    /// assert_eq!(b.shape(m), &[3]);
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn mean(&mut self, x: ValueId, dims: &[isize], keepdim: bool) -> Result<ValueId> {
        self.reduce(Reduction::Mean, x, dims, keepdim)
    }

    /// `torch.amax(x, dims, keepdim)`: the maximum (a tie shares the gradient evenly).
    ///
    /// # Examples
    ///
    /// ```
    /// use candle_core::{DType, Device, Tensor};
    /// use wick_graph::{Executor, GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    /// let x = b.input("x", &[2, 3], DType::F32)?;
    /// let top = b.amax(x, &[1], false)?;
    /// let at = b.argmax(x, 1, false)?; // u32, no gradient
    /// b.output(top);
    /// b.output(at);
    /// let mut exec = Executor::new(b.finish(), &Device::Cpu);
    /// exec.set("x", &Tensor::new(&[[1f32, 5., 2.], [7., 0., 7.]], &Device::Cpu)?)?;
    /// exec.run()?;
    /// assert_eq!(exec.value(top)?.to_vec1::<f32>()?, [5.0, 7.0]);
    /// assert_eq!(exec.value(at)?.to_vec1::<u32>()?, [1, 0]); // the first maximum
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn amax(&mut self, x: ValueId, dims: &[isize], keepdim: bool) -> Result<ValueId> {
        self.reduce(Reduction::Amax, x, dims, keepdim)
    }

    /// `torch.amin(x, dims, keepdim)`.
    pub fn amin(&mut self, x: ValueId, dims: &[isize], keepdim: bool) -> Result<ValueId> {
        self.reduce(Reduction::Amin, x, dims, keepdim)
    }

    /// `torch.logsumexp(x, dims, keepdim)`, computed stably.
    ///
    /// # Examples
    ///
    /// A mixture's log-likelihood from per-component log-probabilities `[N, K]`:
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let logp = b.input("logp", &[32, 5], DType::F32)?;
    /// let ll = b.logsumexp(logp, &[-1], false)?;
    /// assert_eq!(b.shape(ll), &[32]);
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn logsumexp(&mut self, x: ValueId, dims: &[isize], keepdim: bool) -> Result<ValueId> {
        self.reduce(Reduction::LogSumExp, x, dims, keepdim)
    }

    /// `torch.var(x, dims, correction=correction, keepdim=keepdim)`: the divisor is
    /// `n - correction` (PyTorch's default correction is 1).
    ///
    /// # Examples
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let x = b.input("x", &[4, 10], DType::F32)?;
    /// let unbiased = b.var(x, &[-1], 1, true)?; // torch.var(x, -1, keepdim=True)
    /// let population = b.var(x, &[-1], 0, true)?; // correction=0, as layer norm's
    /// assert_eq!(b.shape(unbiased), &[4, 1]);
    /// assert_eq!(b.shape(population), &[4, 1]);
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn var(
        &mut self,
        x: ValueId,
        dims: &[isize],
        correction: usize,
        keepdim: bool,
    ) -> Result<ValueId> {
        let mut r = Reduce::new(Reduction::Var, self.shape(x), dims, keepdim)
            .map_err(self.build_err("var"))?;
        r.correction = correction;
        self.record_reduce(r, x)
    }

    /// `torch.argmax(x, dim, keepdim)`: `u32` indices of the first maximum (no gradient).
    pub fn argmax(&mut self, x: ValueId, dim: isize, keepdim: bool) -> Result<ValueId> {
        self.reduce(Reduction::Argmax, x, &[dim], keepdim)
    }

    /// `torch.argmin(x, dim, keepdim)`.
    pub fn argmin(&mut self, x: ValueId, dim: isize, keepdim: bool) -> Result<ValueId> {
        self.reduce(Reduction::Argmin, x, &[dim], keepdim)
    }
}

impl NodeOp for ReduceOp {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::Reduce(self.r.op))
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [x] = args(inputs, self.r.op.op_name())?;
        one(self.r.forward(x)?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let (x, y) = (ctx.input(0), ctx.output(0));
        let xs = ctx.shape(x);
        let flops = self.r.backward_flops(&xs);
        let (reads_x, reads_y) = self.r.backward_reads();
        let mut inputs = vec![gy];
        inputs.extend(reads_x.then_some(x));
        inputs.extend(reads_y.then_some(y));
        let op = ReduceBackward {
            r: self.r.clone(),
            shape: xs,
        };
        ctx.record_input_grad(op, inputs, "grad.reduce", flops)
    }
}

impl NodeOp for ReduceBackward {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::ReduceBackward(self.r.op))
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let name = self.r.op.op_name();
        let gy = arg(inputs, 0, name)?;
        let (reads_x, reads_y) = self.r.backward_reads();
        let x = reads_x.then(|| arg(inputs, 1, name)).transpose()?;
        let y = reads_y.then(|| arg(inputs, 2, name)).transpose()?;
        one(self.r.backward(gy, &self.shape, x, y)?)
    }
}
