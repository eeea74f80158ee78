//! The fully connected layer and the flatten before it: recording, backward rules,
//! execution (kernels in `wick_ops::linear`; a reshape moves no data).

use std::sync::Arc;

use wick_ops::linear::{self, LinearGrads};
use wick_ops::{Kernel, OpError};

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::ValueId;
use crate::ir::{arg, args, one, BackwardCtx, Inputs, KernelResult, NodeOp};

/// Fully connected forward. in: x `[N, in]`, weight `[out, in]`, `[bias]`; out: y `[N, out]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Linear {
    /// Whether a bias input follows the weight.
    pub has_bias: bool,
}

/// Fully connected backward. in: grad_y, x, weight; out: grad_x, grad_weight, `[grad_bias]`.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearBackward {
    /// Whether the layer has a bias.
    pub has_bias: bool,
}

/// A reshape (flatten, and its backward). in: x; out: x reshaped to `shape`.
#[derive(Debug, Clone, PartialEq)]
pub struct Reshape {
    /// The output shape.
    pub shape: Vec<usize>,
}

impl GraphBuilder {
    /// Fully connected layer `x·Wᵀ + b` with `weight` `[out, in]` and an optional bias `[out]`.
    pub fn linear(
        &mut self,
        x: ValueId,
        weight: ValueId,
        bias: Option<ValueId>,
    ) -> Result<ValueId> {
        self.forward_only("linear")?;
        let (xs, ws) = (self.shape(x).to_vec(), self.shape(weight).to_vec());
        let out = linear::linear_output_shape(&xs, &ws, bias.map(|b| self.shape(b)))
            .map_err(self.build_err("linear"))?;
        let weight = self.autocast(weight)?;
        let mut inputs = vec![x, weight];
        inputs.extend(bias);
        let op = Arc::new(Linear {
            has_bias: bias.is_some(),
        });
        let dtype = crate::ir::product_output_dtype(self.dtype_of(x), self.dtype_of(weight));
        let new = vec![("linear", out.to_vec(), dtype)];
        Ok(self.push(op, inputs, new, vec![], linear::linear_flops(&xs, &ws))[0])
    }

    /// Flattens every dimension after the first: `[N, ...]` -> `[N, prod(...)]`.
    pub fn flatten(&mut self, x: ValueId) -> Result<ValueId> {
        self.forward_only("flatten")?;
        let xs = self.shape(x).to_vec();
        let Some((&n, rest)) = xs.split_first() else {
            return Err(self.build_err("flatten")(OpError::invalid(
                "flatten",
                "cannot flatten a 0-dim value",
            )));
        };
        let shape = vec![n, rest.iter().product()];
        let new = ("flatten", shape.clone(), self.dtype_of(x));
        Ok(self.push_one(Arc::new(Reshape { shape }), vec![x], new, 0))
    }
}

impl NodeOp for Linear {
    fn kernel(&self) -> Kernel {
        Kernel::LinearForward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let bias = if self.has_bias {
            Some(arg(inputs, 2, "linear")?)
        } else {
            None
        };
        let [x, w] = args(inputs, "linear")?;
        one(linear::linear(x, w, bias)?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let (x, w) = (ctx.input(0), ctx.input(1));
        let (xs, ws, dt) = (ctx.shape(x), ctx.shape(w), ctx.dtype());
        let flops = linear::linear_backward_flops(&xs, &ws);
        let mut outs = vec![("grad.linear.x", xs, dt), ("grad.linear.w", ws.clone(), dt)];
        if self.has_bias {
            outs.push(("grad.linear.b", vec![ws[0]], dt));
        }
        let op = LinearBackward {
            has_bias: self.has_bias,
        };
        let g = ctx.record(op, vec![gy, x, w], outs, flops);
        ctx.contribute_to_inputs(&g);
        Ok(())
    }
}

impl NodeOp for LinearBackward {
    fn kernel(&self) -> Kernel {
        Kernel::LinearBackward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [gy, x, w] = args(inputs, "linear")?;
        let LinearGrads { x, weight, bias } = linear::linear_backward(gy, x, w, self.has_bias)?;
        Ok(vec![Some(x), Some(weight), bias])
    }
}

impl NodeOp for Reshape {
    fn kernel(&self) -> Kernel {
        Kernel::Reshape
    }

    /// A view of its input.
    fn moves_data(&self) -> bool {
        false
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let x = arg(inputs, 0, "reshape")?;
        one(x
            .reshape(self.shape.as_slice())
            .map_err(|e| OpError::candle("reshape", e))?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let xs = ctx.shape(ctx.input(0));
        let op = Reshape { shape: xs.clone() };
        let gy = ctx.grad_y()?;
        ctx.record_grad_of(ctx.input(0), op, vec![gy], "grad.reshape", 0);
        Ok(())
    }
}
