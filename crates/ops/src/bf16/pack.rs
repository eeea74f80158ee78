//! The packed operands of the bfloat16 GEMM. The product's depth `k` is taken in pairs
//! (AVX512-BF16's `vdpbf16ps` multiplies and adds two bfloat16 pairs per 32-bit lane), so
//! each packed element is a `u32` holding one operand value at an even depth in its low
//! half and the next depth's in its high half. Depth is cut into blocks of [`Kernel::kc`]
//! pairs; within a block, the left operand is stored as panels of [`Kernel::mr`] rows and
//! the right as panels of [`Kernel::nr`] columns, each panel pair after pair (AMX's left
//! panels tile by tile), so that the micro-kernel reads both with unit stride. Rows and
//! columns past the matrix's edge, and the odd depth's missing partner, are zeros. The
//! buffers start on a cache line ([`Panels`]), and so does every tile row in them.

use rayon::prelude::*;

use super::convert::round_to_bf16;
use super::operand::{Matrix, Values};
use super::panels::Panels;

/// Rows of the left operand per panel (and of the micro-kernel's tile) for `vdpbf16ps`.
pub(crate) const MR: usize = 6;
/// Rows of the left operand per panel for AMX: two tiles of 16 rows.
pub(crate) const AMX_MR: usize = 32;
/// Depth pairs per AMX tile row (64 bytes): AMX packings pad each depth block to a
/// multiple of it with zero pairs.
pub(crate) const AMX_PAIRS: usize = 16;
/// Columns of the right operand per panel for `vdpbf16ps`: four 16-lane vectors (channel
/// counts are multiples of 64, so panels rarely carry padding).
pub(crate) const NR: usize = 64;
/// Columns of the right operand per panel for AMX: two tiles of 16 columns.
pub(crate) const AMX_NR: usize = 32;
/// Depth pairs per block for `vdpbf16ps`: a right panel of `KC` pairs is 32 KiB, which
/// stays in L1 (32 KiB on Zen 4, 48 on Zen 5) and L2's nearest lines while every left
/// panel streams past it (96 and 128 pairs measured alike; `cargo bench --bench
/// bf16_gemm`).
pub(crate) const KC: usize = 128;
/// Depth pairs per block for AMX: the accumulator tiles are loaded and stored once a
/// block, so long blocks pay off (512 pairs against 128: 1.5x on ResNet-18's 256-channel
/// products; `cargo bench --bench bf16_gemm`).
pub(crate) const AMX_KC: usize = 512;

/// The native micro-kernel a packing is laid out for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kernel {
    /// AVX512-BF16's `vdpbf16ps`: left panels of [`MR`] rows stored pair after pair
    /// (`panel[q * MR + i]`: each row's pair is broadcast in turn).
    Avx512,
    /// AMX's `tdpbf16ps`: left panels of [`AMX_MR`] rows stored tile by tile (each run
    /// of [`AMX_PAIRS`] pairs is a block of the panel's rows, row after row: a tile row
    /// is 16 consecutive pairs of one row), right panels of [`AMX_NR`] columns, depth
    /// padded to a multiple of [`AMX_PAIRS`] pairs.
    Amx,
}

impl Kernel {
    /// Rows per left panel.
    pub(crate) const fn mr(self) -> usize {
        match self {
            Kernel::Avx512 => MR,
            Kernel::Amx => AMX_MR,
        }
    }

    /// Columns per right panel.
    pub(crate) const fn nr(self) -> usize {
        match self {
            Kernel::Avx512 => NR,
            Kernel::Amx => AMX_NR,
        }
    }

    /// Depth pairs per block.
    pub(crate) const fn kc(self) -> usize {
        match self {
            Kernel::Avx512 => KC,
            Kernel::Amx => AMX_KC,
        }
    }

    /// The packed depth pairs of a product of depth `depth` (zero pairs pad it).
    pub(crate) const fn pairs(self, depth: usize) -> usize {
        let pairs = depth.div_ceil(2);
        match self {
            Kernel::Avx512 => pairs,
            Kernel::Amx => pairs.div_ceil(AMX_PAIRS) * AMX_PAIRS,
        }
    }
}

/// A value that packs as a bfloat16: float32 (rounded) or bfloat16 bits (copied).
trait PackValue: Copy + Send + Sync {
    fn bits(self) -> u16;
}

impl PackValue for f32 {
    #[inline(always)]
    fn bits(self) -> u16 {
        round_to_bf16(self)
    }
}

