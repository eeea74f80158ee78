//! The tensor language's kernels: general differentiable ops with PyTorch's names,
//! argument order and semantics (broadcasting, negative dimensions, `keepdim`), each
//! with its shape rule, forward, backward, FLOPs and [`TensorKernel`].
//!
//! - [`matmul`]: `torch.matmul`, 1-D to N-D with batch broadcasting;
//! - [`unary`]: `exp`, `log`, `sqrt`, `rsqrt`, `pow`, `abs`, `neg`, `clamp`, scalar
//!   add and multiply, `full_like`;
//! - [`reduce`]: `sum`, `mean`, `amax`, `amin`, `logsumexp`, `var`, `argmax`, `argmin`;
//! - [`select`]: `narrow`, `expand`, `index_select`, `gather`, `embedding`;
//! - [`mask`]: comparisons, `where`, `masked_fill`;
//! - [`nll`]: `log_softmax`, `nll_loss` (with `ignore_index` and label smoothing), and
//!   binary cross-entropy on probabilities.
//!
//! On the CPU (f32 and f64) the element-wise functions, `expand`, `where`,
//! `masked_fill`, the reductions over trailing dimensions and every gradient of theirs
//! run wick's own one-pass kernels (vectorized, `exp` branch-free within 1 ulp); the
//! other cases and other devices run candle's generic ops, which
//! [`KernelPath::Generic`](crate::KernelPath) forces for comparison
//! (`cargo bench --bench tensor_ops` times both).

mod cpu_kernels;
pub mod kernel;
pub mod mask;
pub mod matmul;
mod matmul_cpu;
pub mod nll;
pub mod reduce;
mod reduce_rows;
mod reduction;
pub mod select;
pub mod unary;

pub use kernel::TensorKernel;

use candle_core::{DType, Tensor};

use crate::error::{OpError, Result};

/// Dimension `dim` of a tensor of rank `rank`, PyTorch's way: `-1` is the last.
pub fn dim_index(op: &'static str, rank: usize, dim: isize) -> Result<usize> {
    let r = rank as isize;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r {
        return Err(crate::invalid!(
            op,
            "dimension {dim} is out of range for a tensor of rank {rank} (expected {} to {})",
            -r,
            r - 1
        ));
    }
    Ok(d as usize)
}

/// Dimensions `dims` of a tensor of rank `rank`, sorted; an empty list means every
/// dimension (as `torch.sum(x, dim=())` does not, but `dim=None` does). A dimension named
/// twice is an error.
pub fn dims_index(op: &'static str, rank: usize, dims: &[isize]) -> Result<Vec<usize>> {
    if dims.is_empty() {
        return Ok((0..rank).collect());
    }
    let mut out = dims
        .iter()
        .map(|&d| dim_index(op, rank, d))
        .collect::<Result<Vec<_>>>()?;
    out.sort_unstable();
    if let Some(w) = out.windows(2).find(|w| w[0] == w[1]) {
        return Err(crate::invalid!(
            op,
            "dimension {} is named twice in {dims:?}",
            w[0]
        ));
    }
    Ok(out)
}

/// Whether `dtype` is an integer dtype that indexes (`u8`, `u32`, `i64`).
pub fn is_index_dtype(dtype: DType) -> bool {
    matches!(dtype, DType::U8 | DType::U32 | DType::I64)
}

/// Whether `dtype` is a float dtype.
pub fn is_float(dtype: DType) -> bool {
    dtype.is_float()
}

/// The candle error of `op` as an [`OpError`].
pub(crate) fn candle(op: &'static str) -> impl Fn(candle_core::Error) -> OpError {
    move |e| OpError::candle(op, e)
}

/// `t` made contiguous (a copy only where it is a strided view).
pub(crate) fn dense(op: &'static str, t: Tensor) -> Result<Tensor> {
    t.contiguous().map_err(candle(op))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_dimensions_count_from_the_end() {
        assert_eq!(dim_index("t", 4, -1).unwrap(), 3);
        assert_eq!(dim_index("t", 4, 0).unwrap(), 0);
        let err = dim_index("t", 2, 2).unwrap_err().to_string();
        assert!(
            err.contains("dimension 2") && err.contains("-2 to 1"),
            "{err}"
        );
        assert!(dim_index("t", 2, -3).is_err());
        assert_eq!(dims_index("t", 3, &[-1, 0]).unwrap(), vec![0, 2]);
        assert_eq!(dims_index("t", 3, &[]).unwrap(), vec![0, 1, 2]);
        assert!(dims_index("t", 3, &[1, -2])
            .unwrap_err()
            .to_string()
            .contains("twice"));
    }
}
