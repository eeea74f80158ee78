//! The bfloat16 GEMM's micro-kernel: an [`MR`] × [`NR`] tile of float32 sums over one
//! block of packed depth pairs, on AVX512-BF16's `vdpbf16ps` (two bfloat16
//! multiply-adds per 32-bit lane, twice a float32 FMA's work per instruction). It treats
//! subnormal inputs as zero and rounds each addition, as the widening path (exact
//! float32 products of the bfloat16 values, summed by the float32 GEMM) does in its
//! own order.

use super::pack::{MR, NR};

/// A tile of sums, row-major.
pub(crate) type Tile = [f32; MR * NR];

/// Which micro-kernel the GEMM runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bf16Path {
    /// `vdpbf16ps` (x86-64 with AVX512-BF16: Zen 4, Zen 5, Sapphire Rapids).
    Native,
    /// Operands rounded to bfloat16, widened back to float32 (exactly) and multiplied by
    /// the float32 GEMM (any CPU; no faster than float32).
    Widening,
}

impl Bf16Path {
    /// The fastest path this CPU has.
    pub fn best() -> Self {
        if has_avx512_bf16() {
            Bf16Path::Native
        } else {
            Bf16Path::Widening
        }
    }
}

/// Whether this CPU has AVX512-BF16 (`grep -o avx512_bf16 /proc/cpuinfo`).
pub fn has_avx512_bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512bf16")
            && std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// The tile `a_panel · b_panel` over `pairs` depth pairs (`a_panel`: `pairs * MR`,
/// `b_panel`: `pairs * NR` packed elements), through `vdpbf16ps`.
///
/// # Panics
/// If the CPU has no AVX512-BF16 (callers choose [`Bf16Path::Native`] only when it has).
pub(crate) fn tile(pairs: usize, a_panel: &[u32], b_panel: &[u32]) -> Tile {
    assert!(a_panel.len() >= pairs * MR && b_panel.len() >= pairs * NR);
    assert!(has_avx512_bf16(), "the native bf16 path needs avx512_bf16");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the panels hold `pairs` pairs each and the CPU has the features (asserted).
    return unsafe { native(pairs, a_panel.as_ptr(), b_panel.as_ptr()) };
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("avx512_bf16 is x86-64 only")
}

/// The native micro-kernel: 24 accumulators (6 rows × 4 vectors of 16 columns); each
/// depth pair loads three right vectors and broadcasts each row's left pair.
///
/// # Safety
/// The CPU must have AVX512-BF16 and AVX512F; `a` must hold `pairs * MR` and `b`
/// `pairs * NR` elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn native(pairs: usize, a: *const u32, b: *const u32) -> Tile {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); NR / 16]; MR];
    for q in 0..pairs {
        // SAFETY: q < pairs, so these reads lie inside the panels (the caller's contract).
        let (bq, aq) = unsafe { (b.add(q * NR), a.add(q * MR)) };
        let bv: [__m512bh; NR / 16] = std::array::from_fn(|v| {
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
    let mut out = [0f32; MR * NR];
    for (i, row) in acc.iter().enumerate() {
        for (v, s) in row.iter().enumerate() {
            // SAFETY: 16 lanes at i * NR + 16 * v < MR * NR.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(i * NR + 16 * v), *s) };
        }
    }
    out
}
