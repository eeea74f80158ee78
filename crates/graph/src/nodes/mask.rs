//! Masks and selection by mask: comparisons giving `u8` masks, `where` and
//! `masked_fill` (the causal mask of a GPT), and `detach`: recording, backward rules,
//! execution (kernels in `wick_ops::tensor::mask`).

use std::sync::Arc;

use wick_ops::tensor::mask::{self as kernels, Comparison, Rhs};
use wick_ops::tensor::TensorKernel;
use wick_ops::{broadcast, Kernel, OpError};

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::{arg, args, one, BackwardCtx, Inputs, KernelResult, NodeOp, ValueId};

/// A comparison against a tensor (in: a, b) or a scalar (in: a); out: a `u8` mask.
#[derive(Debug, Clone, PartialEq)]
pub struct Compare {
    /// Which comparison.
    pub cmp: Comparison,
    /// The scalar compared against, if not a tensor.
    pub scalar: Option<f64>,
}

/// `where(cond, a, b)`. in: cond, a, b; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct Where;

/// `where`'s gradient to `a` or `b`. in: grad_y, cond; out: the gradient.
#[derive(Debug, Clone, PartialEq)]
pub struct WhereBackward {
    /// Whether it is `a`'s gradient (else `b`'s).
    pub to_a: bool,
    /// That operand's shape.
    pub shape: Vec<usize>,
}

/// `x.masked_fill(mask, value)`. in: x, mask; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct MaskedFill {
    /// The value written where the mask is set.
    pub value: f64,
}

/// `masked_fill`'s gradient: the output gradient where the mask is clear. in: grad_y,
/// mask; out: grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct MaskedFillBackward;

/// `x.detach()`: the same values, and backward stops here. in: x; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct Detach;

impl GraphBuilder {
    /// `a cmp b` with broadcasting: a `u8` mask (1 where true), with no gradient.
    ///
    /// # Examples
    ///
    /// Masks are `u8`, as `torch.bool` is stored; they feed [`where_`](GraphBuilder::where_)
    /// and [`masked_fill`](GraphBuilder::masked_fill):
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    /// use wick_ops::tensor::mask::Comparison;
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let x = b.input("x", &[4, 10], DType::F32)?;
    /// let limit = b.input("limit", &[1, 10], DType::F32)?;
    /// let over = b.compare(Comparison::Gt, x, limit)?; // b.gt(x, limit)
    /// assert_eq!((b.shape(over), b.dtype(over)), (&[4usize, 10][..], DType::U8));
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn compare(&mut self, cmp: Comparison, a: ValueId, b: ValueId) -> Result<ValueId> {
        let name = cmp.op_name();
        self.forward_only(name)?;
        self.expect_same_dtype(name, a, b)?;
        let out = broadcast::broadcast_shape(name, self.shape(a), self.shape(b))
            .map_err(self.build_err(name))?;
        self.record_compare(Compare { cmp, scalar: None }, vec![a, b], out)
    }

    /// `a cmp value` for a scalar `value`: a `u8` mask.
    pub fn compare_scalar(&mut self, cmp: Comparison, a: ValueId, value: f64) -> Result<ValueId> {
        self.forward_only(cmp.op_name())?;
        let out = self.shape(a).to_vec();
        self.record_compare(
            Compare {
                cmp,
                scalar: Some(value),
            },
            vec![a],
            out,
        )
    }

    fn record_compare(
        &mut self,
        op: Compare,
        inputs: Vec<ValueId>,
        out: Vec<usize>,
    ) -> Result<ValueId> {
        let flops = broadcast::flops(&out);
        let new = vec![(op.cmp.op_name(), out, candle_core::DType::U8)];
        let y = self.push(Arc::new(op), inputs, new, vec![], flops)[0];
        self.stop_gradient(y);
        Ok(y)
    }

    shorthands! {
        compare(a, b) {
            /// `torch.eq(a, b)`.
            eq => Comparison::Eq;
            /// `torch.ne(a, b)`.
            ne => Comparison::Ne;
            /// `torch.lt(a, b)`.
            lt => Comparison::Lt;
            /// `torch.le(a, b)`.
            le => Comparison::Le;
            /// `torch.gt(a, b)`.
            gt => Comparison::Gt;
            /// `torch.ge(a, b)`.
            ge => Comparison::Ge;
        }
    }

    /// `torch.where(cond, a, b)`: `a` where the `u8` mask `cond` is set, else `b`; the
    /// three broadcast together.
    ///
    /// # Examples
    ///
    /// A ReLU written with a mask, `torch.where(x > 0, x, 0)`:
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let x = b.input("x", &[4, 10], DType::F32)?;
    /// let zero = b.zeros_like(x)?;
    /// let positive = b.gt(x, zero)?;
    /// let y = b.where_(positive, x, zero)?;
    /// assert_eq!(b.shape(y), &[4, 10]);
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn where_(&mut self, cond: ValueId, a: ValueId, b: ValueId) -> Result<ValueId> {
        self.forward_only("where")?;
        kernels::check_mask_dtype("where", self.dtype_of(cond)).map_err(self.build_err("where"))?;
        self.expect_same_dtype("where", a, b)?;
        let out = kernels::where_shape(self.shape(cond), self.shape(a), self.shape(b))
            .map_err(self.build_err("where"))?;
        let flops = broadcast::flops(&out);
        let new = vec![("where", out, self.dtype_of(a))];
        Ok(self.push(Arc::new(Where), vec![cond, a, b], new, vec![], flops)[0])
    }

