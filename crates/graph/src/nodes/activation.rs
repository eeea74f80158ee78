//! The activations beyond ReLU (sigmoid, tanh, SiLU, GELU, ReLU6, hardswish, hardsigmoid,
//! LeakyReLU): recording, backward rule, execution (kernels in `wick_ops::activation`).

use std::sync::Arc;

use wick_ops::activation::{self, Activation};
use wick_ops::Kernel;

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::{arg, args, one, BackwardCtx, Inputs, KernelResult, NodeOp, ValueId};

/// An activation. in: x; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct ActivationOp {
    /// Which function.
    pub kind: Activation,
    /// LeakyReLU's negative slope (0 for the others).
    pub slope: f64,
}

/// Its gradient. in: grad_y, x (or y, when the kind's gradient reads its output); out: grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct ActivationBackward {
    /// Which function.
    pub kind: Activation,
    /// LeakyReLU's negative slope.
    pub slope: f64,
}

impl GraphBuilder {
    /// The activation `kind` of `x` (LeakyReLU with PyTorch's default slope 0.01; see
    /// [`leaky_relu`](GraphBuilder::leaky_relu) for another).
    pub fn activation(&mut self, kind: Activation, x: ValueId) -> Result<ValueId> {
        let slope = if kind == Activation::LeakyRelu {
            0.01
        } else {
            0.0
        };
        self.record_activation(kind, slope, x)
    }

    fn record_activation(&mut self, kind: Activation, slope: f64, x: ValueId) -> Result<ValueId> {
        let op = kind.name();
        self.forward_only(op)?;
        if !slope.is_finite() {
            return Err(self.build_err(op)(wick_ops::invalid!(
                op,
                "the negative slope must be finite, got {slope}"
            )));
        }
        let xs = self.shape(x).to_vec();
        let flops = activation::flops(kind, &xs);
        let new = (op, xs, self.dtype_of(x));
        let node = Arc::new(ActivationOp { kind, slope });
        Ok(self.push_one(node, vec![x], new, flops))
    }

    shorthands! {
        activation(x) {
            /// `1 / (1 + e^-x)`.
            sigmoid => Activation::Sigmoid;
            /// `tanh(x)`.
            tanh => Activation::Tanh;
            /// SiLU (swish): `x · sigmoid(x)`.
            silu => Activation::Silu;
            /// GELU, exact (`x · Φ(x)`).
            gelu => Activation::Gelu;
            /// GELU's tanh approximation (PyTorch's `approximate="tanh"`).
            gelu_tanh => Activation::GeluTanh;
            /// `min(max(x, 0), 6)`.
            relu6 => Activation::Relu6;
            /// `x · relu6(x + 3) / 6`.
            hardswish => Activation::Hardswish;
            /// `relu6(x + 3) / 6`.
            hardsigmoid => Activation::Hardsigmoid;
        }
    }

    /// LeakyReLU with negative slope `slope`.
    pub fn leaky_relu(&mut self, x: ValueId, slope: f64) -> Result<ValueId> {
        self.record_activation(Activation::LeakyRelu, slope, x)
    }
}

impl NodeOp for ActivationOp {
    fn kernel(&self) -> Kernel {
        Kernel::Activation(self.kind)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let x = arg(inputs, 0, self.kind.name())?;
        one(activation::forward(self.kind, self.slope, x)?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let saved = if self.kind.backward_reads_output() {
            ctx.output(0)
        } else {
            ctx.input(0)
        };
        let xs = ctx.shape(ctx.input(0));
        let flops = activation::backward_flops(self.kind, &xs);
        let op = ActivationBackward {
            kind: self.kind,
            slope: self.slope,
        };
        ctx.record_input_grad(op, vec![gy, saved], "grad.activation", flops)
    }
}

impl NodeOp for ActivationBackward {
    fn kernel(&self) -> Kernel {
        Kernel::ActivationBackward(self.kind)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [gy, saved] = args(inputs, self.kind.backward_name())?;
        one(activation::backward(self.kind, self.slope, gy, saved)?)
    }
}
