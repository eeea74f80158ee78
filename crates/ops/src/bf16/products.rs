//! float32 GEMMs with a choice of products: float32 (`crate::cpu`'s GEMM), or bfloat16
//! products with float32 sums, both operands rounded to bfloat16 as they are packed, as
//! autocast's convolutions run (their kernels carry the choice in their geometry).

use std::mem::MaybeUninit;

use super::gemm::{gemm_native, widened};
use super::microkernel::has_avx512_bf16;
use super::operand::{Matrix, Values};
use crate::cpu::{self, Float};

/// A GEMM operand of the CPU GEMM: values and their (row, column) strides.
type Operand<'a, T> = (&'a [T], (usize, usize));

/// How a GEMM multiplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Products {
    /// In its own float type.
    #[default]
    Native,
    /// (float32 only) bfloat16 products, float32 sums.
    Bf16,
}

/// `s` as float32 values, when `T` is f32.
fn as_f32<T: 'static>(s: &[T]) -> Option<&[f32]> {
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>())
        // SAFETY: T is f32 (checked): the same type, length and layout.
        .then(|| unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<f32>(), s.len()) })
}

/// Checks that both operands hold every element their shape and strides address.
fn check_operands<T>(
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

/// The two operands as bfloat16 GEMM operands, when `T` is f32.
fn f32_operands<'a, T: 'static>(
    (lhs, ls): Operand<'a, T>,
    (rhs, rs): Operand<'a, T>,
) -> Option<(Matrix<'a>, Matrix<'a>)> {
    let (a, b) = (as_f32(lhs)?, as_f32(rhs)?);
    Some((
        Matrix {
            values: Values::F32(a),
            strides: ls,
        },
        Matrix {
            values: Values::F32(b),
            strides: rs,
        },
    ))
}

/// [`cpu::gemm_uninit`] with the given products.
pub(crate) fn gemm_uninit_with<T: Float>(
    products: Products,
    (m, n, k): (usize, usize, usize),
    dst: &mut [MaybeUninit<T>],
    lhs: (&[T], (usize, usize)),
    rhs: (&[T], (usize, usize)),
    parallel: bool,
) {
    let Some((a, b)) = f32_operands(lhs, rhs).filter(|_| products == Products::Bf16) else {
        return cpu::gemm_uninit(m, n, k, dst, lhs, rhs, parallel);
    };
    assert_eq!(dst.len(), m * n, "gemm destination must have m * n slots");
    check_operands((m, n, k), lhs, rhs);
    if has_avx512_bf16() {
        let dst = (dst.as_mut_ptr().cast::<f32>(), (n, 1));
        // SAFETY: an exclusive borrow of m * n slots, addressed row-major; without
        // `accumulate` every slot is written before it is read; the CPU has the feature.
        unsafe { gemm_native((m, n, k), dst, false, &a, &b, parallel) };
    } else {
        let (a, b) = (widened(&a), widened(&b));
        // SAFETY: T is f32 (f32_operands succeeded): the same type and layout.
        let dst = unsafe { &mut *(dst as *mut [MaybeUninit<T>] as *mut [MaybeUninit<f32>]) };
        cpu::gemm_uninit(m, n, k, dst, (&a.0, a.1), (&b.0, b.1), parallel);
    }
}

/// [`cpu::gemm_strided`] with the given products.
pub(crate) fn gemm_strided_with<T: Float>(
    products: Products,
    (m, n, k): (usize, usize, usize),
    (dst, dst_strides): (&mut [T], (usize, usize)),
    accumulate: bool,
    (lhs, rhs): (Operand<'_, T>, Operand<'_, T>),
    parallel: bool,
) {
    let Some((a, b)) = f32_operands(lhs, rhs).filter(|_| products == Products::Bf16) else {
        return cpu::gemm_strided(m, n, k, (dst, dst_strides), accumulate, lhs, rhs, parallel);
    };
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        dst.len() > (m - 1) * dst_strides.0 + (n - 1) * dst_strides.1,
        "gemm destination too small"
    );
    check_operands((m, n, k), lhs, rhs);
    if has_avx512_bf16() {
        let dst = (dst.as_mut_ptr().cast::<f32>(), dst_strides);
        // SAFETY: the destination's bounds are checked above and it is an exclusive
        // borrow; the CPU has the feature.
        unsafe { gemm_native((m, n, k), dst, accumulate, &a, &b, parallel) };
    } else {
        let (a, b) = (widened(&a), widened(&b));
        // SAFETY: T is f32 (f32_operands succeeded): the same type and layout.
        let dst = unsafe { &mut *(dst as *mut [T] as *mut [f32]) };
        cpu::gemm_strided(
            m,
            n,
            k,
            (dst, dst_strides),
            accumulate,
            (&a.0, a.1),
            (&b.0, b.1),
            parallel,
        );
    }
}
