//! The column matrices of im2col + GEMM convolution: im2col (input windows as columns)
//! and col2im (columns added back into input-shaped gradients), per image or over the
//! whole batch, and the layout copies of the whole-batch GEMMs. Every function writes
//! each destination slot once or accumulates into initialised memory; none zeroes first.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::params::Geom;
use crate::cpu::Float;
use crate::shape::{outputs_in_bounds, split_phases as split_row};

/// Sets `col` to the im2col matrix ([cin_g*kh*kw, oh*ow]) of one image's group `x`
/// ([cin_g, h, w]), reusing its allocation; every element is written once, none zeroed
/// first. `parallel` splits it across threads (for a batch of one, where the images are
/// not split across threads): one task per input channel, or per row when there are
/// fewer channels than threads (a 3-channel stem has 147 rows).
///
/// With a column stride above 1 and windows that read each input value at least twice
/// ([`phases_pay`]), each input row is first split into its stride phases
/// ([`split_phases`]), so that every im2col row segment is one contiguous copy instead of
/// a strided gather (the 7x7 stride-2 stem spent as long in a strided im2col as in its
/// GEMM).
pub(super) fn im2col<T: Float>(g: &Geom, x: &[T], col: &mut Vec<T>, parallel: bool) {
    let (p, kk) = (g.pixels(), g.kh * g.kw);
    let phased;
    let x = if phases_pay(g) {
        phased = split_phases(g, x, parallel);
        &phased[..]
    } else {
        x
    };
    let plane_len = g.h * source_row_len(g);
    let len = g.k() * p;
    col.clear();
    col.reserve(len);
    let slots = &mut col.spare_capacity_mut()[..len];
    if parallel && g.cin_g() < 2 * crate::cpu::threads() {
        slots.par_chunks_mut(p).enumerate().for_each(|(r, dst)| {
            let (c, kernel) = (r / kk, r % kk);
            let plane = &x[c * plane_len..(c + 1) * plane_len];
            im2col_row(g, plane, (kernel / g.kw, kernel % g.kw), dst);
        });
    } else {
        let fill = |(dst, plane): (&mut [MaybeUninit<T>], &[T])| im2col_plane(g, plane, dst);
        if parallel {
            slots
                .par_chunks_mut(kk * p)
                .zip(x.par_chunks(plane_len))
                .for_each(fill);
        } else {
            slots
                .chunks_mut(kk * p)
                .zip(x.chunks(plane_len))
                .for_each(fill);
        }
    }
    // SAFETY: `x` has cin_g planes, so each of the cin_g * kh * kw rows of `len` was
    // written whole by im2col_row (directly or through im2col_plane).
    unsafe { col.set_len(len) };
}

/// Whether [`im2col`] splits the input rows into their stride phases first: a column
/// stride above 1, windows that read each input value twice or more (kh*kw >= 2*sh*sw:
/// the split is one extra pass over the input, which a 1x1 stride-2 layer, reading every
/// value at most once and half the rows never, would not earn back), and rows of 16+
/// outputs (shorter rows leave too little to copy).
fn phases_pay(g: &Geom) -> bool {
    let [sh, sw] = g.p.stride;
    sw > 1 && g.kh * g.kw >= 2 * sh * sw && g.ow >= 16
}

/// Values per row of the planes [`im2col_row`] reads: `w`, or when [`phases_pay`], `s`
/// phases of `ceil(w / s)` values each ([`split_phases`]) for the column stride `s`.
fn source_row_len(g: &Geom) -> usize {
    let s = g.p.stride[1];
    if phases_pay(g) {
        s * g.w.div_ceil(s)
    } else {
        g.w
    }
}

/// `x` ([cin_g, h, w]) with each row split into its column-stride phases: value `j * s + r`
/// of a row at `r * ceil(w / s) + j` of its [`source_row_len`] slots (the unused tail
/// slots of the last phases are zeros, never read).
fn split_phases<T: Float>(g: &Geom, x: &[T], parallel: bool) -> Vec<T> {
    let (s, row_len) = (g.p.stride[1], source_row_len(g));
    let mut out = vec![T::ZERO; g.cin_g() * g.h * row_len];
    let split = |(dst, src): (&mut [T], &[T])| split_row(src, s, dst);
    let rows = g.cin_g() * g.h;
    if parallel {
        out.par_chunks_mut(row_len)
            .zip(x[..rows * g.w].par_chunks(g.w))
            .with_min_len(64)
            .for_each(split);
    } else {
        out.chunks_mut(row_len)
            .zip(x[..rows * g.w].chunks(g.w))
            .for_each(split);
    }
    out
}

