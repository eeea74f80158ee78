//! float32 GEMMs with a choice of products: float32 (`crate::cpu`'s GEMM), or the
//! products of 16-bit floats with float32 sums, as autocast's convolutions run (their
//! kernels carry the choice in their geometry). bfloat16 operands are rounded as they are
//! packed for the bfloat16 GEMM; float16 operands are rounded to float16 values into a
//! float32 copy, whose float32 GEMM multiplies exactly (11-bit significands give 22-bit
//! products) and sums in float32: float16 products with float32 sums, as a GPU's f16
//! tensor cores compute them, with no float16 instructions on the CPU.

use std::mem::MaybeUninit;

use candle_core::DType;
use half::slice::HalfFloatSliceExt;

use super::gemm::{gemm_native, gemm_native_packed_left, widened, PackedLeft};
use super::operand::Matrix;
use super::path::Bf16Path;
use crate::cpu::{self, Float};

/// A GEMM operand of the CPU GEMM: values and their (row, column) strides.
type Operand<'a, T> = (&'a [T], (usize, usize));

/// How a product (a GEMM, a convolution, an attention's tiles) multiplies: in its
/// operands' own float type, or (float32 operands) in a 16-bit float with float32 sums,
/// each operand rounded to nearest (ties to even) as it is read: autocast's products.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Products {
    /// In the operands' own float type.
    #[default]
    Native,
    /// bfloat16 products, float32 sums.
    Bf16,
    /// float16 products, float32 sums.
    F16,
}

impl Products {
    /// The products of an operand of `dtype`: 16-bit for a 16-bit float, else native.
    pub fn of(dtype: DType) -> Products {
        match dtype {
            DType::BF16 => Products::Bf16,
            DType::F16 => Products::F16,
            _ => Products::Native,
        }
    }

    /// The 16-bit float the products are of, if any.
    pub fn low_dtype(self) -> Option<DType> {
        match self {
            Products::Native => None,
            Products::Bf16 => Some(DType::BF16),
            Products::F16 => Some(DType::F16),
        }
    }
}

/// `s` rounded to float16 values (to nearest, ties to even), kept as float32, when `T` is
/// f32.
fn f16_rounded<T: 'static>(s: &[T]) -> Option<Vec<f32>> {
    let s = as_f32(s)?;
    let mut halves = vec![half::f16::ZERO; s.len()];
    halves.convert_from_f32_slice(s);
    let mut out = vec![0f32; s.len()];
    halves.convert_to_f32_slice(&mut out);
    Some(out)
}

/// Both operands rounded to float16 values, when `T` is f32.
fn f16_operands<T: 'static>(lhs: &[T], rhs: &[T]) -> Option<(Vec<f32>, Vec<f32>)> {
    Some((f16_rounded(lhs)?, f16_rounded(rhs)?))
}

/// `s` as float32 values, when `T` is f32.
pub(crate) fn as_f32<T: 'static>(s: &[T]) -> Option<&[f32]> {
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>())
        // SAFETY: T is f32 (checked): the same type, length and layout.
        .then(|| unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<f32>(), s.len()) })
}

/// A kernel call's two inputs and its destination as float32 slices, when `T` is f32.
pub(crate) type F32Call<'a> = (&'a [f32], &'a [f32], &'a mut [MaybeUninit<f32>]);

/// [`as_f32`] for a call's two inputs and its destination.
pub(crate) fn f32_call<'a, T: 'static>(
    a: &'a [T],
    b: &'a [T],
    dst: &'a mut [MaybeUninit<T>],
) -> Option<F32Call<'a>> {
    let (a, b) = (as_f32(a)?, as_f32(b)?);
    // SAFETY: T is f32 (`as_f32` succeeded): the same type, length and layout.
    let dst = unsafe { &mut *(dst as *mut [MaybeUninit<T>] as *mut [MaybeUninit<f32>]) };
    Some((a, b, dst))
}

