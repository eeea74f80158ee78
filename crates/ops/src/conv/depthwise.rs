//! Depthwise convolution on the CPU (one group per channel, one filter per group:
//! MobileNet's and EfficientNet's 3x3 and 5x5, ConvNeXt's 7x7): direct loops over each
//! image plane, in parallel over planes, for the forward pass and both gradients. Each
//! output reads k² inputs, so the work is memory-bound; im2col would first copy every
//! input k² times and then run a GEMM of one row per group.
//!
//! Each output sums its k² products in the tap order (row by row), like a direct
//! convolution; the weight gradient sums over batch and pixels in f64, then rounds once.
//! Stride 1 and dilation 1 take `depthwise_s1`'s padded planes and register blocks.

use std::ops::Range;

use rayon::prelude::*;

use super::depthwise_s1;
use super::epilogue::CpuEpilogue;
use super::params::Geom;
use crate::cpu::Float;

/// Whether `g` is a depthwise convolution with one filter per channel.
pub(super) fn applies(g: &Geom) -> bool {
    g.groups > 1 && g.groups == g.c_in && g.c_out == g.c_in
}

/// The output positions along one axis whose tap `k` reads an input inside `0..len`:
/// `o * stride + k * dilation - pad` in range.
fn valid(
    out: usize,
    len: usize,
    k: usize,
    stride: usize,
    dilation: usize,
    pad: usize,
) -> Range<usize> {
    let offset = (k * dilation) as isize - pad as isize;
    // o * stride + offset >= 0  and  o * stride + offset <= len - 1.
    let lo = if offset >= 0 {
        0
    } else {
        (-offset as usize).div_ceil(stride)
    };
    let hi_num = len as isize - 1 - offset;
    let hi = if hi_num < 0 {
        0
    } else {
        (hi_num as usize / stride + 1).min(out)
    };
    lo.min(hi)..hi
}

/// Calls `f(tap_y, tap_x, oy_range, ox_range, dy, dx)` for every tap, with the output
/// positions it reaches and the input offset `iy = oy * sy + dy` (likewise x).
fn for_each_tap(g: &Geom, mut f: impl FnMut(usize, Range<usize>, Range<usize>, isize, isize)) {
    let [sy, sx] = g.p.stride;
    let [dy, dx] = g.p.dilation;
    let [py, px] = g.p.padding;
    for ky in 0..g.kh {
        let ys = valid(g.oh, g.h, ky, sy, dy, py);
        for kx in 0..g.kw {
            let xs = valid(g.ow, g.w, kx, sx, dx, px);
            // A tap that reads only padding (small planes) contributes nothing.
            if ys.is_empty() || xs.is_empty() {
                continue;
            }
            let offy = (ky * dy) as isize - py as isize;
            let offx = (kx * dx) as isize - px as isize;
            f(ky * g.kw + kx, ys.clone(), xs, offy, offx);
        }
    }
}

/// Calls `f(tap, oy, iy, ox_range, x0)` for every tap and every output row `oy` it
/// reaches: the input row `iy` it reads, the output columns, and the input column of the
/// first of them (the next ones `stride` apart).
#[inline(always)]
fn for_each_row(g: &Geom, mut f: impl FnMut(usize, usize, usize, Range<usize>, usize)) {
    let [sy, sx] = g.p.stride;
    for_each_tap(g, |t, ys, xr, offy, offx| {
        let x0 = ((xr.start * sx) as isize + offx) as usize;
        for oy in ys {
            let iy = ((oy * sy) as isize + offy) as usize;
            f(t, oy, iy, xr.clone(), x0);
        }
    })
}

/// `o[i] += x[i * stride] · w` (contiguous slices at stride 1, so the loop vectorises).
#[inline(always)]
fn axpy<T: Float>(o: &mut [T], x: &[T], stride: usize, w: T) {
    if stride == 1 {
        let x = &x[..o.len()];
        for (o, x) in o.iter_mut().zip(x) {
            *o += *x * w;
        }
    } else {
        for (o, x) in o.iter_mut().zip(x.iter().step_by(stride)) {
            *o += *x * w;
        }
    }
}

/// `d[i * stride] += g[i] · w`.
#[inline(always)]
fn scatter_axpy<T: Float>(d: &mut [T], stride: usize, g: &[T], w: T) {
    if stride == 1 {
        for (d, g) in d[..g.len()].iter_mut().zip(g) {
            *d += *g * w;
        }
    } else {
        for (d, g) in d.iter_mut().step_by(stride).zip(g) {
            *d += *g * w;
        }
    }
}

