//! Convolution: recording, backward rule, execution (kernels in `wick_ops::conv`).

use std::sync::Arc;

use wick_ops::conv::{self, Conv2dParams};
use wick_ops::{Kernel, KernelVariant, Products};

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::ValueId;
use crate::ir::{arg, args, one, BackwardCtx, Inputs, KernelResult, NodeOp};

const OP: &str = "conv2d";

/// Convolution forward. in: x, weight, `[bias]`; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct Conv2d {
    /// Stride, padding, dilation, groups.
    pub params: Conv2dParams,
    /// Whether a bias input follows the weight.
    pub has_bias: bool,
}

/// Convolution input gradient. in: grad_y, weight; out: grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvBackwardData {
    /// The forward settings.
    pub params: Conv2dParams,
    /// The forward input's shape.
    pub input_shape: Vec<usize>,
}

/// Convolution weight gradient. in: grad_y, x; out: grad_weight.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvBackwardFilter {
    /// The forward settings.
    pub params: Conv2dParams,
    /// The weight's shape.
    pub weight_shape: Vec<usize>,
    /// Its products: 16-bit when the forward's weight was cast to a 16-bit float.
    pub products: Products,
}

/// Convolution bias gradient. in: grad_y; out: grad_bias.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvBackwardBias;

impl GraphBuilder {
    /// 2-D convolution of `x` `[N, C, H, W]` with `weight` `[O, C/groups, KH, KW]` and an
    /// optional bias `[O]`.
    pub fn conv2d(
        &mut self,
        x: ValueId,
        weight: ValueId,
        bias: Option<ValueId>,
        p: Conv2dParams,
    ) -> Result<ValueId> {
        self.forward_only(OP)?;
        let (xs, ws) = (self.shape(x).to_vec(), self.shape(weight).to_vec());
        let out = p.output_shape(&xs, &ws).map_err(self.build_err(OP))?;
        if let Some(b) = bias {
            p.check_bias(&ws, self.shape(b))
                .map_err(self.build_err(OP))?;
        }
        // Autocast runs the dense convolutions with bf16 products (a bf16 weight; the
        // input is rounded as the product reads it); depthwise ones (a few values deep
        // per output) stay f32.
        let weight = if ws[1] * ws[2] * ws[3] >= 16 {
            self.autocast(weight)?
        } else {
            weight
        };
        let mut inputs = vec![x, weight];
        inputs.extend(bias);
        let op = Conv2d {
            params: p,
            has_bias: bias.is_some(),
        };
        let dtype = crate::ir::product_output_dtype(self.dtype_of(x), self.dtype_of(weight));
        let new = ("conv", out.to_vec(), dtype);
        Ok(self.push_one(Arc::new(op), inputs, new, p.flops(&xs, &ws)))
    }
}

impl NodeOp for Conv2d {
    fn kernel(&self) -> Kernel {
        Kernel::ConvForward
    }

    fn variant(&self, input_shapes: &[Vec<usize>]) -> Option<KernelVariant> {
        self.params.variant(input_shapes.get(1)?)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let bias = if self.has_bias {
            Some(arg(inputs, 2, OP)?)
        } else {
            None
        };
        one(conv::conv2d(
            arg(inputs, 0, OP)?,
            arg(inputs, 1, OP)?,
            bias,
            &self.params,
        )?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let (x, w) = (ctx.input(0), ctx.input(1));
        let (xs, ws) = (ctx.shape(x), ctx.shape(w));
        let (dt, flops) = (ctx.dtype(), self.params.flops(&xs, &ws));
        if ctx.needs_grad(x) {
            let op = ConvBackwardData {
                params: self.params,
                input_shape: xs.clone(),
            };
            let g = ctx.record(op, vec![gy, w], vec![("grad.conv.x", xs, dt)], flops);
            ctx.contribute(x, g[0]);
        }
        if ctx.needs_grad(w) {
            let op = ConvBackwardFilter {
                params: self.params,
                weight_shape: ws.clone(),
                products: Products::of(ctx.value_dtype(w)),
            };
            let g = ctx.record(
                op,
                vec![gy, x],
                vec![("grad.conv.w", ws.clone(), dt)],
                flops,
            );
            ctx.contribute(w, g[0]);
        }
        if self.has_bias && ctx.needs_grad(ctx.input(2)) {
            let flops = conv::conv2d_backward_bias_flops(&ctx.shape(ctx.output(0)));
            let out = vec![("grad.conv.b", vec![ws[0]], dt)];
            let g = ctx.record(ConvBackwardBias, vec![gy], out, flops);
            ctx.contribute(ctx.input(2), g[0]);
        }
        Ok(())
    }
}

impl NodeOp for ConvBackwardData {
    fn kernel(&self) -> Kernel {
        Kernel::ConvBackwardData
    }

    fn variant(&self, input_shapes: &[Vec<usize>]) -> Option<KernelVariant> {
        self.params.variant(input_shapes.get(1)?)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [gy, w] = args(inputs, OP)?;
        one(conv::conv2d_backward_data(
            gy,
            w,
            &self.input_shape,
            &self.params,
        )?)
    }
}

impl NodeOp for ConvBackwardFilter {
    fn kernel(&self) -> Kernel {
        Kernel::ConvBackwardFilter
    }

    fn compute_dtype(&self) -> Option<candle_core::DType> {
        self.products.low_dtype()
    }

    fn variant(&self, _input_shapes: &[Vec<usize>]) -> Option<KernelVariant> {
        self.params.variant(&self.weight_shape)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [gy, x] = args(inputs, OP)?;
        let (shape, p) = (&self.weight_shape, &self.params);
        one(conv::conv2d_backward_filter_with(
            gy,
            x,
            shape,
            p,
            self.products,
        )?)
    }
}

impl NodeOp for ConvBackwardBias {
    fn kernel(&self) -> Kernel {
        Kernel::ConvBackwardBias
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        one(conv::conv2d_backward_bias(arg(inputs, 0, OP)?)?)
    }
}