    /// `x.masked_fill(mask, value)`: `value` where the `u8` mask (broadcast to `x`) is
    /// set. `value` may be infinite: `-inf` above the diagonal is a causal mask.
    ///
    /// # Examples
    ///
    /// ```
    /// use candle_core::{DType, Device, Tensor};
    /// use wick_graph::{Executor, GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    /// let scores = b.input("scores", &[2, 2], DType::F32)?;
    /// let causal = b.input("causal", &[2, 2], DType::U8)?;
    /// let masked = b.masked_fill(scores, causal, f64::NEG_INFINITY)?;
    /// let p = b.softmax(masked, 1)?;
    /// b.output(p);
    /// let mut exec = Executor::new(b.finish(), &Device::Cpu);
    /// exec.set("scores", &Tensor::new(&[[1f32, 2.], [3., 4.]], &Device::Cpu)?)?;
    /// exec.set("causal", &Tensor::new(&[[0u8, 1], [0, 0]], &Device::Cpu)?)?;
    /// exec.run()?;
    /// let p: Vec<Vec<f32>> = exec.value(p)?.to_vec2()?;
    /// assert_eq!(p[0], [1.0, 0.0]); // the first token sees only itself
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn masked_fill(&mut self, x: ValueId, mask: ValueId, value: f64) -> Result<ValueId> {
        self.forward_only("masked_fill")?;
        kernels::check_mask_dtype("masked_fill", self.dtype_of(mask))
            .map_err(self.build_err("masked_fill"))?;
        if value.is_nan() {
            return Err(self.build_err("masked_fill")(OpError::invalid(
                "masked_fill",
                "the value is NaN",
            )));
        }
        let xs = self.shape(x).to_vec();
        kernels::check_masked_fill(&xs, self.shape(mask)).map_err(self.build_err("masked_fill"))?;
        let flops = broadcast::flops(&xs);
        let new = vec![("masked_fill", xs, self.dtype_of(x))];
        Ok(self.push(
            Arc::new(MaskedFill { value }),
            vec![x, mask],
            new,
            vec![],
            flops,
        )[0])
    }

    /// `x.detach()`: the same values, through which no gradient flows (a GAN's fake
    /// images for the discriminator's step; a frozen feature extractor's output).
    ///
    /// # Examples
    ///
    /// The discriminator's step on a generator's images, which must not train the
    /// generator:
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let z = b.input("z", &[8, 16], DType::F32)?;
    /// let w = b.param("generator.weight", &[32, 16])?;
    /// let fake = b.linear(z, w, None)?;
    /// let fake_for_d = b.detach(fake)?;
    /// let d = b.param("discriminator.weight", &[1, 32])?;
    /// let score = b.linear(fake_for_d, d, None)?;
    /// let loss = b.sum(score, &[], false)?;
    /// let grads = b.backward(loss)?;
    /// let trained: Vec<_> = grads.iter().map(|(p, _)| p).collect();
    /// assert_eq!(trained, [d], "no gradient reaches the generator");
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn detach(&mut self, x: ValueId) -> Result<ValueId> {
        self.forward_only("detach")?;
        let new = ("detach", self.shape(x).to_vec(), self.dtype_of(x));
        let y = self.push_one(Arc::new(Detach), vec![x], new, 0);
        self.stop_gradient(y);
        Ok(y)
    }
}

impl NodeOp for Compare {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::Compare(self.cmp))
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let name = self.cmp.op_name();
        let a = arg(inputs, 0, name)?;
        let rhs = match self.scalar {
            Some(v) => Rhs::Scalar(v),
            None => Rhs::Tensor(arg(inputs, 1, name)?),
        };
        one(kernels::compare(self.cmp, a, rhs)?)
    }
}

impl NodeOp for Where {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::Where)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [cond, a, b] = args(inputs, "where")?;
        one(kernels::where_(cond, a, b)?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let cond = ctx.input(0);
        let flops = ctx.shape(ctx.output(0)).iter().product::<usize>() as u64;
        for (i, to_a) in [(1, true), (2, false)] {
            let v = ctx.input(i);
            if !ctx.needs_grad(v) {
                continue;
            }
            let op = WhereBackward {
                to_a,
                shape: ctx.shape(v),
            };
            ctx.record_grad_of(v, op, vec![gy, cond], "grad.where", flops);
        }
        Ok(())
    }
}

impl NodeOp for WhereBackward {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::WhereBackward)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [gy, cond] = args(inputs, "where")?;
        one(kernels::where_backward(gy, cond, self.to_a, &self.shape)?)
    }
}

impl NodeOp for MaskedFill {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::MaskedFill)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [x, mask] = args(inputs, "masked_fill")?;
        one(kernels::masked_fill(x, mask, self.value)?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let xs = ctx.shape(ctx.input(0));
        let flops = xs.iter().product::<usize>() as u64;
        ctx.record_input_grad(
            MaskedFillBackward,
            vec![gy, ctx.input(1)],
            "grad.masked_fill",
            flops,
        )
    }
}

impl NodeOp for MaskedFillBackward {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::MaskedFillBackward)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [gy, mask] = args(inputs, "masked_fill")?;
        one(kernels::masked_fill_backward(gy, mask)?)
    }
}

impl NodeOp for Detach {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::Detach)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        one(arg(inputs, 0, "detach")?.clone())
    }
}
