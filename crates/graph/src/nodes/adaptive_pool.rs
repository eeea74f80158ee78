//! Adaptive average pooling to a fixed output size (VGG's 7x7 before its classifier),
//! as PyTorch defines its windows: output cell `i` of `out` averages input rows
//! `floor(i·H/out) .. ceil((i+1)·H/out)`. It is a linear map, run as one matrix product
//! per image plane with the pooling matrix (and its transpose for the gradient).

use std::sync::Arc;

use candle_core::Tensor;
use wick_ops::{Kernel, OpError};

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::{arg, one, BackwardCtx, Inputs, KernelResult, NodeOp, ValueId};

const OP: &str = "adaptive_avg_pool2d";

/// Adaptive average pooling. in: x `[N, C, H, W]`; out: `[N, C, out_h, out_w]`.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveAvgPool {
    /// The input's `(H, W)`.
    pub input: (usize, usize),
    /// The output's `(out_h, out_w)`.
    pub output: (usize, usize),
}

/// Its gradient. in: grad_y; out: grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveAvgPoolBackward {
    /// The forward node's settings.
    pub forward: AdaptiveAvgPool,
}

impl GraphBuilder {
    /// Adaptive average pooling of `x` `[N, C, H, W]` to `[N, C, out_h, out_w]` (PyTorch's
    /// `AdaptiveAvgPool2d`; an output larger than the input repeats input cells).
    pub fn adaptive_avg_pool2d(
        &mut self,
        x: ValueId,
        out_h: usize,
        out_w: usize,
    ) -> Result<ValueId> {
        self.forward_only(OP)?;
        let [n, c, h, w] =
            wick_ops::shape::nchw(OP, "input", self.shape(x)).map_err(self.build_err(OP))?;
        if out_h == 0 || out_w == 0 || h == 0 || w == 0 {
            return Err(self.build_err(OP)(wick_ops::invalid!(
                OP,
                "cannot pool {h}x{w} to {out_h}x{out_w}"
            )));
        }
        let op = AdaptiveAvgPool {
            input: (h, w),
            output: (out_h, out_w),
        };
        let flops = wick_ops::shape::flop_count(1, &[n, c, h.max(out_h), w.max(out_w)]);
        let new = (
            "adaptive_avgpool",
            vec![n, c, out_h, out_w],
            self.dtype_of(x),
        );
        Ok(self.push_one(Arc::new(op), vec![x], new, flops))
    }
}

impl AdaptiveAvgPool {
    /// The pooling matrix `[H·W, out_h·out_w]` in `dtype` on `like`'s device.
    fn matrix(&self, like: &Tensor) -> std::result::Result<Tensor, OpError> {
        let ((h, w), (oh, ow)) = (self.input, self.output);
        let mut m = vec![0f64; h * w * oh * ow];
        let window =
            |i: usize, inp: usize, out: usize| (i * inp / out, ((i + 1) * inp).div_ceil(out));
        for i in 0..oh {
            let (r0, r1) = window(i, h, oh);
            for j in 0..ow {
                let (c0, c1) = window(j, w, ow);
                let area = ((r1 - r0) * (c1 - c0)) as f64;
                for r in r0..r1 {
                    for c in c0..c1 {
                        m[(r * w + c) * oh * ow + i * ow + j] = 1.0 / area;
                    }
                }
            }
        }
        let candle = |e| OpError::candle(OP, e);
        Tensor::from_vec(m, (h * w, oh * ow), like.device())
            .and_then(|t| t.to_dtype(like.dtype()))
            .map_err(candle)
    }
}

fn planes(x: &Tensor, per_plane: usize) -> std::result::Result<Tensor, OpError> {
    x.reshape(((), per_plane))
        .map_err(|e| OpError::candle(OP, e))
}

impl NodeOp for AdaptiveAvgPool {
    fn kernel(&self) -> Kernel {
        Kernel::PoolingForward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let x = arg(inputs, 0, OP)?;
        let (n, c) = (x.dims()[0], x.dims()[1]);
        let p = self.matrix(x)?;
        let y = planes(x, self.input.0 * self.input.1)?
            .matmul(&p)
            .and_then(|y| y.reshape((n, c, self.output.0, self.output.1)))
            .map_err(|e| OpError::candle(OP, e))?;
        one(y)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let xs = ctx.shape(ctx.input(0));
        let flops = wick_ops::shape::flop_count(1, &xs);
        let op = AdaptiveAvgPoolBackward {
            forward: self.clone(),
        };
        ctx.record_input_grad(op, vec![gy], "grad.adaptive_avgpool", flops)
    }
}

impl NodeOp for AdaptiveAvgPoolBackward {
    fn kernel(&self) -> Kernel {
        Kernel::PoolingBackward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let gy = arg(inputs, 0, OP)?;
        let f = &self.forward;
        let (n, c) = (gy.dims()[0], gy.dims()[1]);
        let pt = f.matrix(gy)?.t().map_err(|e| OpError::candle(OP, e))?;
        let gx = planes(gy, f.output.0 * f.output.1)?
            .matmul(&pt)
            .and_then(|g| g.reshape((n, c, f.input.0, f.input.1)))
            .map_err(|e| OpError::candle(OP, e))?;
        one(gx)
    }
}
