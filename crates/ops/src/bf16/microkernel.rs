//! The bfloat16 GEMM's micro-kernel: an [`MR`] × [`NR`] tile of float32 sums over one
//! block of packed depth pairs, on AVX512-BF16's `vdpbf16ps` (two bfloat16
//! multiply-adds per 32-bit lane, twice a float32 FMA's work per instruction). It treats
//! subnormal inputs as zero and rounds each addition, as the widening path (exact
//! float32 products of the bfloat16 values, summed by the float32 GEMM) does in its
//! own order.

use super::pack::{MR, NR};
use super::path::has_avx512_bf16;

/// A tile's operands: `pairs` depth pairs of a left panel (`a`) and a right one (`b`),
/// laid out for the kernel that reads them.
#[derive(Clone, Copy)]
pub(crate) struct TilePanels<'a> {
    pub pairs: usize,
    pub a: &'a [u32],
    pub b: &'a [u32],
}

/// The tile's real rows and columns, and where they go: row `i`'s `nr` columns start at
/// `dst + i * row_stride`, contiguous.
pub(crate) struct TileOut {
    pub dst: *mut f32,
    pub row_stride: usize,
    pub rows: usize,
    pub cols: usize,
}

/// The tile `p.a · p.b` over `p.pairs` depth pairs, added to (with `add`) or
/// written over the destination's real rows and columns, which the accumulators load
/// and store directly (masked at the edges), with no tile in between.
///
/// # Safety
/// As [`tile`]'s panels; `out.dst` must be valid for reads and writes at
/// `i * out.row_stride + j` for `i < out.rows`, `j < out.cols`, with `out.rows <= MR`
/// and `out.cols <= NR`, and no other thread may touch those slots meanwhile.
pub(crate) unsafe fn tile_into(p: TilePanels<'_>, out: &TileOut, add: bool) {
    let TilePanels { pairs, a, b } = p;
    assert!(a.len() >= pairs * MR && b.len() >= pairs * NR);
    assert!(out.rows <= MR && out.cols <= NR);
    assert!(has_avx512_bf16(), "the native bf16 path needs avx512_bf16");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract, the panels' sizes and the CPU's features (asserted).
    unsafe {
        native_into(pairs, a.as_ptr(), b.as_ptr(), out, add)
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("avx512_bf16 is x86-64 only")
}

/// The native micro-kernel: 24 accumulators (6 rows × 4 vectors of 16 columns), loaded
/// from (with `add`) and stored to the destination; each depth pair loads four right
/// vectors and broadcasts each row's left pair. Edge tiles load and store masked, so
/// the missing lanes are never touched.
///
/// # Safety
/// As [`tile_into`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn native_into(pairs: usize, a: *const u32, b: *const u32, out: &TileOut, add: bool) {
    use std::arch::x86_64::*;
    const V: usize = NR / 16;
    let masks: [__mmask16; V] = std::array::from_fn(|v| {
        let lanes = out.cols.saturating_sub(16 * v).min(16);
        ((1u32 << lanes) - 1) as __mmask16
    });
    // Row i's vector v: addressed with wrapping arithmetic, as edge rows and vectors
    // past the destination are never dereferenced (rows past `out.rows` are skipped,
    // lanes past `out.cols` are masked off, and masked lanes do not fault).
    let at = |i: usize, v: usize| out.dst.wrapping_add(i * out.row_stride + 16 * v);
    // Full-width tiles load and store whole vectors (masked stores are slower on Zen 4).
    let full = out.cols == NR;
    let mut acc = [[_mm512_setzero_ps(); V]; MR];
    if add {
        for (i, row) in acc.iter_mut().enumerate().take(out.rows) {
            for (v, s) in row.iter_mut().enumerate() {
                // SAFETY: the unmasked lanes are real slots (the caller's contract); a
                // full tile's 16 lanes all are.
                *s = unsafe {
                    match full {
                        true => _mm512_loadu_ps(at(i, v)),
                        false => _mm512_maskz_loadu_ps(masks[v], at(i, v)),
                    }
                };
            }
        }
    }
    for q in 0..pairs {
        // SAFETY: q < pairs, so these reads lie inside the panels (the caller's contract).
        let (bq, aq) = unsafe { (b.add(q * NR), a.add(q * MR)) };
        let bv: [__m512bh; V] = std::array::from_fn(|v| {
            // SAFETY: as above; unaligned loads of 16 lanes within the panel's row.
            let x = unsafe { _mm512_loadu_si512(bq.add(16 * v).cast()) };
            // SAFETY: both are 512 bits of plain data.
            unsafe { std::mem::transmute::<__m512i, __m512bh>(x) }
        });
        for (i, row) in acc.iter_mut().enumerate() {
            // SAFETY: i < MR, inside the left panel's pair.
            let pair = unsafe { *aq.add(i) } as i32;
            // SAFETY: 512 bits of plain data.
            let av = unsafe { std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(pair)) };
            for (s, bv) in row.iter_mut().zip(&bv) {
                *s = _mm512_dpbf16_ps(*s, av, *bv);
            }
        }
    }
    for (i, row) in acc.iter().enumerate().take(out.rows) {
        for (v, s) in row.iter().enumerate() {
            // SAFETY: as the loads.
            unsafe {
                match full {
                    true => _mm512_storeu_ps(at(i, v), *s),
                    false => _mm512_mask_storeu_ps(at(i, v), masks[v], *s),
                }
            };
        }
    }
}