/// An operand as a bfloat16 GEMM operand, when `T` is f32.
fn f32_matrix<'a, T: 'static>((values, strides): Operand<'a, T>) -> Option<Matrix<'a>> {
    Some(Matrix::new(as_f32(values)?, strides))
}

/// The two operands as bfloat16 GEMM operands, when `T` is f32.
fn f32_operands<'a, T: 'static>(
    lhs: Operand<'a, T>,
    rhs: Operand<'a, T>,
) -> Option<(Matrix<'a>, Matrix<'a>)> {
    Some((f32_matrix(lhs)?, f32_matrix(rhs)?))
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
    if products == Products::F16 {
        if let Some((a, b)) = f16_operands(lhs.0, rhs.0) {
            // SAFETY: T is f32 (f16_operands succeeded): the same type and layout.
            let dst = unsafe { &mut *(dst as *mut [MaybeUninit<T>] as *mut [MaybeUninit<f32>]) };
            return cpu::gemm_uninit(m, n, k, dst, (&a, lhs.1), (&b, rhs.1), parallel);
        }
    }
    let Some((a, b)) = f32_operands(lhs, rhs).filter(|_| products == Products::Bf16) else {
        return cpu::gemm_uninit(m, n, k, dst, lhs, rhs, parallel);
    };
    assert_eq!(dst.len(), m * n, "gemm destination must have m * n slots");
    cpu::check_operands((m, n, k), lhs, rhs);
    if let Some(kernel) = Bf16Path::current().kernel() {
        let dst = (dst.as_mut_ptr().cast::<f32>(), (n, 1));
        // SAFETY: an exclusive borrow of m * n slots, addressed row-major; without
        // `accumulate` every slot is written before it is read; the CPU has the kernel's
        // instructions (`current` never names a faster path).
        unsafe { gemm_native(kernel, (m, n, k), dst, false, &a, &b, parallel) };
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
    if products == Products::F16 {
        if let Some((a, b)) = f16_operands(lhs.0, rhs.0) {
            // SAFETY: T is f32 (f16_operands succeeded): the same type and layout.
            let dst = unsafe { &mut *(dst as *mut [T] as *mut [f32]) };
            let (lhs, rhs) = ((&a[..], lhs.1), (&b[..], rhs.1));
            return cpu::gemm_strided(m, n, k, (dst, dst_strides), accumulate, lhs, rhs, parallel);
        }
    }
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
    cpu::check_operands((m, n, k), lhs, rhs);
    if let Some(kernel) = Bf16Path::current().kernel() {
        let dst = (dst.as_mut_ptr().cast::<f32>(), dst_strides);
        // SAFETY: the destination's bounds are checked above and it is an exclusive
        // borrow; the CPU has the kernel's instructions.
        unsafe { gemm_native(kernel, (m, n, k), dst, accumulate, &a, &b, parallel) };
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

/// A left operand (`m × k`) packed once for the bfloat16 products that share it
/// ([`PackedLeft`]), where they run on the native path with float32 values; `None`
/// elsewhere (each product then packs its own, as [`gemm_uninit_with`] does).
pub(crate) fn pack_left_once<T: Float>(
    products: Products,
    (m, k): (usize, usize),
    (lhs, strides): Operand<'_, T>,
) -> Option<PackedLeft> {
    let kernel = Bf16Path::current().kernel()?;
    if products != Products::Bf16 || m == 0 || k == 0 {
        return None;
    }
    let a = f32_matrix((lhs, strides))?;
    assert!(
        lhs.len() > (m - 1) * strides.0 + (k - 1) * strides.1,
        "gemm lhs too small"
    );
    Some(PackedLeft::new(kernel, &a, (m, k), true))
}

/// [`gemm_uninit_with`] whose left operand, when `packed` is given, is that one (`lhs`
/// packed by [`pack_left_once`]): the same values and bits, one packing fewer.
pub(crate) fn gemm_uninit_packed<T: Float>(
    products: Products,
    packed: Option<&PackedLeft>,
    (m, n, k): (usize, usize, usize),
    dst: &mut [MaybeUninit<T>],
    lhs: Operand<'_, T>,
    rhs: Operand<'_, T>,
    parallel: bool,
) {
    match (packed, f32_matrix(rhs)) {
        (Some(a), Some(b)) if n > 0 => {
            assert_eq!(a.shape(), (m, k), "packed left operand of another shape");
            assert_eq!(dst.len(), m * n, "gemm destination must have m * n slots");
            cpu::check_operands((m, n, k), lhs, rhs);
            let dst = (dst.as_mut_ptr().cast::<f32>(), n);
            // SAFETY: T is f32 (f32_matrix succeeded); an exclusive borrow of m * n slots,
            // row-major, each written before it is read; a PackedLeft exists only where the
            // CPU has the feature.
            unsafe { gemm_native_packed_left(a, n, dst, false, &b, parallel) }
        }
        _ => gemm_uninit_with(products, (m, n, k), dst, lhs, rhs, parallel),
    }
}

/// [`gemm_strided_with`] whose left operand, when `packed` is given, is that one (as
/// [`gemm_uninit_packed`]), for a destination with contiguous rows.
pub(crate) fn gemm_strided_packed<T: Float>(
    products: Products,
    packed: Option<&PackedLeft>,
    (m, n, k): (usize, usize, usize),
    (dst, dst_strides): (&mut [T], (usize, usize)),
    accumulate: bool,
    (lhs, rhs): (Operand<'_, T>, Operand<'_, T>),
    parallel: bool,
) {
    match (packed, f32_matrix(rhs)) {
        (Some(a), Some(b)) if n > 0 && dst_strides.1 == 1 => {
            assert_eq!(a.shape(), (m, k), "packed left operand of another shape");
            assert!(
                dst.len() > (m - 1) * dst_strides.0 + (n - 1),
                "gemm destination too small"
            );
            cpu::check_operands((m, n, k), lhs, rhs);
            let dst = (dst.as_mut_ptr().cast::<f32>(), dst_strides.0);
            // SAFETY: T is f32 (f32_matrix succeeded); an exclusive borrow whose addressed
            // slots are in bounds (asserted); a PackedLeft exists only where the CPU has
            // the feature.
            unsafe { gemm_native_packed_left(a, n, dst, accumulate, &b, parallel) }
        }
        _ => gemm_strided_with(
            products,
            (m, n, k),
            (dst, dst_strides),
            accumulate,
            (lhs, rhs),
            parallel,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((i * seed % 101) as f32 - 50.0) / 7.0)
            .collect()
    }

    #[test]
    fn a_left_operand_packed_once_gives_the_products_bits() {
        for path in [Bf16Path::Native, Bf16Path::Amx] {
            if path.or_slower() != path {
                eprintln!("skipped: this CPU lacks {path:?} (a packed left operand is native)");
                continue;
            }
            path.scope(packed_left_gives_the_products_bits);
        }
    }

    fn packed_left_gives_the_products_bits() {
        // Edges everywhere: 13 rows (panels of 6), 70 columns (of 64), odd depth past one
        // block of pairs.
        let (m, n, k) = (13, 70, 301);
        let (lhs, rhs) = (values(m * k, 37), values(k * n, 53));
        let (a, b) = ((&lhs[..], (k, 1)), (&rhs[..], (n, 1)));
        let packed = pack_left_once(Products::Bf16, (m, k), a).expect("the native path");
        let bits = |d: Vec<MaybeUninit<f32>>| -> Vec<u32> {
            // SAFETY: every slot was written by the product.
            d.into_iter()
                .map(|v| unsafe { v.assume_init() }.to_bits())
                .collect()
        };
        let mut want = vec![MaybeUninit::uninit(); m * n];
        gemm_uninit_with(Products::Bf16, (m, n, k), &mut want, a, b, false);
        let mut got = vec![MaybeUninit::uninit(); m * n];
        gemm_uninit_packed(
            Products::Bf16,
            Some(&packed),
            (m, n, k),
            &mut got,
            a,
            b,
            true,
        );
        assert_eq!(bits(got), bits(want));

        // A transposed left operand, added into rows of n + 3 slots.
        let at = (&lhs[..], (1, m));
        let packed = pack_left_once(Products::Bf16, (m, k), at).expect("the native path");
        let start = values(m * (n + 3), 11);
        let (mut want, mut got) = (start.clone(), start);
        let strides = (n + 3, 1);
        let shape = (m, n, k);
        gemm_strided_with(
            Products::Bf16,
            shape,
            (&mut want, strides),
            true,
            (at, b),
            false,
        );
        let packed = Some(&packed);
        gemm_strided_packed(
            Products::Bf16,
            packed,
            shape,
            (&mut got, strides),
            true,
            (at, b),
            true,
        );
        assert_eq!(got, want);
        assert_ne!(got, values(m * (n + 3), 11), "the product was added");
    }

    #[test]
    fn nothing_is_packed_ahead_for_float32_products() {
        let lhs = values(12, 3);
        assert!(pack_left_once(Products::Native, (3, 4), (&lhs[..], (4, 1))).is_none());
        assert!(pack_left_once(Products::F16, (3, 4), (&lhs[..], (4, 1))).is_none());
    }
}