/// Writes the kh*kw im2col rows of one input plane (as [`im2col_row`] reads it) into
/// `rows`, a matrix of oh*ow-long rows. Every slot is written (padding as zeros).
fn im2col_plane<T: Float>(g: &Geom, plane: &[T], rows: &mut [MaybeUninit<T>]) {
    let p = g.pixels();
    for ki in 0..g.kh {
        for kj in 0..g.kw {
            let dst = &mut rows[(ki * g.kw + kj) * p..][..p];
            im2col_row(g, plane, (ki, kj), dst);
        }
    }
}

/// Writes the im2col row of kernel offset `(ki, kj)` of one input plane into `dst`
/// (oh*ow slots, every one written; padding as zeros). The plane is `h` rows of
/// [`source_row_len`] values: plain rows, or when [`phases_pay`], rows split into phases
/// ([`split_phases`]), where a window column's values for consecutive outputs are
/// consecutive.
fn im2col_row<T: Float>(
    g: &Geom,
    plane: &[T],
    (ki, kj): (usize, usize),
    dst: &mut [MaybeUninit<T>],
) {
    let [sh, sw] = g.p.stride;
    let [ph, pw] = g.p.padding;
    let [dh, dw] = g.p.dilation;
    let (row_len, split) = (source_row_len(g), phases_pay(g));
    let zero = |s: &mut [MaybeUninit<T>]| s.iter_mut().for_each(|o| _ = o.write(T::ZERO));
    let (lo, hi) = valid_range(g, kj);
    for oy in 0..g.oh {
        let out_row = &mut dst[oy * g.ow..(oy + 1) * g.ow];
        let iy = (oy * sh + ki * dh) as isize - ph as isize;
        if iy < 0 || iy >= g.h as isize || lo >= hi {
            zero(out_row);
            continue;
        }
        let src = &plane[iy as usize * row_len..(iy as usize + 1) * row_len];
        zero(&mut out_row[..lo]);
        zero(&mut out_row[hi..]);
        let ix0 = lo * sw + kj * dw - pw;
        // outputs_in_bounds keeps the last window column inside the row; checked anyway,
        // since every slot of out_row[lo..hi] must be written.
        assert!(ix0 + (hi - lo - 1) * sw < g.w, "im2col window past its row");
        let out_row = &mut out_row[lo..hi];
        if sw == 1 {
            for (o, v) in out_row.iter_mut().zip(&src[ix0..ix0 + (hi - lo)]) {
                o.write(*v);
            }
        } else if split {
            // Split rows: columns ix0 + t * sw are phase ix0 % sw, from ix0 / sw on.
            let phase = &src[(ix0 % sw) * (row_len / sw)..][..row_len / sw];
            for (o, v) in out_row.iter_mut().zip(&phase[ix0 / sw..][..hi - lo]) {
                o.write(*v);
            }
        } else {
            for (o, v) in out_row.iter_mut().zip(src[ix0..].iter().step_by(sw)) {
                o.write(*v);
            }
        }
    }
}