/// `Σ g[i] · x[i * stride]`, in 8 interleaved partial sums (so it vectorises), added in a
/// fixed order.
#[inline(always)]
fn dot<T: Float>(g: &[T], x: &[T], stride: usize) -> T {
    if stride != 1 {
        return g
            .iter()
            .zip(x.iter().step_by(stride))
            .fold(T::ZERO, |s, (g, x)| s + *g * *x);
    }
    let x = &x[..g.len()];
    let mut lanes = [T::ZERO; 8];
    let (gc, xc) = (g.chunks_exact(8), x.chunks_exact(8));
    let (gr, xr) = (gc.remainder(), xc.remainder());
    for (g8, x8) in gc.zip(xc) {
        for l in 0..8 {
            lanes[l] += g8[l] * x8[l];
        }
    }
    let mut sum = lanes.iter().fold(T::ZERO, |s, v| s + *v);
    for (g, x) in gr.iter().zip(xr) {
        sum += *g * *x;
    }
    sum
}

/// Forward: `out[n, c] = x[n, c] ⋆ w[c]`, then the epilogue.
pub(super) fn forward<T: Float>(g: &Geom, xs: &[T], ws: &[T], epi: &CpuEpilogue<'_, T>) -> Vec<T> {
    if depthwise_s1::applies(g) {
        return depthwise_s1::forward(g, xs, ws, epi);
    }
    let (hw, p, taps) = (g.h * g.w, g.pixels(), g.kh * g.kw);
    let sx = g.p.stride[1];
    let mut out = vec![T::ZERO; g.n * g.c_out * p];
    out.par_chunks_mut(p).enumerate().for_each(|(plane, o)| {
        let (n, c) = (plane / g.c_in, plane % g.c_in);
        let x = &xs[plane * hw..][..hw];
        let w = &ws[c * taps..][..taps];
        crate::cpu::vectorized(|| {
            for_each_row(g, |t, oy, iy, xr, x0| {
                let row = &x[iy * g.w..][..g.w];
                let orow = &mut o[oy * g.ow..][..g.ow];
                axpy(&mut orow[xr], &row[x0..], sx, w[t]);
            })
        });
        if !epi.is_empty() {
            epi.apply_row(g, n, c, 0, o);
        }
    });
    out
}

/// Input gradient: each output gradient scattered back through its plane's filter.
pub(super) fn backward_data<T: Float>(g: &Geom, gs: &[T], ws: &[T]) -> Vec<T> {
    if depthwise_s1::applies(g) {
        return depthwise_s1::backward_data(g, gs, ws);
    }
    let (hw, p, taps) = (g.h * g.w, g.pixels(), g.kh * g.kw);
    let sx = g.p.stride[1];
    let mut dx = vec![T::ZERO; g.n * g.c_in * hw];
    dx.par_chunks_mut(hw).enumerate().for_each(|(plane, d)| {
        let c = plane % g.c_in;
        let gy = &gs[plane * p..][..p];
        let w = &ws[c * taps..][..taps];
        crate::cpu::vectorized(|| {
            for_each_row(g, |t, oy, iy, xr, x0| {
                let grow = &gy[oy * g.ow..][..g.ow];
                let drow = &mut d[iy * g.w..][..g.w];
                scatter_axpy(&mut drow[x0..], sx, &grow[xr], w[t]);
            })
        });
    });
    dx
}

/// Weight gradient: `dw[c, tap] = Σ_n Σ_pixels gy[n, c] · x[n, c] at the tap`, in f64.
pub(super) fn backward_filter<T: Float>(g: &Geom, gs: &[T], xs: &[T]) -> Vec<T> {
    if depthwise_s1::applies(g) {
        return depthwise_s1::backward_filter(g, gs, xs);
    }
    let (hw, p, taps) = (g.h * g.w, g.pixels(), g.kh * g.kw);
    let [sy, sx] = g.p.stride;
    let mut dw = vec![T::ZERO; g.c_out * taps];
    dw.par_chunks_mut(taps).enumerate().for_each(|(c, dwc)| {
        let mut acc = vec![0f64; taps];
        for n in 0..g.n {
            let plane = n * g.c_in + c;
            let x = &xs[plane * hw..][..hw];
            let gy = &gs[plane * p..][..p];
            crate::cpu::vectorized(|| {
                for_each_tap(g, |t, ys, xr, offy, offx| {
                    let mut sum = T::ZERO;
                    for oy in ys {
                        let iy = ((oy * sy) as isize + offy) as usize;
                        let row = &x[iy * g.w..][..g.w];
                        let grow = &gy[oy * g.ow..][..g.ow];
                        let x0 = ((xr.start * sx) as isize + offx) as usize;
                        sum += dot(&grow[xr.clone()], &row[x0..], sx);
                    }
                    acc[t] += sum.to_f64();
                })
            });
        }
        for (d, a) in dwc.iter_mut().zip(acc) {
            *d = T::from_f64(a);
        }
    });
    dw
}
