//! The residual add, element-wise `a + b` of one shape: recording, backward rule,
//! execution (kernel in `wick_ops::elementwise`).

use std::sync::Arc;

use wick_ops::{elementwise, Kernel};

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::{binary, BackwardCtx, Inputs, KernelResult, NodeOp, ValueId};

/// Element-wise addition. in: a, b; out: a + b.
#[derive(Debug, Clone, PartialEq)]
pub struct Add;

impl GraphBuilder {
    /// Element-wise `a + b` (same shapes; the residual connection).
    pub fn add(&mut self, a: ValueId, b: ValueId) -> Result<ValueId> {
        self.forward_only("add")?;
        let (sa, sb) = (self.shape(a).to_vec(), self.shape(b).to_vec());
        wick_ops::shape::same("add", "lhs", &sa, "rhs", &sb).map_err(self.build_err("add"))?;
        let flops = elementwise::add_flops(&sa);
        let new = ("add", sa, self.dtype_of(a));
        Ok(self.push_one(Arc::new(Add), vec![a, b], new, flops))
    }
}

impl NodeOp for Add {
    fn kernel(&self) -> Kernel {
        Kernel::Add
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        binary(inputs, "add", elementwise::add)
    }

    /// Both inputs receive the output gradient itself: no node is recorded.
    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        ctx.contribute_to_inputs(&[gy, gy]);
        Ok(())
    }
}
