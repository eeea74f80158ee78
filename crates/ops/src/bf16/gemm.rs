//! The bfloat16 GEMM: `dst (m×n) = [dst +] a (m×k) · b (k×n)` with bfloat16 products and
//! float32 sums, as PyTorch's CPU autocast computes a bfloat16 matmul or convolution
//! (oneDNN accumulates in float32). Operands are float32 (rounded to bfloat16 as they
//! are packed: the same values a cast node would give) or bfloat16 bits, each with its
//! own (row, column) strides; the destination is float32 with any strides.
//!
//! Both operands are packed once ([`super::pack`]); tiles of the output (up to 256 rows
//! by up to 384 columns) are then spread over the threads, each walking depth blocks,
//! then right panels, then left panels, so that one right panel stays in L1 while the
//! left block streams from L2.

use rayon::prelude::*;

use super::microkernel::{has_avx512_bf16, tile, Bf16Path};
use super::pack::{pack_left, pack_right, KC, MR, NR};
use crate::cpu::{threads, SendPtr};

/// A GEMM operand's values: float32 (rounded as packed) or bfloat16 bits.
#[derive(Debug, Clone, Copy)]
pub enum Values<'a> {
    /// float32 values, rounded to the nearest bfloat16 (ties to even) as they are packed.
    F32(&'a [f32]),
    /// bfloat16 values, as their bits.
    Bf16(&'a [u16]),
}

/// A GEMM operand: values and the (row, column) strides of its element (r, c).
#[derive(Debug, Clone, Copy)]
pub struct Matrix<'a> {
    /// The elements.
    pub values: Values<'a>,
    /// Element (r, c) is `values[r * strides.0 + c * strides.1]`.
    pub strides: (usize, usize),
}

/// Left panels per output tile (256 rows).
const TILE_ROW_PANELS: usize = 32;
/// Right panels per output tile, at most (384 columns).
const TILE_COL_PANELS: usize = 8;

/// `dst = [dst +] a · b` for `a` `m × k` and `b` `k × n`, bfloat16 products summed in
/// float32, through `path`'s micro-kernel. `dst`'s element (i, j) is
/// `dst[i * dst_strides.0 + j * dst_strides.1]`.
///
/// # Panics
/// If an operand or the destination is too small for its shape and strides.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    path: Bf16Path,
    (m, n, k): (usize, usize, usize),
    (dst, dst_strides): (&mut [f32], (usize, usize)),
    accumulate: bool,
    a: &Matrix<'_>,
    b: &Matrix<'_>,
) {
    if m == 0 || n == 0 {
        return;
    }
    let (drs, dcs) = dst_strides;
    assert!(
        dst.len() > (m - 1) * drs + (n - 1) * dcs,
        "bf16 gemm: destination too small"
    );
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                for j in 0..n {
                    dst[i * drs + j * dcs] = 0.0;
                }
            }
        }
        return;
    }
    if path == Bf16Path::Widening || !has_avx512_bf16() {
        let (a, b) = (widened(a), widened(b));
        let (lhs, rhs) = ((&a.0[..], a.1), (&b.0[..], b.1));
        crate::cpu::gemm_strided(m, n, k, (dst, dst_strides), accumulate, lhs, rhs, true);
        return;
    }
    let (pa, pb) = (pack_left(a, m, k), pack_right(b, k, n));
    let grid = Grid::new(m, n, k);
    let out = SendPtr(dst.as_mut_ptr());
    let run = |t: usize| {
        let out = &out;
        let (rows, cols) = grid.tile(t);
        // SAFETY: tiles cover disjoint (row, column) ranges of an output whose every
        // addressed slot is in bounds (asserted above); distinct (i, j) pairs address
        // distinct slots for the strides a caller gives.
        unsafe { tile_product(&grid, (&pa, &pb), (rows, cols), (out.0, dst_strides), accumulate) }
    };
    if grid.parallel {
        (0..grid.tiles()).into_par_iter().for_each(run);
    } else {
        (0..grid.tiles()).for_each(run);
    }
}

/// How the output is cut into tiles for the threads.
struct Grid {
    m: usize,
    n: usize,
    /// Depth pairs, and the padded row and column counts of the packed operands.
    pairs: usize,
    m_pad: usize,
    n_pad: usize,
    row_panels: usize,
    col_panels: usize,
    parallel: bool,
}

