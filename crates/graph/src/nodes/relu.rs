//! ReLU: recording, backward rule, execution (kernels in `wick_ops::relu`).

use std::sync::Arc;

use wick_ops::{relu, Kernel};

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::{arg, binary, one, BackwardCtx, Inputs, KernelResult, NodeOp, ValueId};

/// ReLU forward. in: x; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct Relu;

/// ReLU backward. in: grad_y, y (the forward output: y > 0 exactly where x > 0); out: grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct ReluBackward;

impl GraphBuilder {
    /// ReLU.
    pub fn relu(&mut self, x: ValueId) -> Result<ValueId> {
        self.forward_only("relu")?;
        let xs = self.shape(x).to_vec();
        let flops = relu::relu_flops(&xs);
        let new = ("relu", xs, self.dtype_of(x));
        Ok(self.push_one(Arc::new(Relu), vec![x], new, flops))
    }
}

impl NodeOp for Relu {
    fn kernel(&self) -> Kernel {
        Kernel::ReLU
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        one(relu::relu(arg(inputs, 0, "relu")?)?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let (gy, y) = (ctx.grad_y()?, ctx.output(0));
        let xs = ctx.shape(ctx.input(0));
        let flops = relu::relu_backward_flops(&xs);
        ctx.record_grad_of(ctx.input(0), ReluBackward, vec![gy, y], "grad.relu", flops);
        Ok(())
    }
}

impl NodeOp for ReluBackward {
    fn kernel(&self) -> Kernel {
        Kernel::ReLUBackward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        binary(inputs, "relu", relu::relu_backward)
    }
}
