//! Max, average and global average pooling: recording, backward rules, execution
//! (kernels in `wick_ops::pool`).

use std::sync::Arc;

use candle_core::DType;
use wick_ops::pool::{self, Pool2dParams, PoolKind};
use wick_ops::Kernel;

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::ValueId;
use crate::ir::{arg, one, BackwardCtx, Inputs, KernelResult, NodeOp};

/// Max or average pooling forward. in: x; out: y and, for max pooling with `indices`, the
/// argmax indices.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool2d {
    /// Max or average.
    pub kind: PoolKind,
    /// Kernel, stride, padding.
    pub params: Pool2dParams,
    /// Max pooling also outputs the argmax indices its backward reads (as recorded); the
    /// `max_pool_values` pass turns them off where nothing reads them.
    pub indices: bool,
}

/// Max or average pooling backward. in: grad_y and, for max pooling, the indices; out:
/// grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool2dBackward {
    /// Max or average.
    pub kind: PoolKind,
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
    /// Max pooling (padding acts as -inf).
    pub fn max_pool2d(&mut self, x: ValueId, p: Pool2dParams) -> Result<ValueId> {
        self.pool2d(x, PoolKind::Max, p)
    }

    /// Average pooling (padding counted).
    pub fn avg_pool2d(&mut self, x: ValueId, p: Pool2dParams) -> Result<ValueId> {
        self.pool2d(x, PoolKind::Avg, p)
    }

    fn pool2d(&mut self, x: ValueId, kind: PoolKind, p: Pool2dParams) -> Result<ValueId> {
        let op = kind.op_name();
        self.forward_only(op)?;
        let xs = self.shape(x).to_vec();
        let out = p.output_shape(kind, &xs).map_err(self.build_err(op))?;
        let mut new = vec![("pool", out.to_vec(), self.dtype_of(x))];
        if kind == PoolKind::Max {
            new.push(("pool.indices", out.to_vec(), DType::U32));
        }
        let node = Arc::new(Pool2d {
            kind,
            params: p,
            indices: kind == PoolKind::Max,
        });
        Ok(self.push(node, vec![x], new, vec![], p.flops(&xs))[0])
    }

    /// Global average pooling: `[N, C, H, W]` -> `[N, C, 1, 1]`.
    pub fn global_avg_pool(&mut self, x: ValueId) -> Result<ValueId> {
        let op = "global_avg_pool";
        self.forward_only(op)?;
        let xs = self.shape(x).to_vec();
        let [n, c, _, _] = wick_ops::shape::nchw(op, "input", &xs).map_err(self.build_err(op))?;
        let new = ("gap", vec![n, c, 1, 1], self.dtype_of(x));
        let flops = pool::global_avg_pool_flops(&xs);
        Ok(self.push_one(Arc::new(GlobalAvgPool), vec![x], new, flops))
    }
}

/// Records a pooling backward node and hands its gradient to the forward input.
fn record_backward(
    ctx: &mut BackwardCtx<'_>,
    op: impl NodeOp,
    inputs: Vec<ValueId>,
    name: &'static str,
    flops: u64,
) -> Result<()> {
    ctx.record_grad_of(ctx.input(0), op, inputs, name, flops);
    Ok(())
}

impl NodeOp for Pool2d {
    fn kernel(&self) -> Kernel {
        Kernel::PoolingForward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let x = arg(inputs, 0, self.kind.op_name())?;
        match self.kind {
            PoolKind::Max if self.indices => {
                let o = pool::max_pool2d(x, &self.params)?;
                Ok(vec![Some(o.y), Some(o.indices)])
            }
            PoolKind::Max => one(pool::max_pool2d_values(x, &self.params)?),
            PoolKind::Avg => one(pool::avg_pool2d(x, &self.params)?),
        }
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let xs = ctx.shape(ctx.input(0));
        let flops = self.params.flops(&xs);
        let mut inputs = vec![ctx.grad_y()?];
        if self.kind == PoolKind::Max {
            if !self.indices {
                return Err(crate::error::GraphError::Usage(format!(
                    "backward: OP_ID{} (max pooling) was recorded without its argmax indices",
                    ctx.op_id
                )));
            }
            inputs.push(ctx.output(1));
        }
        let op = Pool2dBackward {
            kind: self.kind,
            params: self.params,
            input_shape: xs,
        };
        record_backward(ctx, op, inputs, "grad.pool", flops)
    }
}

impl NodeOp for Pool2dBackward {
    fn kernel(&self) -> Kernel {
        Kernel::PoolingBackward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let (gy, shape, p) = (
            arg(inputs, 0, self.kind.op_name())?,
            &self.input_shape,
            &self.params,
        );
        one(match self.kind {
            PoolKind::Max => {
                let idx = arg(inputs, 1, self.kind.op_name())?;
                pool::max_pool2d_backward(gy, idx, shape, p)?
            }
            PoolKind::Avg => pool::avg_pool2d_backward(gy, shape, p)?,
        })
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
        record_backward(ctx, op, inputs, "grad.gap", flops)
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