impl PackValue for u16 {
    #[inline(always)]
    fn bits(self) -> u16 {
        self
    }
}

/// A matrix's geometry as the packers read it: element (r, c) at `r * rs + c * cs`.
#[derive(Clone, Copy)]
struct View {
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
    /// Packed depth pairs: `cols.div_ceil(2)` or more (zero pairs past the depth).
    pairs: usize,
    /// Whether a panel holds tiles (AMX's left panels) instead of pair after pair.
    tiled: bool,
    /// Depth pairs per block.
    kc: usize,
}

impl View {
    /// Where row `i`'s pair `q` of a panel of `lanes` rows goes: pair after pair
    /// (`q * lanes + i`), or for AMX tile after tile: each run of [`AMX_PAIRS`] pairs is
    /// a block of the panel's rows, row after row, so that one depth step's two left
    /// tiles are 2 KiB read in order.
    #[inline(always)]
    fn slot(&self, lanes: usize, i: usize, q: usize) -> usize {
        if self.tiled {
            (q / AMX_PAIRS) * lanes * AMX_PAIRS + i * AMX_PAIRS + q % AMX_PAIRS
        } else {
            q * lanes + i
        }
    }
}

/// Which operand a panel set holds: the left one (its rows are the panels' lanes, depth
/// runs along its columns) or the right one (read transposed: its columns are the lanes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Left,
    Right,
}

/// Packs the left operand (`lanes × depth`, panels of `kernel.mr()`) or the right one
/// (`depth × lanes`, panels of [`NR`]) for `kernel` into `out`'s first
/// `lanes.div_ceil(panel) * panel * kernel.pairs(depth)` elements (every one written).
pub(crate) fn pack_operand(
    x: &Matrix<'_>,
    (side, kernel): (Side, Kernel),
    (lanes, depth): (usize, usize),
    out: &mut Panels,
    parallel: bool,
) {
    let ((rs, cs), panel) = match side {
        Side::Left => (x.strides, kernel.mr()),
        Side::Right => ((x.strides.1, x.strides.0), kernel.nr()),
    };
    let v = View {
        rows: lanes,
        cols: depth,
        rs,
        cs,
        pairs: kernel.pairs(depth),
        tiled: side == Side::Left && kernel == Kernel::Amx,
        kc: kernel.kc(),
    };
    match x.values {
        Values::F32(d) => pack(d, v, panel, out, parallel),
        Values::Bf16(d) => pack(d, v, panel, out, parallel),
    }
}

/// Packs a right operand (`depth × lanes`) from its depth pairs, laid out as
/// [`pack_operand`] lays it out: `pair_row(q, row)` writes pair `q`'s `lanes` elements
/// (lane j: the even depth's bfloat16 bits low, the odd depth's high) into `row`. For a
/// producer that makes pairs directly (an im2col whose rows it rounds and zips in
/// registers), so no float32 matrix is written first. Depth blocks are filled in
/// parallel when `parallel`.
pub(crate) fn pack_right_from_pairs(
    kernel: Kernel,
    (lanes, depth): (usize, usize),
    pair_row: &(dyn Fn(usize, &mut [u32]) + Sync),
    out: &mut Panels,
    parallel: bool,
) {
    let (real_pairs, pairs) = (depth.div_ceil(2), kernel.pairs(depth));
    let (nr, kc) = (kernel.nr(), kernel.kc());
    let padded = lanes.div_ceil(nr) * nr;
    let blocks = out.prefix(pairs * padded);
    if pairs == 0 || lanes == 0 {
        return;
    }
    // Block b (depth pairs b * kc..) is one contiguous run: its panel of lanes r0.. starts
    // at r0 * len, and holds pair q's nr lanes at q * nr.
    let fill = |(b, block): (usize, &mut [u32])| {
        let len = block.len() / padded;
        // Lanes past `lanes` stay zero: `pair_row` sees only the real ones; pairs past
        // the depth are zero.
        let mut row = vec![0u32; padded];
        for q in 0..len {
            match b * kc + q {
                pair if pair < real_pairs => pair_row(pair, &mut row[..lanes]),
                _ => row.fill(0),
            }
            for r0 in (0..padded).step_by(nr) {
                block[r0 * len + q * nr..][..nr].copy_from_slice(&row[r0..r0 + nr]);
            }
        }
    };
    if parallel {
        blocks
            .par_chunks_mut(kc * padded)
            .enumerate()
            .for_each(fill);
    } else {
        blocks.chunks_mut(kc * padded).enumerate().for_each(fill);
    }
}