/// Writes one image's group `x` ([cin_g, h, w]) as the pixel-major im2col matrix
/// ("im2row", [oh*ow, cin_g*kh*kw]): row `r` of `rows` is output pixel `r`'s window, in
/// the weight's (channel, ki, kj) order, padding as zeros; every slot written once. The
/// weight gradient's GEMM reads it untransposed, which the `gemm` crate runs up to 1.6x
/// faster than the transposed im2col matrix. The input is first copied into zero-padded
/// planes (`padded`, reused), so that every window value is one unchecked-offset read.
fn im2row<T: Float>(g: &Geom, x: &[T], padded: &mut Vec<T>, rows: &mut [MaybeUninit<T>]) {
    let (k, kk, hw) = (g.k(), g.kh * g.kw, g.h * g.w);
    let [sh, sw] = g.p.stride;
    let [dh, dw] = g.p.dilation;
    let (hp, wp) = padded_size(g);
    padded.clear();
    padded.resize(g.cin_g() * hp * wp, T::ZERO);
    for (dst, src) in padded.chunks_mut(hp * wp).zip(x.chunks(hw)) {
        pad_plane(g, src, dst);
    }
    // Each window position's offset from its window's top-left corner.
    let offsets: Vec<usize> = (0..kk)
        .map(|t| (t / g.kw) * dh * wp + (t % g.kw) * dw)
        .collect();
    for (pix, dst) in rows[..g.pixels() * k].chunks_mut(k).enumerate() {
        let corner = (pix / g.ow) * sh * wp + (pix % g.ow) * sw;
        for (window, plane) in dst.chunks_mut(kk).zip(padded.chunks(hp * wp)) {
            let plane = &plane[corner..];
            if let (Ok(window), Ok(offsets)) = (
                <&mut [MaybeUninit<T>; 9]>::try_from(&mut *window),
                <&[usize; 9]>::try_from(&offsets[..]),
            ) {
                // 3x3 windows, unrolled.
                for (d, &o) in window.iter_mut().zip(offsets) {
                    d.write(plane[o]);
                }
            } else {
                for (d, &o) in window.iter_mut().zip(&offsets) {
                    d.write(plane[o]);
                }
            }
        }
    }
}

/// The height and width of a plane with the convolution's zero padding around it.
fn padded_size(g: &Geom) -> (usize, usize) {
    (g.h + 2 * g.p.padding[0], g.w + 2 * g.p.padding[1])
}

/// Copies `plane` ([h, w]) into the interior of `dst` ([`padded_size`], its border
/// already zero).
fn pad_plane<T: Float>(g: &Geom, plane: &[T], dst: &mut [T]) {
    let [ph, pw] = g.p.padding;
    let wp = padded_size(g).1;
    for (y, row) in plane.chunks(g.w).enumerate() {
        dst[(y + ph) * wp + pw..][..g.w].copy_from_slice(row);
    }
}

/// The pixel-major im2col matrix ([`im2row`]) of group `grp` for every image:
/// [n * pixels, k], one task per image.
pub(super) fn batch_rows<T: Float>(g: &Geom, xs: &[T], grp: usize) -> Vec<T> {
    let (k, p) = (g.k(), g.pixels());
    let in_group = g.cin_g() * g.h * g.w;
    let len = g.n * p * k;
    let mut rows: Vec<T> = Vec::with_capacity(len);
    rows.spare_capacity_mut()[..len]
        .par_chunks_mut(p * k)
        .enumerate()
        .for_each_init(Vec::new, |padded, (n, dst)| {
            im2row(
                g,
                &xs[(n * g.groups + grp) * in_group..][..in_group],
                padded,
                dst,
            )
        });
    // SAFETY: each image's p * k slots were written whole by im2row.
    unsafe { rows.set_len(len) };
    rows
}

/// Adds the columns of `col` back into one image's group `dx` ([cin_g, h, w]); `parallel`
/// splits it across threads, one task per input plane (planes are disjoint in dx).
pub(super) fn col2im<T: Float>(g: &Geom, col: &[T], dx: &mut [T], parallel: bool) {
    let (hw, rows) = (g.h * g.w, g.kh * g.kw * g.pixels());
    let add = |(plane, src): (&mut [T], &[T])| col2im_plane(g, src, plane, g.pixels(), 0);
    if parallel {
        dx.par_chunks_mut(hw)
            .zip(col.par_chunks(rows))
            .for_each(add);
    } else {
        dx.chunks_mut(hw).zip(col.chunks(rows)).for_each(add);
    }
}

