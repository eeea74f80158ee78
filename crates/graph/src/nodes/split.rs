//! `torch.split` and `torch.chunk`: every piece along one dimension in one node, and one
//! backward node that joins the pieces' gradients (zeros for a piece no loss reads) in
//! one pass, where a `narrow` per piece would write a zero-padded copy of the whole input
//! per piece and sum them (GPT-2's q, k and v). Kernels in `wick_ops::tensor::select`.

use std::sync::Arc;

use wick_ops::tensor::select as kernels;
use wick_ops::tensor::{dim_index, TensorKernel};
use wick_ops::{Kernel, OpError};

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::{arg, BackwardCtx, Inputs, KernelResult, NodeOp, ValueId};

/// The pieces of `sizes` along `dim`. in: x; out: one value per piece.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// The dimension.
    pub dim: usize,
    /// Each piece's length along it.
    pub sizes: Vec<usize>,
}

/// `split`'s gradient. in: the gradients of the pieces that have one, in order; out:
/// grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct SplitBackward {
    /// The forward's settings.
    pub split: Split,
    /// Which pieces have a gradient (an input each); the others count as zeros.
    pub present: Vec<bool>,
    /// The input's shape.
    pub shape: Vec<usize>,
}

impl GraphBuilder {
    /// `torch.split(x, split_size, dim)`: pieces of `split_size` along `dim` (the last
    /// one shorter when the size does not divide), each differentiable.
    ///
    /// # Examples
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    /// let qkv = b.input("qkv", &[2, 7, 48], DType::F32)?;
    /// let parts = b.split(qkv, 16, -1)?; // q, k, v
    /// assert_eq!(parts.len(), 3);
    /// assert_eq!(b.shape(parts[2]), &[2, 7, 16]);
    /// let last = b.narrow(qkv, 1, 6, 1)?; // the last token
    /// assert_eq!(b.shape(last), &[2, 1, 48]);
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn split(&mut self, x: ValueId, split_size: usize, dim: isize) -> Result<Vec<ValueId>> {
        let (xs, d) = self.pieces_of("split", x, dim, ("split_size", split_size))?;
        let n = xs[d];
        let sizes: Vec<usize> = (0..n.div_ceil(split_size).max(1))
            .map(|i| split_size.min(n - i * split_size))
            .collect();
        self.forward_only("split")?;
        let dtype = self.dtype_of(x);
        let new = sizes
            .iter()
            .map(|&len| {
                let mut shape = xs.clone();
                shape[d] = len;
                ("split", shape, dtype)
            })
            .collect();
        Ok(self.push(Arc::new(Split { dim: d, sizes }), vec![x], new, vec![], 0))
    }

    /// `torch.chunk(x, chunks, dim)`: at most `chunks` pieces of `ceil(n / chunks)` along
    /// `dim`, as PyTorch's.
    pub fn chunk(&mut self, x: ValueId, chunks: usize, dim: isize) -> Result<Vec<ValueId>> {
        let (xs, d) = self.pieces_of("chunk", x, dim, ("chunks", chunks))?;
        self.split(x, xs[d].div_ceil(chunks).max(1), dim)
    }

    /// `x`'s shape and the index of `dim` in it, for `op` cutting `x` into pieces along
    /// `dim`; an error names the op when `dim` is out of range or the `count` (its name
    /// and value) is 0.
    fn pieces_of(
        &self,
        op: &'static str,
        x: ValueId,
        dim: isize,
        (name, count): (&str, usize),
    ) -> Result<(Vec<usize>, usize)> {
        let xs = self.shape(x).to_vec();
        let d = dim_index(op, xs.len(), dim).map_err(self.build_err(op))?;
        if count == 0 {
            let e = wick_ops::invalid!(op, "{name} must be positive");
            return Err(self.build_err(op)(e));
        }
        Ok((xs, d))
    }
}

impl NodeOp for Split {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::Split)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let x = arg(inputs, 0, "split")?;
        let parts = kernels::split(x, self.dim, &self.sizes)?;
        Ok(parts.into_iter().map(Some).collect())
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let grads: Vec<Option<ValueId>> =
            (0..ctx.num_outputs()).map(|i| ctx.grad_output(i)).collect();
        let op = SplitBackward {
            split: self.clone(),
            present: grads.iter().map(Option::is_some).collect(),
            shape: ctx.shape(ctx.input(0)),
        };
        ctx.record_input_grad(op, grads.into_iter().flatten().collect(), "grad.split", 0)
    }
}

impl NodeOp for SplitBackward {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::SplitBackward)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        // The inputs are the present pieces' gradients, in order.
        let mut given = (0..inputs.len()).map(|i| arg(inputs, i, "split"));
        let grads = self
            .present
            .iter()
            .map(|&present| {
                let missing = || Err(OpError::invalid("split", "a piece's gradient is missing"));
                present
                    .then(|| given.next().unwrap_or_else(missing))
                    .transpose()
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let (dim, sizes) = (self.split.dim, &self.split.sizes);
        let g = kernels::split_backward(&grads, &self.shape, dim, sizes)?;
        Ok(vec![Some(g)])
    }
}
