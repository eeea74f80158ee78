//! The product of two float32 or bfloat16 CPU tensors in bf16 products and f32 sums,
//! each read through its strides: autocast's flat matmuls (an activation times a bf16
//! weight, as Hugging Face's `Conv1D`) and linear layers, and their gradients. float32
//! operands are rounded as the GEMM packs them; the output is float32.

use candle_core::Tensor;

use super::gemm::{gemm, gemm_native};
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
            let (a, b) = (Matrix::new(l, ls), Matrix::new(r, rs));
            let Some(kernel) = Bf16Path::current().kernel() else {
                let mut out = vec![0f32; rows * cols];
                let dst = (&mut out[..], (cols, 1));
                gemm(Bf16Path::current(), (rows, cols, depth), dst, false, &a, &b);
                return Ok(out);
            };
            // The native kernels write every slot: the output is not zeroed first (a
            // linear layer's output is megabytes, written through memory twice then).
            let mut out: Vec<f32> = Vec::with_capacity(rows * cols);
            let dst = (
                out.spare_capacity_mut().as_mut_ptr().cast::<f32>(),
                (cols, 1),
            );
            // SAFETY: `rows * cols` slots of this call's own buffer, addressed row-major;
            // the CPU has the kernel's instructions (`current` never names a faster path).
            unsafe { gemm_native(kernel, (rows, cols, depth), dst, false, &a, &b, true) };
            // SAFETY: without `accumulate`, gemm_native wrote every slot.
            unsafe { out.set_len(rows * cols) };
            Ok(out)
        })
    })?;
    crate::cpu::tensor(op, out, (rows, cols))
}