/// Packs the `rows × cols` matrix `v` of `data` into panels of `lanes` rows, depth (the
/// columns) in pairs, blocked by `v.kc` pairs: block `b`'s panel `p` starts at
/// `b * kc * padded_rows + p * block_pairs * lanes`. Panels are packed in parallel when
/// `parallel` and the matrix is large. `out` is reused from call to call (fresh buffers
/// would fault their pages in every time), so every element is written, padding included.
fn pack<T: PackValue>(data: &[T], v: View, lanes: usize, out: &mut Panels, parallel: bool) {
    let pairs = v.pairs;
    let padded = v.rows.div_ceil(lanes) * lanes;
    let mut rest = out.prefix(pairs * padded);
    if v.rows == 0 || pairs == 0 {
        return;
    }
    assert!(
        data.len() > (v.rows - 1) * v.rs + (v.cols - 1) * v.cs,
        "bf16 gemm: operand too small for its shape and strides"
    );
    // One task per (block, panel): each writes its own contiguous run of `out`.
    let mut tasks: Vec<(usize, usize, &mut [u32])> = Vec::new();
    for p0 in (0..pairs).step_by(v.kc) {
        let len = v.kc.min(pairs - p0);
        for r0 in (0..padded).step_by(lanes) {
            let (panel, tail) = rest.split_at_mut(len * lanes);
            rest = tail;
            tasks.push((p0, r0, panel));
        }
    }
    let fill = |(p0, r0, panel): (usize, usize, &mut [u32])| {
        crate::cpu::run_wide(FillPanel {
            data,
            v,
            lanes,
            at: (p0, r0),
            panel,
        })
    };
    if parallel && v.rows * v.cols >= 1 << 16 {
        tasks.into_par_iter().for_each(fill);
    } else {
        tasks.into_iter().for_each(fill);
    }
}

/// One panel's packing as a [`WideKernel`](crate::cpu::WideKernel): compiled inside the
/// wide wrapper, its rounding and zipping loops take 16 values a step with AVX-512 (as a
/// closure through `cpu::vectorized` it was too large to inline there and stayed 4-wide).
struct FillPanel<'a, T> {
    data: &'a [T],
    v: View,
    lanes: usize,
    at: (usize, usize),
    panel: &'a mut [u32],
}

impl<T: PackValue> crate::cpu::WideKernel for FillPanel<'_, T> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        fill_panel(self.data, self.v, self.lanes, self.at, self.panel)
    }
}

/// Writes one panel: rows `r0..r0 + lanes` of `v`, depth pairs `p0..` (as many as the
/// panel holds), row `r0 + i`'s pair `p0 + q` at `panel[q * lanes + i]` (or at
/// [`View::slot`] for AMX), zeros past the matrix's rows and depth.
#[inline(always)]
fn fill_panel<T: PackValue>(
    data: &[T],
    v: View,
    lanes: usize,
    (p0, r0): (usize, usize),
    panel: &mut [u32],
) {
    let len = panel.len() / lanes;
    let rows = lanes.min(v.rows - r0);
    // Pairs of this panel that hold depth; the rest pad it.
    let real = v.cols.div_ceil(2).saturating_sub(p0).min(len);
    zero_padding(v.tiled, (lanes, len), (rows, real), panel);
    let at = |r: usize, c: usize| -> u32 {
        if c < v.cols {
            // In bounds: checked against the data's length in `pack`.
            data[r * v.rs + c * v.cs].bits() as u32
        } else {
            0
        }
    };
    if v.cs == 1 {
        // Depth is contiguous along each row: round the row's run into a contiguous
        // bfloat16 run (one narrowing a vector), whose little-endian pairs are the packed
        // elements, then copy them out (contiguous in a row-major panel).
        let c0 = 2 * p0;
        let run = v.cols.saturating_sub(c0).min(2 * len);
        let mut halves = [0u16; 2 * AMX_KC + 1];
        for i in 0..rows {
            let row = &data[(r0 + i) * v.rs + c0..][..run];
            for (h, x) in halves.iter_mut().zip(row) {
                *h = x.bits();
            }
            halves[run] = 0;
            let used = &halves[..run.div_ceil(2) * 2];
            let zip = |pair: &[u16]| pair[0] as u32 | ((pair[1] as u32) << 16);
            if v.tiled {
                // A tile row's 16 pairs are contiguous.
                for (block, tile_row) in used.chunks(2 * AMX_PAIRS).enumerate() {
                    let to = &mut panel[v.slot(lanes, i, block * AMX_PAIRS)..];
                    for (o, pair) in to.iter_mut().zip(tile_row.chunks_exact(2)) {
                        *o = zip(pair);
                    }
                }
            } else {
                for (q, pair) in used.chunks_exact(2).enumerate() {
                    panel[q * lanes + i] = zip(pair);
                }
            }
        }
    } else if v.rs == 1 {
        fill_from_depth_runs(data, v, lanes, (p0, r0), (rows, real), panel);
    } else {
        // Any other strides: element by element.
        for q in 0..real {
            let c = 2 * (p0 + q);
            for i in 0..rows {
                panel[v.slot(lanes, i, q)] = at(r0 + i, c) | (at(r0 + i, c + 1) << 16);
            }
        }
    }
}

