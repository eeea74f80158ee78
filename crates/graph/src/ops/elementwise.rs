//! ReLU and the residual add: recording, backward rules,
//! execution (kernels in `wick_ops::activation` and `wick_ops::elementwise`).

use std::sync::Arc;

use wick_ops::{activation, elementwise, Kernel};

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::ValueId;
use crate::ir::{arg, args, one, BackwardCtx, Inputs, KernelResult, NodeOp};

/// ReLU forward. in: x; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct Relu;

/// ReLU backward. in: grad_y, y (the forward output: y > 0 exactly where x > 0); out: grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct ReluBackward;

/// Element-wise addition. in: a, b; out: a + b.
#[derive(Debug, Clone, PartialEq)]
pub struct Add;

impl GraphBuilder {
    /// ReLU.
    pub fn relu(&mut self, x: ValueId) -> Result<ValueId> {
        self.forward_only("relu")?;
        let xs = self.shape(x).to_vec();
        let flops = activation::relu_flops(&xs);
        let new = vec![("relu", xs, self.dtype_of(x))];
        Ok(self.push(Arc::new(Relu), vec![x], new, vec![], flops)[0])
    }

    /// Element-wise `a + b` (same shapes; the residual connection).
    pub fn add(&mut self, a: ValueId, b: ValueId) -> Result<ValueId> {
        self.forward_only("add")?;
        let (sa, sb) = (self.shape(a).to_vec(), self.shape(b).to_vec());
        wick_ops::shape::same("add", "lhs", &sa, "rhs", &sb).map_err(self.build_err("add"))?;
        let flops = elementwise::add_flops(&sa);
        let new = vec![("add", sa, self.dtype_of(a))];
        Ok(self.push(Arc::new(Add), vec![a, b], new, vec![], flops)[0])
    }
}

impl NodeOp for Relu {
    fn kernel(&self) -> Kernel {
        Kernel::ReLU
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        one(activation::relu(arg(inputs, 0, "relu")?)?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let (gy, y) = (ctx.grad_y()?, ctx.output(0));
        let xs = ctx.shape(ctx.input(0));
        let flops = activation::relu_backward_flops(&xs);
        let g = ctx.record(
            ReluBackward,
            vec![gy, y],
            vec![("grad.relu", xs, ctx.dtype())],
            flops,
        );
        ctx.contribute(ctx.input(0), g[0]);
        Ok(())
    }
}

impl NodeOp for ReluBackward {
    fn kernel(&self) -> Kernel {
        Kernel::ReLUBackward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [gy, y] = args(inputs, "relu")?;
        one(activation::relu_backward(gy, y)?)
    }
}

impl NodeOp for Add {
    fn kernel(&self) -> Kernel {
        Kernel::Add
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [a, b] = args(inputs, "add")?;
        one(elementwise::add(a, b)?)
    }

    /// Both inputs receive the output gradient itself: no node is recorded.
    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        ctx.contribute_to_inputs(&[gy, gy]);
        Ok(())
    }
}
