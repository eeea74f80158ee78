//! Upsampling and transposed convolution, the decoder's ops: recording, backward rules,
//! execution (kernels in `wick_ops::resample` and `wick_ops::conv::transpose`).

use std::sync::Arc;

use wick_ops::conv::{transpose, Conv2dParams};
use wick_ops::resample::{self, UpsampleMode};
use wick_ops::Kernel;

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::{arg, args, one, BackwardCtx, Inputs, KernelResult, NodeOp, ValueId};

/// Upsampling. in: x; out: y `[N, C, out_h, out_w]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Upsample {
    /// Nearest or bilinear.
    pub mode: UpsampleMode,
    /// The output's `[out_h, out_w]`.
    pub out: [usize; 2],
}

/// Its gradient. in: grad_y; out: grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct UpsampleBackward {
    /// Nearest or bilinear.
    pub mode: UpsampleMode,
    /// The input's shape.
    pub input: [usize; 4],
}

/// Transposed convolution. in: x, weight `[C_in, C_out / groups, kh, kw]`, `[bias]`; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvTranspose {
    /// Stride, padding, dilation, groups.
    pub params: Conv2dParams,
    /// Extra rows and columns at the output's far edge.
    pub output_padding: [usize; 2],
    /// Whether a bias input follows the weight.
    pub has_bias: bool,
}

/// Its input gradient. in: grad_y, weight; out: grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvTransposeBackwardData {
    /// Stride, padding, dilation, groups.
    pub params: Conv2dParams,
}

/// Its weight gradient. in: grad_y, x; out: grad_weight.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvTransposeBackwardFilter {
    /// Stride, padding, dilation, groups.
    pub params: Conv2dParams,
    /// The weight's shape.
    pub weight: Vec<usize>,
}

impl GraphBuilder {
    /// Upsamples `x` `[N, C, H, W]` to `[N, C, out_h, out_w]` (`F.interpolate` with `size`;
    /// bilinear with `align_corners=False`).
    pub fn upsample(
        &mut self,
        x: ValueId,
        out_h: usize,
        out_w: usize,
        mode: UpsampleMode,
    ) -> Result<ValueId> {
        self.forward_only("upsample")?;
        let xs = self.shape(x).to_vec();
        let [n, c, _, _] =
            resample::check(&xs, [out_h, out_w]).map_err(self.build_err("upsample"))?;
        let flops = resample::flops(&xs, [out_h, out_w]);
        let new = vec![("upsample", vec![n, c, out_h, out_w], self.dtype_of(x))];
        let op = Upsample {
            mode,
            out: [out_h, out_w],
        };
        Ok(self.push(Arc::new(op), vec![x], new, vec![], flops)[0])
    }

    /// Transposed convolution (`ConvTranspose2d`) of `x` by `weight` `[C_in, C_out /
    /// groups, kh, kw]`, with an optional bias `[C_out]`.
    pub fn conv_transpose2d(
        &mut self,
        x: ValueId,
        weight: ValueId,
        bias: Option<ValueId>,
        params: Conv2dParams,
        output_padding: [usize; 2],
    ) -> Result<ValueId> {
        const OP: &str = "conv_transpose2d";
        self.forward_only(OP)?;
        let (xs, ws) = (self.shape(x).to_vec(), self.shape(weight).to_vec());
        let out = transpose::output_shape(&xs, &ws, &params, output_padding)
            .map_err(self.build_err(OP))?;
        if let Some(b) = bias {
            let bs = self.shape(b).to_vec();
            wick_ops::shape::same(OP, "bias", &bs, "output channels", &[out[1]])
                .map_err(self.build_err(OP))?;
        }
        let flops = transpose::flops(&out, &ws, &params);
        let mut inputs = vec![x, weight];
        inputs.extend(bias);
        let op = ConvTranspose {
            params,
            output_padding,
            has_bias: bias.is_some(),
        };
        let new = ("conv_transpose", out.to_vec(), self.dtype_of(x));
        Ok(self.push_one(Arc::new(op), inputs, new, flops))
    }
}

impl NodeOp for Upsample {
    fn kernel(&self) -> Kernel {
        Kernel::UpsampleForward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        one(resample::forward(
            arg(inputs, 0, "upsample")?,
            self.out,
            self.mode,
        )?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let xs = ctx.shape(ctx.input(0));
        let input = [xs[0], xs[1], xs[2], xs[3]];
        let flops = resample::flops(&xs, self.out);
        let op = UpsampleBackward {
            mode: self.mode,
            input,
        };
        ctx.record_input_grad(op, vec![gy], "grad.upsample", flops)
    }
}

impl NodeOp for UpsampleBackward {
    fn kernel(&self) -> Kernel {
        Kernel::UpsampleBackward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        one(resample::backward(
            arg(inputs, 0, "upsample")?,
            self.input,
            self.mode,
        )?)
    }
}

impl NodeOp for ConvTranspose {
    fn kernel(&self) -> Kernel {
        Kernel::ConvTransposeForward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [x, w] = args(inputs, "conv_transpose2d")?;
        let bias = if self.has_bias {
            Some(arg(inputs, 2, "conv_transpose2d")?)
        } else {
            None
        };
        one(transpose::forward(
            x,
            w,
            bias,
            &self.params,
            self.output_padding,
        )?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let (x, w) = (ctx.input(0), ctx.input(1));
        let (xs, ws, ys, dt) = (
            ctx.shape(x),
            ctx.shape(w),
            ctx.shape(ctx.output(0)),
            ctx.dtype(),
        );
        let flops = transpose::flops(&ys, &ws, &self.params);
        if ctx.needs_grad(x) {
            let op = ConvTransposeBackwardData {
                params: self.params,
            };
            let g = ctx.record(
                op,
                vec![gy, w],
                vec![("grad.conv_transpose.x", xs, dt)],
                flops,
            );
            ctx.contribute(x, g[0]);
        }
        if ctx.needs_grad(w) {
            let op = ConvTransposeBackwardFilter {
                params: self.params,
                weight: ws.clone(),
            };
            let g = ctx.record(
                op,
                vec![gy, x],
                vec![("grad.conv_transpose.w", ws, dt)],
                flops,
            );
            ctx.contribute(w, g[0]);
        }
        if self.has_bias && ctx.needs_grad(ctx.input(2)) {
            let b = ctx.input(2);
            let op = crate::nodes::conv::ConvBackwardBias;
            let g = ctx.record(
                op,
                vec![gy],
                vec![("grad.conv_transpose.b", ctx.shape(b), dt)],
                0,
            );
            ctx.contribute(b, g[0]);
        }
        Ok(())
    }
}

impl NodeOp for ConvTransposeBackwardData {
    fn kernel(&self) -> Kernel {
        Kernel::ConvTransposeBackwardData
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [gy, w] = args(inputs, "conv_transpose2d")?;
        one(transpose::backward_data(gy, w, &self.params)?)
    }
}

impl NodeOp for ConvTransposeBackwardFilter {
    fn kernel(&self) -> Kernel {
        Kernel::ConvTransposeBackwardFilter
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [gy, x] = args(inputs, "conv_transpose2d")?;
        one(transpose::backward_filter(
            gy,
            x,
            &self.weight,
            &self.params,
        )?)
    }
}
