//! Depthwise convolution at stride 1 and dilation 1 (ConvNeXt's 7x7, MobileNet's 3x3):
//! each plane is first copied into a zero-padded scratch plane, so every tap reads inside
//! it, and each output row is built 16 values at a time in registers over all k² taps
//! before it is stored once; planes whose rows would leave blocks part-filled (MobileNet's
//! 14x14 and 7x7) are built 16 values at a time over the padded width, across rows. The
//! taps are summed in the same order as the general loops (row by row), so the forward
//! gives their values.

use rayon::prelude::*;

use super::epilogue::CpuEpilogue;
use super::params::Geom;
use crate::cpu::{self, Float, WideKernel};

/// Output values one register block holds.
const LANES: usize = 16;

/// Whether the padded-plane kernels run `g`: stride 1, dilation 1, and padding of at most
/// the kernel's size - 1 (so the input gradient's padding is not negative).
pub(super) fn applies(g: &Geom) -> bool {
    g.p.stride == [1, 1]
        && g.p.dilation == [1, 1]
        && g.oh * g.ow * g.h * g.w > 0
        && g.p.padding[0] < g.kh
        && g.p.padding[1] < g.kw
}

/// `plane` (`rows x cols`) inside a zero border of `top`/`left` rows/columns, in `buf`
/// made a plane of `prows x pcols` (reused across planes: no allocation per plane).
fn pad_into<'b, T: Float>(
    buf: &'b mut Vec<T>,
    plane: &[T],
    (rows, cols): (usize, usize),
    (top, left): (usize, usize),
    (prows, pcols): (usize, usize),
) -> &'b [T] {
    buf.clear();
    buf.resize(prows * pcols, T::ZERO);
    for (r, row) in plane.chunks_exact(cols).take(rows).enumerate() {
        buf[(r + top) * pcols + left..][..cols].copy_from_slice(row);
    }
    buf
}

/// Input plane `plane` of `xs` inside the convolution's zero padding (in `buf`), and the
/// padded plane's width.
fn padded_input<'b, T: Float>(
    g: &Geom,
    buf: &'b mut Vec<T>,
    xs: &[T],
    plane: usize,
) -> (&'b [T], usize) {
    let [ph, pw] = g.p.padding;
    let (hw, pcols) = (g.h * g.w, g.w + 2 * pw);
    let shape = (g.h + 2 * ph, pcols);
    let x = &xs[plane * hw..][..hw];
    (pad_into(buf, x, (g.h, g.w), (ph, pw), shape), pcols)
}

/// `out [rows x cols] = padded ⋆ taps` (correlation, `kh x kw` taps, row-major; the
/// padded plane is `rows + kh - 1` rows of `pcols = cols + kw - 1`). `flat`: the scratch
/// of [`correlate_flat`], for planes that [`runs_flat`] gives to it.
struct Correlate<'a, T> {
    padded: &'a [T],
    pcols: usize,
    taps: &'a [T],
    k: (usize, usize),
    out: &'a mut [T],
    cols: usize,
    flat: Option<&'a mut Vec<T>>,
}

impl<T: Float> WideKernel for Correlate<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(mut self) {
        if let Some(scratch) = self.flat.take() {
            return correlate_flat(self, scratch);
        }
        let (padded, pcols, taps, k) = (self.padded, self.pcols, self.taps, self.k);
        for (oy, orow) in self.out.chunks_exact_mut(self.cols).enumerate() {
            correlate_run(padded, pcols, taps, k, oy, orow);
        }
    }
}

