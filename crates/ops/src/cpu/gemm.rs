//! wick's float32 and float64 GEMM on the CPU: the `gemm` crate behind a bounds check,
//! with products of many rows and a deep sum split into row blocks across threads.

use super::{threads, Float};

/// [`gemm_strided`] into uninitialised row-major memory of exactly `m * n` slots, all of which it
/// writes (the `gemm` crate does not read the destination when asked not to accumulate,
/// and fills it with zeros when `k` is 0): no zeroing pass before the product.
pub(crate) fn gemm_uninit<T: Float>(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [std::mem::MaybeUninit<T>],
    lhs: (&[T], (usize, usize)),
    rhs: (&[T], (usize, usize)),
    parallel: bool,
) {
    assert_eq!(dst.len(), m * n, "gemm destination must have m * n slots");
    // SAFETY: `dst` is a distinct `&mut` borrow of m * n slots, addressed row-major; with
    // `accumulate` false the gemm crate only writes them (gemm-common 0.19: alpha is zeroed
    // and the first k-block stores without loading; k = 0 stores zeros), so no
    // uninitialised value is read and every slot is written.
    unsafe {
        gemm_raw(
            m,
            n,
            k,
            dst.as_mut_ptr().cast::<T>(),
            (n, 1),
            false,
            lhs,
            rhs,
            parallel,
        )
    }
}

/// One matrix product through the `gemm` crate: `dst (m×n) = [dst +] lhs (m×k) · rhs (k×n)`,
/// each operand given with its (row, column) strides. Destination strides `(1, m)` write
/// the product column-major, which the `gemm` crate runs up to twice as fast for some
/// shapes (a wide, shallow weight gradient, for one).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_strided<T: Float>(
    m: usize,
    n: usize,
    k: usize,
    (dst, dst_strides): (&mut [T], (usize, usize)),
    accumulate: bool,
    lhs: (&[T], (usize, usize)),
    rhs: (&[T], (usize, usize)),
    parallel: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        dst.len() > (m - 1) * dst_strides.0 + (n - 1) * dst_strides.1,
        "gemm destination too small"
    );
    // SAFETY: the destination's bounds are checked above; it does not alias the inputs (it
    // is a distinct `&mut` borrow).
    unsafe {
        gemm_raw(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            dst_strides,
            accumulate,
            lhs,
            rhs,
            parallel,
        )
    }
}

/// Whether a multi-threaded product runs faster as one single-threaded GEMM per block of
/// rows than through the `gemm` crate's own threads: for the narrow products (few output
/// columns, a deep sum) of small images and batches of one, where the crate's threads
/// reach 170-320 GFLOP/s on 2 cores and row blocks 330-440 (Zen 5, 256x196x2304,
/// 512x49x4608, 512x196x256, 64x3136x576). Wide products keep the crate's threads.
fn split_rows_across_threads(m: usize, n: usize, k: usize, threads: usize) -> bool {
    k >= 256 && m >= 32 * threads && (n < 1024 || m <= 128)
}

/// A destination pointer handed to threads that each write their own disjoint slots (the
/// rows of a row-split product, the rows of the Winograd weight planes).
pub(crate) struct SendPtr<T>(pub(crate) *mut T);
// SAFETY: each thread writes only its own slots (see `gemm_raw`, `transform_weights`).
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above; the pointer itself is only read.
unsafe impl<T> Sync for SendPtr<T> {}

/// Checks that both operands hold every element their shape and strides address.
pub(crate) fn check_operands<T>(
    (m, n, k): (usize, usize, usize),
    (lhs, ls): (&[T], (usize, usize)),
    (rhs, rs): (&[T], (usize, usize)),
) {
    if m > 0 && n > 0 && k > 0 {
        assert!(
            lhs.len() > (m - 1) * ls.0 + (k - 1) * ls.1,
            "gemm lhs too small"
        );
        assert!(
            rhs.len() > (k - 1) * rs.0 + (n - 1) * rs.1,
            "gemm rhs too small"
        );
    }
}

/// The one call into the `gemm` crate, after checking both inputs' bounds.
///
/// # Safety
/// `dst` must be valid for writes (and, with `accumulate`, reads) at every
/// `i * dst_strides.0 + j * dst_strides.1` for `i < m`, `j < n`, and must not alias the inputs.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_raw<T: Float>(
    m: usize,
    n: usize,
    k: usize,
    dst: *mut T,
    dst_strides: (usize, usize),
    accumulate: bool,
    (lhs, lhs_strides): (&[T], (usize, usize)),
    (rhs, rhs_strides): (&[T], (usize, usize)),
    parallel: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    check_operands((m, n, k), (lhs, lhs_strides), (rhs, rhs_strides));
    let threads = threads();
    if parallel && threads > 1 && split_rows_across_threads(m, n, k, threads) {
        // SAFETY: as this function's contract, passed on unchanged.
        unsafe {
            gemm_row_blocks(
                (m, n, k),
                (dst, dst_strides),
                accumulate,
                (lhs, lhs_strides),
                (rhs, rhs_strides),
                threads,
            )
        };
        return;
    }
    let parallelism = if parallel && threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: the inputs' bounds are checked above, the destination's by the caller.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            dst_strides.1 as isize,
            dst_strides.0 as isize,
            accumulate,
            lhs.as_ptr(),
            lhs_strides.1 as isize,
            lhs_strides.0 as isize,
            rhs.as_ptr(),
            rhs_strides.1 as isize,
            rhs_strides.0 as isize,
            T::ONE,
            T::ONE,
            false,
            false,
            false,
            parallelism,
        )
    }
}

/// `gemm_raw` with each of `threads` threads taking a block of rows through its own
/// single-threaded GEMM (for products too narrow for gemm's own column split).
///
/// # Safety
/// As `gemm_raw`; the inputs' bounds are already checked.
unsafe fn gemm_row_blocks<T: Float>(
    (m, n, k): (usize, usize, usize),
    (dst, dst_strides): (*mut T, (usize, usize)),
    accumulate: bool,
    (lhs, lhs_strides): (&[T], (usize, usize)),
    rhs: (&[T], (usize, usize)),
    threads: usize,
) {
    use rayon::prelude::*;
    let block = m.div_ceil(threads);
    let dst = SendPtr(dst);
    (0..threads).into_par_iter().for_each(|t| {
        let rows = t * block..((t + 1) * block).min(m);
        if rows.is_empty() {
            return;
        }
        let dst = &dst;
        // SAFETY: row blocks are disjoint, and so are their destination slots (the
        // caller's layout addresses distinct (row, column) pairs distinctly); each
        // sub-product's slots are among those the caller guarantees valid.
        unsafe {
            gemm_raw(
                rows.len(),
                n,
                k,
                dst.0.add(rows.start * dst_strides.0),
                dst_strides,
                accumulate,
                (&lhs[rows.start * lhs_strides.0..], lhs_strides),
                rhs,
                false,
            )
        }
    });
}
