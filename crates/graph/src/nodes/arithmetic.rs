//! Element-wise arithmetic with broadcasting (`mul`, `sub`, `div`, `broadcast_add`) and
//! multiplication by a constant (`scale`): recording, backward rules, execution (kernels
//! in `wick_ops::broadcast`).

use std::sync::Arc;

use wick_ops::broadcast::{self, BinaryOp, Operand};
use wick_ops::Kernel;

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::{arg, args, one, BackwardCtx, Inputs, KernelResult, NodeOp, ValueId};

/// `a op b` with broadcasting. in: a, b; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct Binary {
    /// The operation.
    pub op: BinaryOp,
}

/// One operand's gradient. in: grad_y, and a, b for `mul` and `div`; out: the gradient,
/// of that operand's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct BinaryBackward {
    /// The operation.
    pub op: BinaryOp,
    /// The operand differentiated.
    pub operand: Operand,
    /// That operand's shape.
    pub shape: Vec<usize>,
}

/// `x · factor`; also its own gradient. in: x; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct Scale {
    /// The constant factor.
    pub factor: f64,
}

impl GraphBuilder {
    /// `a op b` with PyTorch's broadcasting (`[N, C, H, W] * [N, C, 1, 1]`).
    pub fn binary(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> Result<ValueId> {
        let name = op.name();
        self.forward_only(name)?;
        let (sa, sb) = (self.shape(a).to_vec(), self.shape(b).to_vec());
        let out = broadcast::broadcast_shape(name, &sa, &sb).map_err(self.build_err(name))?;
        if self.dtype_of(a) != self.dtype_of(b) {
            return Err(self.build_err(name)(wick_ops::invalid!(
                name,
                "operands have dtypes {:?} and {:?}",
                self.dtype_of(a),
                self.dtype_of(b)
            )));
        }
        let flops = broadcast::flops(&out);
        let new = vec![(name, out, self.dtype_of(a))];
        Ok(self.push(Arc::new(Binary { op }), vec![a, b], new, vec![], flops)[0])
    }

    shorthands! {
        binary(a, b) {
            /// `a * b`, broadcasting.
            mul => BinaryOp::Mul;
            /// `a - b`, broadcasting.
            sub => BinaryOp::Sub;
            /// `a / b`, broadcasting.
            div => BinaryOp::Div;
            /// `a + b`, broadcasting ([`add`](GraphBuilder::add) insists on equal shapes).
            broadcast_add => BinaryOp::Add;
        }
    }

    /// `x · factor` for a constant `factor`.
    pub fn scale(&mut self, x: ValueId, factor: f64) -> Result<ValueId> {
        self.forward_only("scale")?;
        if !factor.is_finite() {
            return Err(self.build_err("scale")(wick_ops::invalid!(
                "scale",
                "the factor must be finite, got {factor}"
            )));
        }
        let xs = self.shape(x).to_vec();
        let flops = broadcast::flops(&xs);
        let new = ("scale", xs, self.dtype_of(x));
        Ok(self.push_one(Arc::new(Scale { factor }), vec![x], new, flops))
    }
}

impl NodeOp for Binary {
    fn kernel(&self) -> Kernel {
        Kernel::Binary(self.op)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [a, b] = args(inputs, self.op.name())?;
        one(broadcast::forward(self.op, a, b)?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let out = ctx.shape(ctx.output(0));
        for (i, operand) in [(0, Operand::Lhs), (1, Operand::Rhs)] {
            let v = ctx.input(i);
            if !ctx.needs_grad(v) {
                continue;
            }
            let op = BinaryBackward {
                op: self.op,
                operand,
                shape: ctx.shape(v),
            };
            let flops = broadcast::backward_flops(self.op, &out);
            let inputs = if self.op.backward_reads_operands() {
                vec![gy, ctx.input(0), ctx.input(1)]
            } else {
                vec![gy]
            };
            ctx.record_grad_of(v, op, inputs, "grad.binary", flops);
        }
        Ok(())
    }
}

impl NodeOp for BinaryBackward {
    fn kernel(&self) -> Kernel {
        Kernel::BinaryBackward(self.op)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let name = self.op.backward_name();
        if self.op.backward_reads_operands() {
            let [gy, a, b] = args(inputs, name)?;
            return one(broadcast::backward(self.op, self.operand, gy, a, b)?);
        }
        let gy = arg(inputs, 0, name)?;
        let g = match (self.op, self.operand) {
            (BinaryOp::Sub, Operand::Rhs) => broadcast::scale(gy, -1.0)?,
            _ => gy.clone(),
        };
        one(broadcast::sum_to_shape(name, &g, &self.shape)?)
    }
}

impl NodeOp for Scale {
    fn kernel(&self) -> Kernel {
        Kernel::Scale
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        one(broadcast::scale(arg(inputs, 0, "scale")?, self.factor)?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let xs = ctx.shape(ctx.input(0));
        let flops = broadcast::flops(&xs);
        let g = ctx.record(
            self.clone(),
            vec![gy],
            vec![("grad.scale", xs, ctx.dtype())],
            flops,
        );
        ctx.contribute_to_inputs(&g);
        Ok(())
    }
}
