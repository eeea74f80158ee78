//! `matmul`'s flat products with bf16 products and f32 sums, as autocast runs an
//! activation times a bf16 weight (Hugging Face's `Conv1D`): `[m, k] @ [k, n]`, its
//! input gradient `gy · bᵀ` and its weight gradient `aᵀ · gy`, every operand f32 or bf16
//! (f32 ones rounded as the GEMM packs them), outputs f32.

use candle_core::Tensor;

use super::gemm::gemm;
use super::microkernel::Bf16Path;
use super::operand::Matrix;
use super::tensor::with_values;
use crate::error::Result;

const OP: &str = "matmul";

/// `out [rows, cols] = lhs · rhs`, each given with its strides: `a · b` with strides
/// `(k, 1)` and `(n, 1)`, `gy · bᵀ` with `(n, 1)` and `(1, n)`, `aᵀ · gy` with `(1, k)`
/// and `(n, 1)`.
pub(crate) fn product(
    (rows, cols, depth): (usize, usize, usize),
    (lhs, ls): (&Tensor, (usize, usize)),
    (rhs, rs): (&Tensor, (usize, usize)),
) -> Result<Tensor> {
    let out = with_values(OP, lhs, |l| {
        with_values(OP, rhs, |r| {
            let mut out = vec![0f32; rows * cols];
            let (a, b) = (
                Matrix {
                    values: l,
                    strides: ls,
                },
                Matrix {
                    values: r,
                    strides: rs,
                },
            );
            gemm(
                Bf16Path::current(),
                (rows, cols, depth),
                (&mut out, (cols, 1)),
                false,
                &a,
                &b,
            );
            Ok(out)
        })
    })?;
    crate::cpu::tensor(OP, out, (rows, cols))
}
