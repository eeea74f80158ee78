//! The product of two float32 or bfloat16 CPU tensors in bf16 products and f32 sums,
//! each read through its strides: autocast's flat matmuls (an activation times a bf16
//! weight, as Hugging Face's `Conv1D`) and linear layers, and their gradients. float32
//! operands are rounded as the GEMM packs them; the output is float32.

use candle_core::Tensor;

use super::gemm::gemm;
use super::operand::Matrix;
use super::path::Bf16Path;
use super::tensor::with_values;
use crate::error::Result;

/// `out [rows, cols] = lhs · rhs` for `op`, each operand given with its (row, column)
/// strides: a row-major `[r, c]` matrix has `(c, 1)`, its transpose `(1, c)`.
pub(crate) fn tensor_product(
    op: &'static str,
    (rows, cols, depth): (usize, usize, usize),
    (lhs, ls): (&Tensor, (usize, usize)),
    (rhs, rs): (&Tensor, (usize, usize)),
) -> Result<Tensor> {
    let out = with_values(op, lhs, |l| {
        with_values(op, rhs, |r| {
            let mut out = vec![0f32; rows * cols];
            let (a, b) = (Matrix::new(l, ls), Matrix::new(r, rs));
            let dst = (&mut out[..], (cols, 1));
            gemm(Bf16Path::current(), (rows, cols, depth), dst, false, &a, &b);
            Ok(out)
        })
    })?;
    crate::cpu::tensor(op, out, (rows, cols))
}
