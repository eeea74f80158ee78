//! Ops that move data without arithmetic: `concat` (and the slice of its gradient per
//! input), `permute`/`transpose` and `reshape` (shape inference in `wick_ops::layout`).

use std::sync::Arc;

use candle_core::Tensor;
use wick_ops::{layout, Kernel, OpError};

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::{arg, leading_args, one, BackwardCtx, Inputs, KernelResult, NodeOp, ValueId};
use crate::nodes::linear::Reshape;

/// Concatenation along `dim`. in: the parts; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct Concat {
    /// The dimension joined.
    pub dim: usize,
}

/// The gradient of one part: a slice of the output gradient. in: grad_y; out: grad_part.
#[derive(Debug, Clone, PartialEq)]
pub struct ConcatBackward {
    /// The dimension joined.
    pub dim: usize,
    /// Where the part starts along `dim`.
    pub start: usize,
    /// Its length along `dim`.
    pub len: usize,
}

/// A permutation of the dimensions, copied to the new order. in: x; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct Permute {
    /// Output dimension `i` is input dimension `dims[i]`.
    pub dims: Vec<usize>,
}

impl GraphBuilder {
    /// Concatenates `parts` along `dim` (DenseNet's feature maps along channels).
    pub fn concat(&mut self, parts: &[ValueId], dim: usize) -> Result<ValueId> {
        self.forward_only("concat")?;
        let shapes: Vec<Vec<usize>> = parts.iter().map(|p| self.shape(*p).to_vec()).collect();
        let refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
        let out = layout::concat_shape(&refs, dim).map_err(self.build_err("concat"))?;
        let dtype = self.dtype_of(parts[0]);
        if let Some(p) = parts.iter().find(|p| self.dtype_of(**p) != dtype) {
            return Err(self.build_err("concat")(wick_ops::invalid!(
                "concat",
                "`{}` has dtype {:?}, the first part {dtype:?}",
                self.graph.values[p.0].name,
                self.dtype_of(*p)
            )));
        }
        let new = vec![("concat", out, dtype)];
        Ok(self.push(Arc::new(Concat { dim }), parts.to_vec(), new, vec![], 0)[0])
    }

    /// Permutes the dimensions: output dimension `i` is input dimension `dims[i]`.
    pub fn permute(&mut self, x: ValueId, dims: &[usize]) -> Result<ValueId> {
        self.forward_only("permute")?;
        let out = layout::permute_shape(self.shape(x), dims).map_err(self.build_err("permute"))?;
        let new = vec![("permute", out, self.dtype_of(x))];
        let op = Arc::new(Permute {
            dims: dims.to_vec(),
        });
        Ok(self.push(op, vec![x], new, vec![], 0)[0])
    }

    /// Swaps dimensions `a` and `b`.
    pub fn transpose(&mut self, x: ValueId, a: usize, b: usize) -> Result<ValueId> {
        let mut dims: Vec<usize> = (0..self.shape(x).len()).collect();
        if a >= dims.len() || b >= dims.len() {
            return Err(self.build_err("transpose")(wick_ops::invalid!(
                "transpose",
                "dimensions {a} and {b} are out of range for shape {:?}",
                self.shape(x)
            )));
        }
        dims.swap(a, b);
        self.permute(x, &dims)
    }

    /// Reshapes `x` to `shape` (as many elements; no data moves).
    pub fn reshape(&mut self, x: ValueId, shape: &[usize]) -> Result<ValueId> {
        self.forward_only("reshape")?;
        layout::check_reshape(self.shape(x), shape).map_err(self.build_err("reshape"))?;
        let new = ("reshape", shape.to_vec(), self.dtype_of(x));
        let op = Arc::new(Reshape {
            shape: shape.to_vec(),
        });
        Ok(self.push_one(op, vec![x], new, 0))
    }
}

fn candle(op: &'static str) -> impl Fn(candle_core::Error) -> OpError {
    move |e| OpError::candle(op, e)
}

impl NodeOp for Concat {
    fn kernel(&self) -> Kernel {
        Kernel::Concat
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let parts = leading_args(inputs, inputs.len(), "concat")?;
        one(Tensor::cat(&parts, self.dim).map_err(candle("concat"))?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let mut start = 0;
        for i in 0..ctx.inputs.len() {
            let part = ctx.input(i);
            let shape = ctx.shape(part);
            let len = shape[self.dim];
            if ctx.needs_grad(part) {
                let op = ConcatBackward {
                    dim: self.dim,
                    start,
                    len,
                };
                let g = ctx.record(op, vec![gy], vec![("grad.concat", shape, ctx.dtype())], 0);
                ctx.contribute(part, g[0]);
            }
            start += len;
        }
        Ok(())
    }
}

impl NodeOp for ConcatBackward {
    fn kernel(&self) -> Kernel {
        Kernel::ConcatBackward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let gy = arg(inputs, 0, "concat")?;
        let part = gy
            .narrow(self.dim, self.start, self.len)
            .map_err(candle("concat"))?;
        one(part.contiguous().map_err(candle("concat"))?)
    }
}

impl NodeOp for Permute {
    fn kernel(&self) -> Kernel {
        Kernel::Permute
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let x = arg(inputs, 0, "permute")?;
        let y = x.permute(self.dims.as_slice()).map_err(candle("permute"))?;
        one(y.contiguous().map_err(candle("permute"))?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let op = Permute {
            dims: layout::inverse_permutation(&self.dims),
        };
        ctx.record_input_grad(op, vec![gy], "grad.permute", 0)
    }
}
