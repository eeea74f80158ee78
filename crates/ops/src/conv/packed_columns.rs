//! The im2col matrix of a whole-batch convolution with bfloat16 products, packed straight
//! into the bfloat16 GEMM's right panels, for input planes of at most 64 values and
//! outputs of at most 16 pixels (CIFAR ResNet's 4x4 layers and its 8x8 -> 4x4 stride-2
//! one). One image's row of the matrix (one input channel and kernel tap, every output
//! pixel) is two AVX-512 permutes of the channel's plane, held in four registers; two
//! rows are rounded to bfloat16 and zipped into the GEMM's depth pairs there. The float32 matrix (9.4 MB for a 512-channel
//! layer at batch 32), its write and the packer's read of it are gone; the values, and so
//! the product, are the same bits.

use std::mem::MaybeUninit;

use super::params::Geom;
use crate::bf16::{f32_call, has_avx512_bf16, Bf16Path, Matrix, Products};

/// Output pixels an image may have: one AVX-512 register of f32.
const LANES: usize = 16;
/// Values an input plane may hold: four registers.
const PLANE_VALUES: usize = 4 * LANES;

/// Whether `g` runs here: one group, bfloat16 products on a CPU with AVX512-BF16 (and
/// AVX512-BW, which every such CPU has), planes of at most [`PLANE_VALUES`] values and
/// outputs of at most [`LANES`] pixels.
pub(super) fn fits(g: &Geom) -> bool {
    g.products == Products::Bf16
        && g.groups == 1
        && g.h * g.w <= PLANE_VALUES
        && (1..=LANES).contains(&g.pixels())
        && has_avx512_bw_bf16()
}

fn has_avx512_bw_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        has_avx512_bf16() && std::arch::is_x86_feature_detected!("avx512bw")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The whole-batch forward product `dst (c_out × n * pixels) = w · im2col(xs)` of a
/// convolution that [`fits`], with float32 data: true when it ran, false (nothing
/// written) for any other convolution or type.
pub(super) fn forward<T: 'static>(
    g: &Geom,
    xs: &[T],
    ws: &[T],
    dst: &mut [MaybeUninit<T>],
) -> bool {
    let Some((xs, ws, dst)) = f32_call(xs, ws, dst) else {
        return false;
    };
    let Some(kernel) = Bf16Path::current().kernel().filter(|_| fits(g)) else {
        return false;
    };
    let (m, n) = (g.c_out, g.n * g.pixels());
    assert_eq!(dst.len(), m * n, "packed_columns: destination size");
    assert_eq!(
        xs.len(),
        g.n * g.c_in * g.h * g.w,
        "packed_columns: input size"
    );
    let w = Matrix::new(ws, (g.k(), 1));
    let taps = taps(g);
    let pair_row = |q: usize, row: &mut [u32]| {
        assert_eq!(row.len(), n, "packed_columns: a pair row's length");
        // SAFETY: `fits` checked the CPU's features; the sizes are asserted.
        unsafe { pair_row(g, &taps, xs, q, row) }
    };
    let dst = (dst.as_mut_ptr().cast(), n);
    // SAFETY: `fits` checked the CPU's features, and `current` names no kernel the CPU
    // lacks; `dst` is an exclusive borrow of m rows of n slots (f32: `f32_call` succeeded
    // for T), each written.
    unsafe {
        crate::bf16::gemm_native_right_pairs(kernel, (m, n, g.k()), dst, &w, &pair_row, true)
    };
    true
}

/// One kernel tap as a permute of the plane: output pixel j reads plane element `idx[j]`
/// where bit j of `mask` is set, and zero (padding) where it is not.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Tap {
    idx: [i32; LANES],
    mask: u16,
}

/// Every tap of the kernel, in im2col's row order (ky, then kx).
fn taps(g: &Geom) -> Vec<Tap> {
    let ([sh, sw], [ph, pw], [dh, dw]) = (g.p.stride, g.p.padding, g.p.dilation);
    let mut taps = Vec::with_capacity(g.kh * g.kw);
    for ky in 0..g.kh {
        for kx in 0..g.kw {
            let mut tap = Tap {
                idx: [0; LANES],
                mask: 0,
            };
            for j in 0..g.pixels() {
                let (oy, ox) = (j / g.ow, j % g.ow);
                let iy = (oy * sh + ky * dh) as isize - ph as isize;
                let ix = (ox * sw + kx * dw) as isize - pw as isize;
                if (0..g.h as isize).contains(&iy) && (0..g.w as isize).contains(&ix) {
                    tap.idx[j] = (iy as usize * g.w + ix as usize) as i32;
                    tap.mask |= 1 << j;
                }
            }
            taps.push(tap);
        }
    }
    taps
}

