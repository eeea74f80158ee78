//! `matmul`, 1-D to N-D with batch broadcasting: recording, backward rule, execution
//! (kernels in `wick_ops::tensor::matmul`).

use std::sync::Arc;

use candle_core::DType;

use wick_ops::tensor::matmul::MatMulShape;
use wick_ops::tensor::TensorKernel;
use wick_ops::{Kernel, Operand, Products};

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::{args, one, BackwardCtx, Inputs, KernelResult, NodeOp, ValueId};

/// `a @ b`. in: a, b; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct MatMul {
    /// The operands' and the output's shapes.
    pub shape: MatMulShape,
    /// Its products when both operands are f32: 16-bit for autocast's product of two
    /// activations (`q @ kᵀ`), rounded as the GEMM reads them.
    pub products: Products,
}

/// One operand's gradient. in: grad_y and the other operand; out: the gradient.
#[derive(Debug, Clone, PartialEq)]
pub struct MatMulBackward {
    /// The forward's shapes.
    pub shape: MatMulShape,
    /// The operand differentiated.
    pub operand: Operand,
    /// Its products, 16-bit though it may read f32 values: the gradient of a weight
    /// autocast cast to a 16-bit float, or of a forward with 16-bit products.
    pub products: Products,
}

impl GraphBuilder {
    /// `torch.matmul(a, b)`: a dot product for two vectors, a matrix-vector product, or a
    /// batch of matrix products whose batch dimensions broadcast (`[B, H, T, D] @ [B, H,
    /// D, T]`, `[N, T, C] @ [C, K]`).
    ///
    /// # Examples
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    /// let q = b.input("q", &[2, 4, 8, 16], DType::F32)?;
    /// let k = b.input("k", &[2, 4, 8, 16], DType::F32)?;
    /// let kt = b.transpose(k, 2, 3)?;
    /// let scores = b.matmul(q, kt)?;
    /// assert_eq!(b.shape(scores), &[2, 4, 8, 8]);
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn matmul(&mut self, a: ValueId, b: ValueId) -> Result<ValueId> {
        self.forward_only("matmul")?;
        self.expect_float("matmul", "a", a)?;
        self.expect_same_dtype("matmul", a, b)?;
        let shape =
            MatMulShape::new(self.shape(a), self.shape(b)).map_err(self.build_err("matmul"))?;
        // Autocast runs an activation times a weight (a 2-D parameter: Hugging Face's
        // Conv1D) on the weight's bf16 copy, cast once; a product of two activations
        // reads them as they are, with bf16 products.
        let b = if self.graph.values[b.0].kind == crate::ir::ValueKind::Param
            && self.shape(b).len() == 2
        {
            self.autocast(b)?
        } else {
            b
        };
        let both_f32 = self.dtype_of(a) == DType::F32 && self.dtype_of(b) == DType::F32;
        let products = if both_f32 {
            self.precision().products()
        } else {
            Products::Native
        };
        let dtype = crate::ir::product_output_dtype(self.dtype_of(a), self.dtype_of(b));
        let new = ("matmul", shape.out.clone(), dtype);
        let flops = shape.flops();
        let op = MatMul { shape, products };
        Ok(self.push_one(Arc::new(op), vec![a, b], new, flops))
    }
}

impl NodeOp for MatMul {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::MatMul)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [a, b] = args(inputs, "matmul")?;
        one(self.shape.forward_with(a, b, self.products)?)
    }

    fn compute_dtype(&self) -> Option<DType> {
        self.products.low_dtype()
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        for (i, operand) in [(0, Operand::Lhs), (1, Operand::Rhs)] {
            let v = ctx.input(i);
            if !ctx.needs_grad(v) {
                continue;
            }
            let other = ctx.input(1 - i);
            let op = MatMulBackward {
                shape: self.shape.clone(),
                operand,
                products: match Products::of(ctx.value_dtype(v)) {
                    Products::Native => self.products,
                    low => low,
                },
            };
            ctx.record_grad_of(v, op, vec![gy, other], "grad.matmul", self.shape.flops());
        }
        Ok(())
    }
}

impl NodeOp for MatMulBackward {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::MatMulBackward)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [gy, other] = args(inputs, "matmul")?;
        one(match self.operand {
            Operand::Lhs => self.shape.backward_a_with(gy, other, self.products)?,
            Operand::Rhs => self.shape.backward_b_with(gy, other, self.products)?,
        })
    }

    fn compute_dtype(&self) -> Option<DType> {
        self.products.low_dtype()
    }
}
