//! A float32 linear layer's forward for few rows (a batch of one, a transformer's decoding
//! step, a CNN's last stage on small images): `y [m, n] = x [m, k] · weightᵀ` as dot
//! products of contiguous rows, four weight rows against four input rows at a time in
//! fused multiply-adds, so each weight row is read from memory once. The `gemm` crate
//! packs the whole weight for such shapes and ran them at 1-2 GB/s of weight
//! (`cargo bench --bench transformer_layers -- "linear forward 16x"`).
//!
//! The vector width is chosen at run time by `pulp` (AVX-512, AVX2 + FMA, or scalar).

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use crate::cpu;

/// Whether a float32 forward of `m` rows, `k` inputs and `n` outputs runs faster here
/// than through the `gemm` crate (`cargo bench --bench transformer_layers -- "linear
/// forward"`, Zen 4, 2 threads): at one row in both directions (110 against 185 µs at
/// 1x768->3072, 97 against 165 at 1x3072->768); at 16 rows when the sum is deeper than
/// the output is wide (1.2-1.5 against 8.4 ms at 16x3072->768), but not when it is
/// shallower (2.2-2.6 against 1.5 ms at 16x768->3072).
pub(crate) fn takes_few_rows_path(m: usize, n: usize, k: usize) -> bool {
    m > 0 && n > 0 && k > 0 && (m <= 4 || (m < 128 && k >= n))
}

/// `J × I` dot products of `J` weight rows with `I` input rows, each of `k` values.
#[inline(always)]
fn dots<S: Simd, const J: usize, const I: usize>(
    simd: S,
    w: [&[f32]; J],
    x: [&[f32]; I],
) -> [[f32; I]; J] {
    let wv: [(&[S::f32s], &[f32]); J] = w.map(S::as_simd_f32s);
    let xv: [(&[S::f32s], &[f32]); I] = x.map(S::as_simd_f32s);
    let mut acc = [[simd.splat_f32s(0.0); I]; J];
    for c in 0..wv[0].0.len() {
        let wl: [S::f32s; J] = std::array::from_fn(|a| wv[a].0[c]);
        let xl: [S::f32s; I] = std::array::from_fn(|b| xv[b].0[c]);
        for (acc, &w) in acc.iter_mut().zip(&wl) {
            for (acc, &x) in acc.iter_mut().zip(&xl) {
                *acc = simd.mul_add_f32s(w, x, *acc);
            }
        }
    }
    std::array::from_fn(|a| {
        std::array::from_fn(|b| {
            let tail: f32 = wv[a].1.iter().zip(xv[b].1).map(|(w, x)| w * x).sum();
            simd.reduce_sum_f32s(acc[a][b]) + tail
        })
    })
}

/// Weight rows against every input row, into `out` as `[rows, m]`.
struct Block<'a> {
    x: &'a [f32],
    weight_rows: &'a [f32],
    k: usize,
    out: &'a mut [f32],
}

impl Block<'_> {
    /// `J` weight rows from row `j` against every input row.
    #[inline(always)]
    fn rows<S: Simd, const J: usize>(&mut self, simd: S, j: usize) {
        let (k, m) = (self.k, self.x.len() / self.k);
        let w: [&[f32]; J] = std::array::from_fn(|a| &self.weight_rows[(j + a) * k..][..k]);
        let x = |i: usize| &self.x[i * k..][..k];
        let mut i = 0;
        while i + 4 <= m {
            let d = dots::<S, J, 4>(simd, w, [x(i), x(i + 1), x(i + 2), x(i + 3)]);
            self.store(j, i, d);
            i += 4;
        }
        while i < m {
            let d = dots::<S, J, 1>(simd, w, [x(i)]);
            self.store(j, i, d);
            i += 1;
        }
    }

    #[inline(always)]
    fn store<const J: usize, const I: usize>(&mut self, j: usize, i: usize, d: [[f32; I]; J]) {
        let m = self.x.len() / self.k;
        for (a, row) in d.iter().enumerate() {
            self.out[(j + a) * m + i..][..I].copy_from_slice(row);
        }
    }
}

impl WithSimd for Block<'_> {
    type Output = ();
    #[inline(always)]
    fn with_simd<S: Simd>(mut self, simd: S) {
        let n = self.weight_rows.len() / self.k;
        let mut j = 0;
        while j + 4 <= n {
            self.rows::<S, 4>(simd, j);
            j += 4;
        }
        while j < n {
            self.rows::<S, 1>(simd, j);
            j += 1;
        }
    }
}

/// `y [m, n] = x [m, k] · weight [n, k]ᵀ` for `m`, `n` and `k` above 0 (as
/// [`takes_few_rows_path`] asks), blocks of weight rows in parallel.
pub(crate) fn forward(x: &[f32], weight: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    let per = n.div_ceil(4 * cpu::threads()).next_multiple_of(4);
    let mut yt = vec![0f32; n * m];
    let arch = pulp::Arch::new();
    yt.par_chunks_mut(per * m)
        .zip(weight.par_chunks(per * k))
        .for_each(|(out, weight_rows)| {
            arch.dispatch(Block {
                x,
                weight_rows,
                k,
                out,
            })
        });
    let mut y = vec![0f32; m * n];
    for (j, col) in yt.chunks_exact(m).enumerate() {
        for (i, &v) in col.iter().enumerate() {
            y[i * n + j] = v;
        }
    }
    y
}