/// Depth pair `q` (matrix rows 2q and 2q + 1) of every image, into `row` (`n * pixels`
/// elements): row 2q's bfloat16 bits low, row 2q + 1's high (zero past the depth).
///
/// # Safety
/// The CPU must have AVX-512 F and BW; `xs` and `row` must have `g`'s sizes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn pair_row(g: &Geom, taps: &[Tap], xs: &[f32], q: usize, row: &mut [u32]) {
    use std::arch::x86_64::*;
    let (kk, hw, p) = (g.kh * g.kw, g.h * g.w, g.pixels());
    let out_mask = ((1u32 << p) - 1) as __mmask16;
    let row_of = |k: usize| (k < g.k()).then(|| (k / kk, &taps[k % kk]));
    let (even, odd) = (row_of(2 * q), row_of(2 * q + 1));
    let Some((c0, t0)) = even else {
        return row.fill(0);
    };
    let plane = |n: usize, c: usize| (n * g.c_in + c) * hw;
    for n in 0..g.n {
        // SAFETY (the loads and the store): plane c of image n is hw values at
        // plane(n, c), inside `xs`, and only its hw lanes are read; image n's p pixels
        // are row[n * p..], inside `row`, and only p lanes are stored.
        let v0 = unsafe { load_plane(xs.as_ptr().add(plane(n, c0)), hw) };
        let mut pairs = gathered(t0, &v0);
        if let Some((c1, t1)) = odd {
            let v1 = match c1 == c0 {
                true => v0,
                false => unsafe { load_plane(xs.as_ptr().add(plane(n, c1)), hw) },
            };
            pairs = _mm512_or_si512(pairs, _mm512_slli_epi32::<16>(gathered(t1, &v1)));
        }
        unsafe { _mm512_mask_storeu_epi32(row.as_mut_ptr().add(n * p).cast(), out_mask, pairs) };
    }
}

/// A plane of `hw` values (at most [`PLANE_VALUES`]) in four registers, zeros past it.
///
/// # Safety
/// `at` must be valid for reading `hw` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn load_plane(at: *const f32, hw: usize) -> [std::arch::x86_64::__m512; 4] {
    use std::arch::x86_64::*;
    std::array::from_fn(|r| {
        let lanes = hw.saturating_sub(LANES * r).min(LANES);
        let mask = ((1u32 << lanes) - 1) as __mmask16;
        // SAFETY: only the `lanes` values of this register that lie in the plane are read
        // (masked lanes do not fault).
        unsafe { _mm512_maskz_loadu_ps(mask, at.wrapping_add(LANES * r)) }
    })
}

/// Tap `t` of the plane `v`: each output pixel's value, rounded to bfloat16, in the low
/// half of its lane. Elements 0-31 come from the first two registers, 32-63 from the
/// last two (bit 5 of the index chooses).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
fn gathered(t: &Tap, v: &[std::arch::x86_64::__m512; 4]) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    // SAFETY: `idx` is 16 i32s, one register.
    let idx = unsafe { _mm512_loadu_si512(t.idx.as_ptr().cast()) };
    let low = _mm512_permutex2var_ps(v[0], idx, v[1]);
    let high = _mm512_permutex2var_ps(v[2], idx, v[3]);
    let upper = _mm512_test_epi32_mask(idx, _mm512_set1_epi32(32));
    let value = _mm512_mask_blend_ps(upper, low, high);
    round_to_bf16(_mm512_maskz_mov_ps(t.mask, value))
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn pair_row(_: &Geom, _: &[Tap], _: &[f32], _: usize, _: &mut [u32]) {
    unreachable!("fits() is false off x86-64")
}

