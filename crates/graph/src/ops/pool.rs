//! Max, average and global average pooling: recording, backward rules, execution
//! (kernels in `wick_ops::pool`).

use std::sync::Arc;

use candle_core::DType;
use wick_ops::pool::{self, Pool2dParams, PoolKind};
use wick_ops::Kernel;

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::ValueId;
use crate::op::{arg, one, BackwardCtx, Inputs, KernelResult, NodeOp};

/// Max pooling forward. in: x; out: y, indices.
#[derive(Debug, Clone, PartialEq)]
pub struct MaxPool2d {
    /// Kernel, stride, padding.
    pub params: Pool2dParams,
}

/// Max pooling backward. in: grad_y, indices; out: grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct MaxPool2dBackward {
    /// The forward settings.
    pub params: Pool2dParams,
    /// The forward input's shape.
    pub input_shape: Vec<usize>,
}

/// Average pooling forward. in: x; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct AvgPool2d {
    /// Kernel, stride, padding.
    pub params: Pool2dParams,
}

/// Average pooling backward. in: grad_y; out: grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct AvgPool2dBackward {
    /// The forward settings.
    pub params: Pool2dParams,
    /// The forward input's shape.
    pub input_shape: Vec<usize>,
}

/// Global average pooling. in: x `[N, C, H, W]`; out: y `[N, C, 1, 1]`.
#[derive(Debug, Clone, PartialEq)]
pub struct GlobalAvgPool;

/// Global average pooling backward. in: grad_y; out: grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct GlobalAvgPoolBackward {
    /// The forward input's shape.
    pub input_shape: Vec<usize>,
}

impl GraphBuilder {
    /// Max pooling with a square `kernel`, `stride` and `padding` (padding acts as -inf).
    pub fn max_pool2d(
        &mut self,
        x: ValueId,
        kernel: usize,
        stride: usize,
        padding: usize,
    ) -> Result<ValueId> {
        let (op, p) = ("max_pool2d", Pool2dParams::new(kernel, stride, padding));
        self.forward_only(op)?;
        let xs = self.shape(x).to_vec();
        let out = p
            .output_shape(PoolKind::Max, &xs)
            .map_err(self.build_err(op))?;
        let new = vec![
            ("maxpool", out.to_vec(), self.dtype_of(x)),
            ("maxpool.indices", out.to_vec(), DType::U32),
        ];
        let node = Arc::new(MaxPool2d { params: p });
        Ok(self.push(node, vec![x], new, vec![], p.flops(&xs))[0])
    }

    /// Average pooling with a square `kernel`, `stride` and `padding` (padding counted).
    pub fn avg_pool2d(
        &mut self,
        x: ValueId,
        kernel: usize,
        stride: usize,
        padding: usize,
    ) -> Result<ValueId> {
        let (op, p) = ("avg_pool2d", Pool2dParams::new(kernel, stride, padding));
        self.forward_only(op)?;
        let xs = self.shape(x).to_vec();
        let out = p
            .output_shape(PoolKind::Avg, &xs)
            .map_err(self.build_err(op))?;
        let new = vec![("avgpool", out.to_vec(), self.dtype_of(x))];
        let node = Arc::new(AvgPool2d { params: p });
        Ok(self.push(node, vec![x], new, vec![], p.flops(&xs))[0])
    }

    /// Global average pooling: `[N, C, H, W]` -> `[N, C, 1, 1]`.
    pub fn global_avg_pool(&mut self, x: ValueId) -> Result<ValueId> {
        let op = "global_avg_pool";
        self.forward_only(op)?;
        let xs = self.shape(x).to_vec();
        let [n, c, _, _] = wick_ops::shape::nchw(op, "input", &xs).map_err(self.build_err(op))?;
        let new = vec![("gap", vec![n, c, 1, 1], self.dtype_of(x))];
        let flops = pool::global_avg_pool_flops(&xs);
        Ok(self.push(Arc::new(GlobalAvgPool), vec![x], new, vec![], flops)[0])
    }
}

/// Records a pooling backward node and hands its gradient to the forward input.
fn record_backward(
    ctx: &mut BackwardCtx<'_>,
    op: impl NodeOp,
    inputs: Vec<ValueId>,
    name: &'static str,
    flops: u64,
) {
    let xs = ctx.shape(ctx.input(0));
    let g = ctx.record(op, inputs, vec![(name, xs, ctx.dtype())], flops);
    ctx.contribute(ctx.input(0), g[0]);
}

impl NodeOp for MaxPool2d {
    fn kernel(&self) -> Kernel {
        Kernel::PoolingForward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let o = pool::max_pool2d(arg(inputs, 0, "max_pool2d")?, &self.params)?;
        Ok(vec![Some(o.y), Some(o.indices)])
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let xs = ctx.shape(ctx.input(0));
        let flops = self.params.flops(&xs);
        let op = MaxPool2dBackward {
            params: self.params,
            input_shape: xs,
        };
        let inputs = vec![ctx.grad_y()?, ctx.output(1)];
        record_backward(ctx, op, inputs, "grad.maxpool", flops);
        Ok(())
    }
}

impl NodeOp for MaxPool2dBackward {
    fn kernel(&self) -> Kernel {
        Kernel::PoolingBackward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let (gy, idx) = (arg(inputs, 0, "max_pool2d")?, arg(inputs, 1, "max_pool2d")?);
        one(pool::max_pool2d_backward(
            gy,
            idx,
            &self.input_shape,
            &self.params,
        )?)
    }
}

impl NodeOp for AvgPool2d {
    fn kernel(&self) -> Kernel {
        Kernel::PoolingForward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        one(pool::avg_pool2d(
            arg(inputs, 0, "avg_pool2d")?,
            &self.params,
        )?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let xs = ctx.shape(ctx.input(0));
        let flops = self.params.flops(&xs);
        let op = AvgPool2dBackward {
            params: self.params,
            input_shape: xs,
        };
        let inputs = vec![ctx.grad_y()?];
        record_backward(ctx, op, inputs, "grad.avgpool", flops);
        Ok(())
    }
}

impl NodeOp for AvgPool2dBackward {
    fn kernel(&self) -> Kernel {
        Kernel::PoolingBackward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        one(pool::avg_pool2d_backward(
            arg(inputs, 0, "avg_pool2d")?,
            &self.input_shape,
            &self.params,
        )?)
    }
}

impl NodeOp for GlobalAvgPool {
    fn kernel(&self) -> Kernel {
        Kernel::GlobalAvgPoolForward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        one(pool::global_avg_pool(arg(inputs, 0, "global_avg_pool")?)?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let xs = ctx.shape(ctx.input(0));
        let flops = pool::global_avg_pool_flops(&xs);
        let op = GlobalAvgPoolBackward { input_shape: xs };
        let inputs = vec![ctx.grad_y()?];
        record_backward(ctx, op, inputs, "grad.gap", flops);
        Ok(())
    }
}

impl NodeOp for GlobalAvgPoolBackward {
    fn kernel(&self) -> Kernel {
        Kernel::GlobalAvgPoolBackward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        one(pool::global_avg_pool_backward(
            arg(inputs, 0, "global_avg_pool")?,
            &self.input_shape,
        )?)
    }
}