/// Adds the kh*kw im2col rows of one plane, columns `offset..offset + oh*ow` of `rows` (a
/// matrix whose rows are `row_stride` long), back into that plane `dx` ([h, w]).
pub(super) fn col2im_plane<T: Float>(
    g: &Geom,
    rows: &[T],
    dx: &mut [T],
    row_stride: usize,
    offset: usize,
) {
    let p = g.pixels();
    let [sh, sw] = g.p.stride;
    let [ph, pw] = g.p.padding;
    let [dh, dw] = g.p.dilation;
    for ki in 0..g.kh {
        for kj in 0..g.kw {
            let src = &rows[(ki * g.kw + kj) * row_stride + offset..][..p];
            let (lo, hi) = valid_range(g, kj);
            if lo >= hi {
                continue;
            }
            for oy in 0..g.oh {
                let iy = (oy * sh + ki * dh) as isize - ph as isize;
                if iy < 0 || iy >= g.h as isize {
                    continue;
                }
                let dst = &mut dx[iy as usize * g.w..(iy as usize + 1) * g.w];
                let ix0 = lo * sw + kj * dw - pw;
                let s = &src[oy * g.ow + lo..oy * g.ow + hi];
                if sw == 1 {
                    for (d, v) in dst[ix0..ix0 + (hi - lo)].iter_mut().zip(s) {
                        *d += *v;
                    }
                } else {
                    for (d, v) in dst[ix0..].iter_mut().step_by(sw).zip(s) {
                        *d += *v;
                    }
                }
            }
        }
    }
}

/// Adds one image's window values back into its group `dx` ([cin_g, h, w]), from a
/// pixel-major matrix `cols` ([oh*ow, cin_g*kh*kw]: each output pixel's window contiguous).
pub(super) fn col2im_pixels<T: Float>(g: &Geom, cols: &[T], dx: &mut [T]) {
    let (k, hw) = (g.k(), g.h * g.w);
    let [sh, sw] = g.p.stride;
    let [ph, pw] = g.p.padding;
    let [dh, dw] = g.p.dilation;
    for (pix, window) in cols.chunks(k).enumerate() {
        let (oy, ox) = (pix / g.ow, pix % g.ow);
        for ki in 0..g.kh {
            let iy = (oy * sh + ki * dh) as isize - ph as isize;
            if iy < 0 || iy >= g.h as isize {
                continue;
            }
            for kj in 0..g.kw {
                let ix = (ox * sw + kj * dw) as isize - pw as isize;
                if ix < 0 || ix >= g.w as isize {
                    continue;
                }
                let at = iy as usize * g.w + ix as usize;
                let first = ki * g.kw + kj;
                for (c, v) in window[first..].iter().step_by(g.kh * g.kw).enumerate() {
                    dx[c * hw + at] += *v;
                }
            }
        }
    }
}

/// The output columns `(lo, hi)` whose input column for kernel column `kj` lies inside
/// the row ([`outputs_in_bounds`]).
fn valid_range(g: &Geom, kj: usize) -> (usize, usize) {
    let r = outputs_in_bounds(
        g.ow,
        g.p.stride[1],
        kj * g.p.dilation[1],
        g.p.padding[1],
        g.w,
    );
    (r.start, r.end)
}

// Whole-batch GEMMs (small images): columns n*P + p over every image.

/// The im2col matrix of group `grp` for every image: [k, n * pixels], filled in parallel
/// (one task per input channel, each writing its own kh*kw rows once). Each plane is first
/// copied into a zero-padded one, so that every output row is an unchecked strided copy
/// (the small planes of whole-batch layers make per-row bounds work the larger cost); a
/// pointwise convolution's planes are the matrix's rows as they are.
pub(super) fn batch_columns<T: Float>(g: &Geom, xs: &[T], grp: usize) -> Vec<T> {
    if g.is_pointwise() {
        return planes_side_by_side(xs, (g.n, g.c_in, g.pixels()), g.cin_g(), grp);
    }
    let (k, p, hw) = (g.k(), g.pixels(), g.h * g.w);
    let np = g.n * p;
    let [sh, sw] = g.p.stride;
    let [dh, dw] = g.p.dilation;
    let (hp, wp) = padded_size(g);
    let mut col: Vec<T> = Vec::with_capacity(k * np);
    col.spare_capacity_mut()[..k * np]
        .par_chunks_mut(g.kh * g.kw * np)
        .enumerate()
        .for_each_init(
            || vec![T::ZERO; hp * wp],
            |padded, (c, rows)| {
                let ch = grp * g.cin_g() + c;
                for n in 0..g.n {
                    pad_plane(g, &xs[(n * g.c_in + ch) * hw..][..hw], padded);
                    for (t, row) in rows.chunks_mut(np).enumerate() {
                        let corner = (t / g.kw) * dh * wp + (t % g.kw) * dw;
                        let dst = &mut row[n * p..][..p];
                        for (oy, out) in dst.chunks_mut(g.ow).enumerate() {
                            let src = &padded[corner + oy * sh * wp..];
                            for (o, v) in out.iter_mut().zip(src.iter().step_by(sw)) {
                                o.write(*v);
                            }
                        }
                    }
                }
            },
        );
    // SAFETY: cin_g blocks of kh*kw rows, each of whose n column ranges of p slots was
    // written whole (oh rows of ow values; the padded plane holds every window).
    unsafe { col.set_len(k * np) };
    col
}