/// Each lane's bfloat16 bits (in its low 16 bits), rounded to nearest, ties to even, a
/// NaN made quiet: [`crate::bf16::round_to_bf16`] on 16 lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
fn round_to_bf16(v: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    let bits = _mm512_castps_si512(v);
    let high = _mm512_srli_epi32::<16>(bits);
    let lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
    let bias = _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff));
    let rounded = _mm512_srli_epi32::<16>(_mm512_add_epi32(bits, bias));
    let nan = _mm512_or_si512(high, _mm512_set1_epi32(0x0040));
    let is_nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v);
    _mm512_mask_blend_epi32(is_nan, rounded, nan)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bf16::{pack_operand, pack_right_from_pairs, Kernel, Panels, Side};
    use crate::conv::im2col::batch_columns;
    use crate::conv::Conv2dParams;

    fn geom(n: usize, c: usize, hw: [usize; 2], k: [usize; 2], p: Conv2dParams) -> Geom {
        let [h, w] = hw;
        let oh = (h + 2 * p.padding[0] - p.dilation[0] * (k[0] - 1) - 1) / p.stride[0] + 1;
        let ow = (w + 2 * p.padding[1] - p.dilation[1] * (k[1] - 1) - 1) / p.stride[1] + 1;
        Geom {
            n,
            c_in: c,
            h,
            w,
            c_out: 8,
            kh: k[0],
            kw: k[1],
            oh,
            ow,
            groups: 1,
            p,
            products: Products::Bf16,
        }
    }

    /// The panels are the bits the packer gives the f32 im2col matrix: CIFAR's 4x4
    /// layer, a 3x3 plane (9 pixels: images straddle panels), a strided 4x4, a 2x2 plane
    /// with a 1x1 kernel, an odd depth (3 channels, 3x3), a batch that is not a multiple
    /// of a panel's images, planes of 64 and 49 values (all four registers), and values
    /// that round up, to even, to infinity and NaN.
    #[test]
    fn packed_columns_are_the_packers_bits_of_the_f32_matrix() {
        if !has_avx512_bw_bf16() {
            eprintln!("skipped: this CPU has no avx512_bf16 (the native bf16 path is off)");
            return;
        }
        let pad1 = Conv2dParams::new(1, 1);
        let cases = [
            geom(5, 19, [4, 4], [3, 3], pad1),
            geom(7, 4, [3, 3], [3, 3], pad1),
            geom(3, 6, [4, 4], [3, 3], Conv2dParams::new(2, 1)),
            geom(9, 5, [2, 2], [1, 1], Conv2dParams::new(1, 0)),
            geom(6, 3, [4, 4], [3, 3], pad1),
            geom(2, 2, [4, 3], [2, 3], Conv2dParams::new(1, 1)),
            // 8x8 planes, stride 2 (ResNet's 256 -> 512 layer), and 7x7 (49 values).
            geom(5, 6, [8, 8], [3, 3], Conv2dParams::new(2, 1)),
            geom(3, 2, [7, 7], [3, 3], Conv2dParams::new(2, 0)),
        ];
        for g in cases {
            assert!(fits(&g), "{g:?}");
            let len = g.n * g.c_in * g.h * g.w;
            let mut xs: Vec<f32> = crate::compare::uniform(7, len)
                .iter()
                .map(|&v| (v * 3.0) as f32)
                .collect();
            xs[0] = f32::from_bits(0x3f80_8000); // a tie: rounds to even (down)
            xs[1] = f32::from_bits(0x3f81_8000); // a tie: rounds to even (up)
            xs[2] = f32::MAX;
            xs[3] = f32::NAN;
            let col = batch_columns(&g, &xs, 0);
            let np = g.n * g.pixels();
            let matrix = Matrix::new(&col, (np, 1));
            let taps = taps(&g);
            // SAFETY: `fits` checked the CPU's features; the sizes are the geometry's.
            let pair_row = |q: usize, row: &mut [u32]| unsafe { pair_row(&g, &taps, &xs, q, row) };
            // Both kernels' layouts (AMX's pads the depth to whole tiles).
            for kernel in [Kernel::Avx512, Kernel::Amx] {
                let mut want = Panels::default();
                pack_operand(
                    &matrix,
                    (Side::Right, kernel),
                    (np, g.k()),
                    &mut want,
                    false,
                );
                // A buffer holding another product's panels: every element must be written.
                let mut got = Panels::default();
                got.prefix(want.len()).fill(0xdead_beef);
                pack_right_from_pairs(kernel, (np, g.k()), &pair_row, &mut got, true);
                assert!(got[..] == want[..], "{g:?} {kernel:?}: the panels differ");
            }
        }
    }
}