/// [`fill_panel`] for a matrix whose rows are contiguous at each depth (`v.rs == 1`):
/// each pair's two runs (its even and odd depth) zipped, into a pair-major panel's
/// contiguous run or across a tiled panel's rows.
#[inline(always)]
fn fill_from_depth_runs<T: PackValue>(
    data: &[T],
    v: View,
    lanes: usize,
    (p0, r0): (usize, usize),
    (rows, real): (usize, usize),
    panel: &mut [u32],
) {
    for q in 0..real {
        let c = 2 * (p0 + q);
        let even = &data[c * v.cs + r0..][..rows];
        let odd = (c + 1 < v.cols).then(|| &data[(c + 1) * v.cs + r0..][..rows]);
        if v.tiled {
            for i in 0..rows {
                let high = odd.map_or(0, |odd| odd[i].bits() as u32);
                panel[v.slot(lanes, i, q)] = even[i].bits() as u32 | (high << 16);
            }
            continue;
        }
        let out = &mut panel[q * lanes..q * lanes + rows];
        match odd {
            Some(odd) => {
                for ((o, e), d) in out.iter_mut().zip(even).zip(odd) {
                    *o = e.bits() as u32 | ((d.bits() as u32) << 16);
                }
            }
            None => {
                for (o, e) in out.iter_mut().zip(even) {
                    *o = e.bits() as u32;
                }
            }
        }
    }
}

/// Zeros a panel's padding (the buffer holds an earlier call's data): rows `rows..` and
/// pairs `real..` of a panel of `lanes` rows by `len` pairs.
fn zero_padding(
    tiled: bool,
    (lanes, len): (usize, usize),
    (rows, real): (usize, usize),
    panel: &mut [u32],
) {
    if tiled {
        // Block b's tile rows: row i's pairs `b * AMX_PAIRS..` of [`View::slot`].
        let blocks = panel[..lanes * len].chunks_exact_mut(lanes * AMX_PAIRS);
        for (b, block) in blocks.enumerate() {
            let real = real.saturating_sub(b * AMX_PAIRS).min(AMX_PAIRS);
            for (i, row) in block.chunks_exact_mut(AMX_PAIRS).enumerate() {
                row[if i < rows { real } else { 0 }..].fill(0);
            }
        }
    } else {
        for (q, pair) in panel.chunks_exact_mut(lanes).enumerate() {
            pair[if q < real { rows } else { 0 }..].fill(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element of a packing is written: a buffer holding another product's panels
    /// (here 0xdead_beef, a NaN pair, which zero padding must not leave behind) packs the
    /// same panels as a fresh one, on every layout and across depth blocks.
    #[test]
    fn a_reused_buffer_packs_what_a_fresh_one_does() {
        let data: Vec<f32> = (0..35 * 1090).map(|i| (i % 97) as f32 - 48.0).collect();
        for (rows, depth) in [(35, 1090), (7, 33), (64, 256)] {
            for kernel in [Kernel::Avx512, Kernel::Amx] {
                for side in [Side::Left, Side::Right] {
                    let m = match side {
                        Side::Left => Matrix::new(&data, (depth, 1)),
                        Side::Right => Matrix::new(&data, (1, depth)),
                    };
                    let mut fresh = Panels::default();
                    pack_operand(&m, (side, kernel), (rows, depth), &mut fresh, false);
                    let mut reused = Panels::default();
                    reused.prefix(fresh.len()).fill(0xdead_beef);
                    pack_operand(&m, (side, kernel), (rows, depth), &mut reused, false);
                    assert!(
                        fresh[..] == reused[..],
                        "{rows}x{depth} {kernel:?} {side:?}"
                    );
                }
            }
        }
    }
}