impl Grid {
    fn new(m: usize, n: usize, k: usize) -> Self {
        let threads = threads();
        let (m_panels, n_panels) = (m.div_ceil(MR), n.div_ceil(NR));
        let parallel = threads > 1 && m * n * k >= 1 << 20;
        // Enough tiles for every thread to take two when the columns alone give too few.
        let col_panels = TILE_COL_PANELS.min(n_panels.div_ceil(2 * threads).max(1));
        let col_tiles = n_panels.div_ceil(col_panels);
        let row_panels = if col_tiles >= 2 * threads {
            TILE_ROW_PANELS
        } else {
            TILE_ROW_PANELS.min(m_panels.div_ceil(2 * threads).max(1))
        };
        Grid {
            m,
            n,
            pairs: k.div_ceil(2),
            m_pad: m_panels * MR,
            n_pad: n_panels * NR,
            row_panels,
            col_panels,
            parallel,
        }
    }

    fn row_tiles(&self) -> usize {
        (self.m_pad / MR).div_ceil(self.row_panels)
    }

    fn tiles(&self) -> usize {
        self.row_tiles() * (self.n_pad / NR).div_ceil(self.col_panels)
    }

    /// Tile `t`'s padded row and column ranges.
    fn tile(&self, t: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let (r, c) = (t % self.row_tiles(), t / self.row_tiles());
        let rows = r * self.row_panels * MR..((r + 1) * self.row_panels * MR).min(self.m_pad);
        let cols = c * self.col_panels * NR..((c + 1) * self.col_panels * NR).min(self.n_pad);
        (rows, cols)
    }
}

/// One output tile: every depth block's micro-kernel tiles, written or added into `dst`.
///
/// # Safety
/// `dst` must be valid for reads and writes at `i * drs + j * dcs` for every real (i, j)
/// of the tile, and no other thread may touch those slots meanwhile.
unsafe fn tile_product(
    g: &Grid,
    (pa, pb): (&[u32], &[u32]),
    (rows, cols): (std::ops::Range<usize>, std::ops::Range<usize>),
    (dst, (drs, dcs)): (*mut f32, (usize, usize)),
    accumulate: bool,
) {
    for p0 in (0..g.pairs).step_by(KC) {
        let len = KC.min(g.pairs - p0);
        let add = accumulate || p0 > 0;
        for j0 in cols.clone().step_by(NR) {
            let b_panel = &pb[p0 * g.n_pad + j0 * len..][..len * NR];
            for i0 in rows.clone().step_by(MR) {
                let a_panel = &pa[p0 * g.m_pad + i0 * len..][..len * MR];
                let sums = tile(len, a_panel, b_panel);
                let (mr, nr) = (MR.min(g.m - i0.min(g.m)), NR.min(g.n - j0.min(g.n)));
                for (i, row) in sums.chunks_exact(NR).take(mr).enumerate() {
                    let base = (i0 + i) * drs + j0 * dcs;
                    if dcs == 1 {
                        // SAFETY: the row's nr slots from `base` are real elements of
                        // this tile, contiguous with a column stride of 1.
                        let out = unsafe { std::slice::from_raw_parts_mut(dst.add(base), nr) };
                        store_row(out, &row[..nr], add);
                        continue;
                    }
                    for (j, s) in row[..nr].iter().enumerate() {
                        // SAFETY: (i0 + i, j0 + j) is a real element of this tile.
                        let slot = unsafe { &mut *dst.add(base + j * dcs) };
                        *slot = if add { *slot + s } else { *s };
                    }
                }
            }
        }
    }
}

/// `out = [out +] sums`, one contiguous row of a tile.
#[inline(always)]
fn store_row(out: &mut [f32], sums: &[f32], add: bool) {
    if add {
        for (o, s) in out.iter_mut().zip(sums) {
            *o += s;
        }
    } else {
        out.copy_from_slice(sums);
    }
}

/// An operand's values as float32 bfloat16 values (f32 rounded, bf16 widened), with its
/// strides: the widening path's input to the float32 GEMM.
fn widened(a: &Matrix<'_>) -> (Vec<f32>, (usize, usize)) {
    let values = match a.values {
        Values::F32(d) => {
            let mut bits = vec![0u16; d.len()];
            super::convert::round_slice(d, &mut bits);
            bits
        }
        Values::Bf16(d) => d.to_vec(),
    };
    let mut out = vec![0f32; values.len()];
    super::convert::widen_slice(&values, &mut out);
    (out, a.strides)
}