/// `out`: the outputs of row `oy` from column 0 (or, over the padded width, a run that
/// spans rows), in register blocks of 16, then of 8 and 4 (narrow planes: 8x8, 4x4), the
/// rest one at a time.
#[inline(always)]
fn correlate_run<T: Float>(
    padded: &[T],
    pcols: usize,
    taps: &[T],
    k: (usize, usize),
    oy: usize,
    out: &mut [T],
) {
    let mut ox = 0;
    while ox + LANES <= out.len() {
        correlate_block::<T, LANES>(padded, pcols, taps, k, (oy, ox), &mut out[ox..]);
        ox += LANES;
    }
    while ox + LANES / 2 <= out.len() {
        correlate_block::<T, { LANES / 2 }>(padded, pcols, taps, k, (oy, ox), &mut out[ox..]);
        ox += LANES / 2;
    }
    while ox + LANES / 4 <= out.len() {
        correlate_block::<T, { LANES / 4 }>(padded, pcols, taps, k, (oy, ox), &mut out[ox..]);
        ox += LANES / 4;
    }
    while ox < out.len() {
        correlate_block::<T, 1>(padded, pcols, taps, k, (oy, ox), &mut out[ox..]);
        ox += 1;
    }
}

/// Register blocks of 16, 8, 4 and 1 outputs that cover `len` outputs.
fn blocks(len: usize) -> usize {
    len / LANES + len % LANES / (LANES / 2) + len % (LANES / 2) / (LANES / 4) + len % (LANES / 4)
}

/// The outputs over the padded width (rows `pcols` apart) that cover `rows` rows of `cols`.
fn flat_span(rows: usize, cols: usize, pcols: usize) -> usize {
    (rows - 1) * pcols + cols
}

/// Whether [`correlate_flat`] runs an output of `len` values in rows of `cols` (padded
/// rows of `pcols`): for rows narrower than a register block, when its blocks and its copy
/// of each row cost less than the rows' own blocks (7x7 and 14x14 planes; 8x8 and 4x4
/// rows fill their blocks, and the copies would cost more than they save).
fn runs_flat(len: usize, cols: usize, pcols: usize) -> bool {
    let rows = len / cols.max(1);
    cols < LANES && rows > 0 && blocks(flat_span(rows, cols, pcols)) + rows < rows * blocks(cols)
}

/// [`Correlate`] of a plane narrower than a register block (MobileNet's 7x7 and 14x14):
/// the outputs over the padded width, `j = oy * pcols + ox`, are one run
/// `Σ_taps padded[j + ky * pcols + kx] · w`, so each block of 16 spans rows (the columns
/// past `cols` are computed and dropped). The same sums in the same order as row blocks.
#[inline(always)]
fn correlate_flat<T: Float>(c: Correlate<'_, T>, scratch: &mut Vec<T>) {
    let (padded, pcols, taps, k) = (c.padded, c.pcols, c.taps, c.k);
    let rows = c.out.len() / c.cols;
    // The last output read stays inside the padded plane: span - 1 + (kh - 1) * pcols +
    // kw - 1 is its last element.
    let span = flat_span(rows, c.cols, pcols);
    // Every element is written below: grow the scratch, never clear it.
    if scratch.len() < span {
        scratch.resize(span, T::ZERO);
    }
    let flat = &mut scratch[..span];
    correlate_run(padded, pcols, taps, k, 0, flat);
    for (oy, orow) in c.out.chunks_exact_mut(c.cols).enumerate() {
        orow.copy_from_slice(&flat[oy * pcols..][..c.cols]);
    }
}

/// `out[..L]`: the `L` outputs of row `oy` from column `ox`, summed over the taps in order.
#[inline(always)]
fn correlate_block<T: Float, const L: usize>(
    padded: &[T],
    pcols: usize,
    taps: &[T],
    (kh, kw): (usize, usize),
    (oy, ox): (usize, usize),
    out: &mut [T],
) {
    let mut acc = [T::ZERO; L];
    for ky in 0..kh {
        let row = &padded[(oy + ky) * pcols + ox..];
        for kx in 0..kw {
            let (wt, src) = (taps[ky * kw + kx], &row[kx..kx + L]);
            for l in 0..L {
                acc[l] += src[l] * wt;
            }
        }
    }
    out[..L].copy_from_slice(&acc);
}

