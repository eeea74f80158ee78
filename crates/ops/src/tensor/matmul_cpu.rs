//! `matmul`'s flat products on the CPU through wick's GEMM (`cpu::gemm_*`), in place of
//! candle's matmul: `[m, k] @ [k, n]` (Hugging Face's `Conv1D`, any activation times a
//! weight), its input gradient `gy · bᵀ` read through strides (no transposed copy), and
//! its weight gradient `aᵀ · gy` computed as `(gyᵀ · a)ᵀ` into column-major storage, which
//! the `gemm` crate runs faster for the tall, narrow operands of a layer over many rows
//! (as `linear_cpu` does). Each takes its products' precision: float32, or (float32
//! operands) bf16 products with float32 sums, as autocast runs a product of activations.
//! Batched products run one GEMM per batch entry, the entries spread over the threads.

use candle_core::Tensor;
use rayon::prelude::*;

use crate::bf16::{gemm_strided_with, gemm_uninit_with, Products};
use crate::cpu::{self, Float};
use crate::error::Result;

const OP: &str = "matmul";

/// `out [rows, cols] = x · y` (`x` `rows × depth`, `y` `depth × cols`, each read through
/// its strides, so a transposed operand needs no copy): the forward product `a · b` and
/// the input gradient `gy · bᵀ`.
pub(crate) fn product<T: Float>(
    products: Products,
    (rows, cols, depth): (usize, usize, usize),
    (x, xs): (&Tensor, (usize, usize)),
    (y, ys): (&Tensor, (usize, usize)),
) -> Result<Tensor> {
    cpu::from_slices::<T>(OP, x, y, (rows, cols), |xd, yd| {
        let mut out = Vec::with_capacity(rows * cols);
        gemm_uninit_with(
            products,
            (rows, cols, depth),
            out.spare_capacity_mut(),
            (xd, xs),
            (yd, ys),
            true,
        );
        // SAFETY: gemm_uninit wrote all rows * cols slots.
        unsafe { out.set_len(rows * cols) };
        Ok(out)
    })
}

/// `gb [k, n] = aᵀ · gy`, `a` `[m, k]`, `gy` `[m, n]`: computed as `gbᵀ [n, k] = gyᵀ · a`
/// stored column-major, which is `gb` row-major.
pub(crate) fn backward_b<T: Float>(
    products: Products,
    a: &Tensor,
    gy: &Tensor,
    (m, k, n): (usize, usize, usize),
) -> Result<Tensor> {
    cpu::from_slices::<T>(OP, a, gy, (k, n), |ad, gd| {
        let mut gb = vec![T::ZERO; k * n];
        // gyᵀ's element (j, r) is gy[r][j]: strides (1, n).
        let (gyt, a) = ((gd, (1, n)), (ad, (k, 1)));
        gemm_strided_with(
            products,
            (n, k, m),
            (&mut gb, (1, n)),
            false,
            (gyt, a),
            true,
        );
        Ok(gb)
    })
}

/// One operand of [`batched`]: `[B, ..]` contiguous values, and the (row, column) strides
/// of each batch entry's matrix.
pub(crate) type BatchOperand<'a> = (&'a Tensor, (usize, usize));

/// `out [B, rows, cols]`: for each batch entry `lhs[b] (rows × depth) · rhs[b] (depth ×
/// cols)`, entries over the threads, each GEMM on one thread.
pub(crate) fn batched<T: Float>(
    products: Products,
    batch: usize,
    (rows, cols, depth): (usize, usize, usize),
    (lhs, ls): BatchOperand<'_>,
    (rhs, rs): BatchOperand<'_>,
) -> Result<Tensor> {
    cpu::from_slices::<T>(OP, lhs, rhs, (batch, rows, cols), |ld, rd| {
        let mut out = vec![T::ZERO; batch * rows * cols];
        let (l_step, r_step) = (ld.len() / batch.max(1), rd.len() / batch.max(1));
        out.par_chunks_mut((rows * cols).max(1))
            .enumerate()
            .for_each(|(i, dst)| {
                let (l, r) = (&ld[i * l_step..][..l_step], &rd[i * r_step..][..r_step]);
                let dims = (rows, cols, depth);
                gemm_strided_with(
                    products,
                    dims,
                    (dst, (cols, 1)),
                    false,
                    ((l, ls), (r, rs)),
                    false,
                );
            });
        Ok(out)
    })
}
