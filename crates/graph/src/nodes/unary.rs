//! Element-wise functions of one tensor (`exp`, `log`, `sqrt`, `rsqrt`, `pow`, `abs`,
//! `neg`, `sin`, `cos`, `clamp`, scalar add and multiply, `full_like`): recording, backward rule,
//! execution (kernels in `wick_ops::tensor::unary`).

use std::sync::Arc;

use wick_ops::tensor::unary::{Saved, Unary};
use wick_ops::tensor::TensorKernel;
use wick_ops::Kernel;

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::{arg, one, BackwardCtx, Inputs, KernelResult, NodeOp, ValueId};

/// An element-wise function. in: x; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct UnaryOp {
    /// The function and its constants.
    pub f: Unary,
}

/// Its gradient. in: grad_y, and x or y when the function's gradient reads one; out:
/// grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct UnaryBackward {
    /// The function and its constants.
    pub f: Unary,
}

impl GraphBuilder {
    /// The element-wise function `f` of `x` (the calls below are shorthands).
    pub fn unary(&mut self, f: Unary, x: ValueId) -> Result<ValueId> {
        let op = f.op_name();
        self.forward_only(op)?;
        f.check().map_err(self.build_err(op))?;
        self.expect_float(op, "the input", x)?;
        let xs = self.shape(x).to_vec();
        let flops = f.flops(xs.iter().product());
        let new = (op, xs, self.dtype_of(x));
        let y = self.push_one(Arc::new(UnaryOp { f }), vec![x], new, flops);
        if !f.differentiable() {
            self.stop_gradient(y);
        }
        Ok(y)
    }

    shorthands! {
        unary(x) {
            /// `torch.exp(x)`.
            ///
            /// # Examples
            ///
            /// A softplus, `log(1 + exp(x))`, from the element-wise calls, run:
            ///
            /// ```
            /// use candle_core::{DType, Device, Tensor};
            /// use wick_graph::{Executor, GraphBuilder, Mode};
            ///
            /// let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
            /// let x = b.input("x", &[3], DType::F32)?;
            /// let e = b.exp(x)?;
            /// let e1 = b.add_scalar(e, 1.0)?;
            /// let y = b.log(e1)?;
            /// b.output(y);
            /// let mut exec = Executor::new(b.finish(), &Device::Cpu);
            /// exec.set("x", &Tensor::new(&[-20f32, 0.0, 20.0], &Device::Cpu)?)?;
            /// exec.run()?;
            /// let y: Vec<f32> = exec.value(y)?.to_vec1()?;
            /// assert!((y[1] - 2f32.ln()).abs() < 1e-6 && (y[2] - 20.0).abs() < 1e-5);
            /// # Ok::<(), Box<dyn std::error::Error>>(())
            /// ```
            exp => Unary::Exp;
            /// `torch.log(x)`, the natural logarithm.
            log => Unary::Log;
            /// `torch.sqrt(x)`.
            sqrt => Unary::Sqrt;
            /// `torch.rsqrt(x)`: `1/√x`.
            rsqrt => Unary::Rsqrt;
        }
    }

    /// `torch.pow(x, exponent)` for a constant exponent.
    ///
    /// # Examples
    ///
    /// A root mean square, `sqrt(mean(x²) + eps)`:
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let x = b.input("x", &[4, 16], DType::F32)?;
    /// let sq = b.pow(x, 2.0)?;
    /// let ms = b.mean(sq, &[-1], true)?;
    /// let ms = b.add_scalar(ms, 1e-6)?;
    /// let rms = b.sqrt(ms)?;
    /// assert_eq!(b.shape(rms), &[4, 1]);
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn pow(&mut self, x: ValueId, exponent: f64) -> Result<ValueId> {
        self.unary(Unary::Pow(exponent), x)
    }

    shorthands! {
        unary(x) {
            /// `torch.abs(x)`.
            abs => Unary::Abs;
            /// `torch.neg(x)`: `-x`.
            neg => Unary::Neg;
            /// `torch.sin(x)` (radians): sinusoidal positions, rotary tables.
            sin => Unary::Sin;
            /// `torch.cos(x)` (radians).
            cos => Unary::Cos;
        }
    }

    /// `torch.clamp(x, min, max)`, either bound optional.
    ///
    /// # Examples
    ///
    /// Probabilities kept away from 0 and 1 before a log, as a VAE's decoder does:
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let p = b.input("p", &[8, 784], DType::F32)?;
    /// let safe = b.clamp(p, Some(1e-6), Some(1.0 - 1e-6))?;
    /// let only_min = b.clamp(p, Some(0.0), None)?; // torch.clamp(p, min=0)
    /// assert_eq!(b.shape(safe), b.shape(only_min));
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn clamp(&mut self, x: ValueId, min: Option<f64>, max: Option<f64>) -> Result<ValueId> {
        self.unary(Unary::Clamp { min, max }, x)
    }

    /// `x + value` for a constant `value`.
    pub fn add_scalar(&mut self, x: ValueId, value: f64) -> Result<ValueId> {
        self.unary(Unary::AddScalar(value), x)
    }

    /// `x * value` for a constant `value` ([`scale`](GraphBuilder::scale) under
    /// PyTorch's name).
    pub fn mul_scalar(&mut self, x: ValueId, value: f64) -> Result<ValueId> {
        self.scale(x, value)
    }

    /// `torch.full_like(x, value)`: a constant recorded in the graph, of `x`'s shape and
    /// dtype (no gradient flows through it).
    ///
    /// # Examples
    ///
    /// A constant target of the input's shape (a GAN's "real" labels):
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let logits = b.input("d_out", &[16, 1], DType::F32)?;
    /// let real = b.ones_like(logits)?;
    /// let loss = b.bce_with_logits(logits, real)?;
    /// assert!(b.shape(loss).is_empty());
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn full_like(&mut self, x: ValueId, value: f64) -> Result<ValueId> {
        self.unary(Unary::Fill(value), x)
    }

    /// `torch.zeros_like(x)`.
    pub fn zeros_like(&mut self, x: ValueId) -> Result<ValueId> {
        self.full_like(x, 0.0)
    }

    /// `torch.ones_like(x)`.
    pub fn ones_like(&mut self, x: ValueId) -> Result<ValueId> {
        self.full_like(x, 1.0)
    }
}

impl NodeOp for UnaryOp {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::Unary(self.f.kind()))
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        one(self.f.forward(arg(inputs, 0, self.f.op_name())?)?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let xs = ctx.shape(ctx.input(0));
        let mut inputs = vec![gy];
        match self.f.saved() {
            Saved::Nothing => {}
            Saved::Input => inputs.push(ctx.input(0)),
            Saved::Output => inputs.push(ctx.output(0)),
        }
        let flops = self.f.backward_flops(xs.iter().product());
        let out = vec![("grad.unary", xs, ctx.dtype())];
        let g = ctx.record(UnaryBackward { f: self.f }, inputs, out, flops);
        ctx.contribute_to_inputs(&g);
        Ok(())
    }
}

impl NodeOp for UnaryBackward {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::UnaryBackward(self.f.kind()))
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let op = self.f.op_name();
        let gy = arg(inputs, 0, op)?;
        let saved = match self.f.saved() {
            Saved::Nothing => None,
            _ => Some(arg(inputs, 1, op)?),
        };
        one(self.f.backward(gy, saved)?)
    }
}