/// Forward: `out[n, c] = x[n, c] ⋆ w[c]`, then the epilogue, one plane per task.
pub(super) fn forward<T: Float>(g: &Geom, xs: &[T], ws: &[T], epi: &CpuEpilogue<'_, T>) -> Vec<T> {
    let mut out = vec![T::ZERO; g.n * g.c_out * g.pixels()];
    let (p, taps) = (g.pixels(), g.kh * g.kw);
    let by_flat = runs_flat(p, g.ow, g.w + 2 * g.p.padding[1]);
    out.par_chunks_mut(p)
        .enumerate()
        .for_each_init(Default::default, |(buf, flat), (plane, o)| {
            let (n, c) = (plane / g.c_in, plane % g.c_in);
            let (xp, pcols) = padded_input(g, buf, xs, plane);
            let w = &ws[c * taps..][..taps];
            cpu::run_wide(Correlate {
                padded: xp,
                pcols,
                taps: w,
                k: (g.kh, g.kw),
                out: o,
                cols: g.ow,
                flat: by_flat.then_some(flat),
            });
            if !epi.is_empty() {
                epi.apply_row(g, n, c, 0, o);
            }
        });
    out
}

/// Input gradient: the output gradient, padded by `k - 1 - padding`, correlated with the
/// flipped filter.
pub(super) fn backward_data<T: Float>(g: &Geom, gs: &[T], ws: &[T]) -> Vec<T> {
    let (hw, p, taps) = (g.h * g.w, g.pixels(), g.kh * g.kw);
    let (top, left) = (g.kh - 1 - g.p.padding[0], g.kw - 1 - g.p.padding[1]);
    let (prows, pcols) = (g.h + g.kh - 1, g.w + g.kw - 1);
    let by_flat = runs_flat(hw, g.w, pcols);
    // Every channel's filter reversed once, not once per plane.
    let flipped: Vec<T> = ws
        .chunks_exact(taps)
        .flat_map(|w| w.iter().rev().copied())
        .collect();
    let mut dx = vec![T::ZERO; g.n * g.c_in * hw];
    dx.par_chunks_mut(hw)
        .enumerate()
        .for_each_init(Default::default, |(buf, flat), (plane, d)| {
            let c = plane % g.c_in;
            let gp = pad_into(
                buf,
                &gs[plane * p..][..p],
                (g.oh, g.ow),
                (top, left),
                (prows, pcols),
            );
            cpu::run_wide(Correlate {
                padded: gp,
                pcols,
                taps: &flipped[c * taps..][..taps],
                k: (g.kh, g.kw),
                out: d,
                cols: g.w,
                flat: by_flat.then_some(flat),
            });
        });
    dx
}

/// One channel's weight gradient from one image: `dw[tap] += Σ gy · x at the tap`, each
/// tap's sum in lanes ([`tap_sum`]), then added in f64.
struct FilterTaps<'a, T> {
    padded: &'a [T],
    pcols: usize,
    gy: &'a [T],
    ow: usize,
    k: (usize, usize),
    acc: &'a mut [f64],
}

impl<T: Float> WideKernel for FilterTaps<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let (kh, kw) = self.k;
        for ky in 0..kh {
            for kx in 0..kw {
                let at = (ky, kx);
                self.acc[ky * kw + kx] += match self.ow {
                    16.. => tap_sum::<T, LANES>(self.padded, self.pcols, self.gy, self.ow, at),
                    8.. => {
                        tap_sum::<T, { LANES / 2 }>(self.padded, self.pcols, self.gy, self.ow, at)
                    }
                    4.. => {
                        tap_sum::<T, { LANES / 4 }>(self.padded, self.pcols, self.gy, self.ow, at)
                    }
                    _ => tap_sum::<T, 1>(self.padded, self.pcols, self.gy, self.ow, at),
                };
            }
        }
    }
}