/// Output-shaped data [n, c_out, pixels] of group `grp` as a matrix [cout_g, n * pixels].
pub(super) fn gather_outputs<T: Float>(g: &Geom, ys: &[T], grp: usize) -> Vec<T> {
    planes_side_by_side(ys, (g.n, g.c_out, g.pixels()), g.cout_g(), grp)
}

/// Group `grp` (of `per_group` channels) of `data` ([n, channels, plane]) as a matrix
/// [per_group, n * plane]: each row one channel's planes of every image side by side,
/// one contiguous copy each, one task per row.
fn planes_side_by_side<T: Float>(
    data: &[T],
    (n, channels, plane): (usize, usize, usize),
    per_group: usize,
    grp: usize,
) -> Vec<T> {
    let len = per_group * n * plane;
    let mut m: Vec<T> = Vec::with_capacity(len);
    m.spare_capacity_mut()[..len]
        .par_chunks_mut(n * plane)
        .enumerate()
        .for_each(|(c, row)| {
            for (i, dst) in row.chunks_mut(plane).enumerate() {
                let src = &data[(i * channels + grp * per_group + c) * plane..][..plane];
                for (d, v) in dst.iter_mut().zip(src) {
                    d.write(*v);
                }
            }
        });
    // SAFETY: each of the per_group rows is n chunks of `plane` slots, each written from
    // `plane` values.
    unsafe { m.set_len(len) };
    m
}

/// The inverse of [`gather_outputs`]: writes a [cout_g, n * pixels] matrix of group `grp`
/// into the slots of output-shaped data [n, c_out, pixels] (each group's slots once).
pub(super) fn scatter_outputs<T: Float>(g: &Geom, m: &[T], ys: &mut [MaybeUninit<T>], grp: usize) {
    let (p, cout_g) = (g.pixels(), g.cout_g());
    let np = g.n * p;
    ys.par_chunks_mut(p).enumerate().for_each(|(i, dst)| {
        let (n, c) = (i / g.c_out, i % g.c_out);
        if c / cout_g == grp {
            let src = &m[(c - grp * cout_g) * np + n * p..][..p];
            for (d, v) in dst.iter_mut().zip(src) {
                d.write(*v);
            }
        }
    });
}

/// Writes the transpose of `src` (rows × cols, row-major) into `dst` (cols × rows): each
/// task a block of [`TRANSPOSE_BLOCK`] rows of `dst`, filled [`TRANSPOSE_BLOCK`] source
/// rows at a time (a square block in the L1 cache: contiguous reads, writes that stay in
/// the block's lines), blocks across the threads for large matrices. (A batch-1 weight
/// gradient's 512 x 4608 transpose took 5 ms in one thread of 32x32 tiles scanned column
/// by column.)
pub(super) fn transpose<T: Float>(src: &[T], rows: usize, cols: usize, dst: &mut [T]) {
    const B: usize = TRANSPOSE_BLOCK;
    if rows == 0 || cols == 0 {
        return;
    }
    let one = |(block, out): (usize, &mut [T])| {
        let c0 = block * B;
        let width = out.len() / rows;
        for r0 in (0..rows).step_by(B) {
            for r in r0..(r0 + B).min(rows) {
                let line = &src[r * cols + c0..][..width];
                for (j, v) in line.iter().enumerate() {
                    out[j * rows + r] = *v;
                }
            }
        }
    };
    let dst = &mut dst[..rows * cols];
    if rows * cols >= 1 << 20 && crate::cpu::threads() > 1 {
        dst.par_chunks_mut(B * rows).enumerate().for_each(one);
    } else {
        dst.chunks_mut(B * rows).enumerate().for_each(one);
    }
}

/// The block size of [`transpose`], in rows and columns.
const TRANSPOSE_BLOCK: usize = 16;