/// `Σ gy · x at tap (ky, kx)` over one plane, in f64: each row in blocks of `L` values, a
/// wide row's rest (`L` = 16) in at most one block of 8 and one of 4, each block size
/// summing into lanes of its own (a 28-wide row is 16 + 8 + 4), the last values one by
/// one.
#[inline(always)]
fn tap_sum<T: Float, const L: usize>(
    padded: &[T],
    pcols: usize,
    gy: &[T],
    ow: usize,
    (ky, kx): (usize, usize),
) -> f64 {
    let full = ow - ow % L;
    let (by_8, by_4) = if L == LANES {
        let by_8 = full + (ow - full) / 8 * 8;
        (by_8, by_8 + (ow - by_8) / 4 * 4)
    } else {
        (full, full)
    };
    let (mut lanes, mut l8, mut l4) = ([T::ZERO; L], [T::ZERO; 8], [T::ZERO; 4]);
    let mut tail = T::ZERO;
    for (oy, grow) in gy.chunks_exact(ow).enumerate() {
        let row = &padded[(oy + ky) * pcols + kx..][..ow];
        multiply_add(&mut lanes, &grow[..full], &row[..full]);
        if L == LANES {
            multiply_add(&mut l8, &grow[full..by_8], &row[full..by_8]);
            multiply_add(&mut l4, &grow[by_8..by_4], &row[by_8..by_4]);
        }
        for (g, x) in grow[by_4..].iter().zip(&row[by_4..]) {
            tail += *g * *x;
        }
    }
    let mut sum = lanes.iter().fold(tail.to_f64(), |s, v| s + v.to_f64());
    if by_8 > full {
        sum = l8.iter().fold(sum, |s, v| s + v.to_f64());
    }
    if by_4 > by_8 {
        sum = l4.iter().fold(sum, |s, v| s + v.to_f64());
    }
    sum
}

/// `lanes[l] += g[i] · x[i]` for every `i ≡ l` (mod `L`); `g` and `x` are whole blocks.
#[inline(always)]
fn multiply_add<T: Float, const L: usize>(lanes: &mut [T; L], g: &[T], x: &[T]) {
    for (gl, xl) in g.chunks_exact(L).zip(x.chunks_exact(L)) {
        for l in 0..L {
            lanes[l] += gl[l] * xl[l];
        }
    }
}

/// Weight gradient: `dw[c, tap] = Σ_n Σ_pixels gy[n, c] · x[n, c] at the tap`, in f64.
pub(super) fn backward_filter<T: Float>(g: &Geom, gs: &[T], xs: &[T]) -> Vec<T> {
    let (p, taps) = (g.pixels(), g.kh * g.kw);
    let mut dw = vec![T::ZERO; g.c_out * taps];
    dw.par_chunks_mut(taps).enumerate().for_each(|(c, dwc)| {
        let (mut acc, mut buf) = (vec![0f64; taps], Vec::new());
        for n in 0..g.n {
            let plane = n * g.c_in + c;
            let (xp, pcols) = padded_input(g, &mut buf, xs, plane);
            let gy = &gs[plane * p..][..p];
            cpu::run_wide(FilterTaps {
                padded: xp,
                pcols,
                gy,
                ow: g.ow,
                k: (g.kh, g.kw),
                acc: &mut acc,
            });
        }
        for (d, a) in dwc.iter_mut().zip(acc) {
            *d = T::from_f64(a);
        }
    });
    dw
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `runs_flat` for a `side x side` plane under a `k x k` filter with `k / 2` padding.
    fn flat(side: usize, k: usize) -> bool {
        runs_flat(side * side, side, side + k - 1)
    }

    #[test]
    fn narrow_planes_run_flat_where_it_takes_fewer_blocks() {
        assert_eq!(blocks(7), 4);
        assert_eq!(blocks(61), 3 + 1 + 1 + 1);
        // 7x7 and 14x14 rows end in single outputs: flat.
        assert!(flat(7, 3) && flat(14, 3) && flat(7, 5));
        // 4x4 and 8x8 rows fill their blocks; a row of 16 or more has its own blocks.
        assert!(!flat(4, 3) && !flat(4, 5) && !flat(8, 3) && !flat(8, 5));
        assert!(!flat(16, 3) && !flat(56, 3) && !flat(1, 3));
    }
}
