//! Layer norm over the channels of an `[N, C, ...]` input on the CPU (torchvision's
//! `LayerNorm2d`), without permuting to channels-last and back.
//!
//! Each position's statistics are sums down a column of stride `S` (the spatial size):
//! blocks of columns side by side, summed in f64 lanes, so every read is contiguous. Then
//! the rows `(n, c)` are written, or differentiated, in parallel from those statistics.

use candle_core::Tensor;
use rayon::prelude::*;

use crate::cpu::{self, Float, WideKernel};
use crate::error::Result;

const OP: &str = "layer_norm2d";

/// The `[N, C, S]` sizes of an `[N, C, ...]` input.
fn sizes(x: &Tensor) -> (usize, usize, usize) {
    let d = x.dims();
    (d[0], d[1], d[2..].iter().product())
}

/// A block of columns of one image's `[C, S]` plane: `width` columns from `s0`.
#[derive(Clone, Copy)]
struct Block {
    s: usize,
    s0: usize,
    width: usize,
}

impl Block {
    /// The block's part of each channel's row of `plane`, in channel order.
    fn rows<T>(self, plane: &[T]) -> impl Iterator<Item = &[T]> {
        plane
            .chunks_exact(self.s)
            .map(move |r| &r[self.s0..][..self.width])
    }
}

/// The mean and `1/√(var + eps)` of a block of columns.
struct ColumnStats<'a, T> {
    plane: &'a [T],
    block: Block,
    mean: &'a mut [f64],
    rstd: &'a mut [f64],
    eps: f64,
}

impl<T: Float> WideKernel for ColumnStats<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let inv_c = self.block.s as f64 / self.plane.len() as f64;
        for row in self.block.rows(self.plane) {
            for (a, v) in self.mean.iter_mut().zip(row) {
                *a += v.to_f64();
            }
        }
        self.mean.iter_mut().for_each(|m| *m *= inv_c);
        for row in self.block.rows(self.plane) {
            for ((a, m), v) in self.rstd.iter_mut().zip(&*self.mean).zip(row) {
                let d = v.to_f64() - m;
                *a += d * d;
            }
        }
        let eps = self.eps;
        self.rstd
            .iter_mut()
            .for_each(|v| *v = 1.0 / (*v * inv_c + eps).sqrt());
    }
}

/// The output gradient's column means over the channels, `Σ g·w / C` and
/// `Σ g·w·x̂ / C`, for a block of columns whose statistics are known.
struct ColumnGradMeans<'a, T> {
    plane: &'a [T],
    grad: &'a [T],
    block: Block,
    weight: Option<&'a [T]>,
    mean: &'a [f64],
    rstd: &'a [f64],
    gw: &'a mut [f64],
    gwx: &'a mut [f64],
}

impl<T: Float> WideKernel for ColumnGradMeans<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let rows = self.block.rows(self.plane).zip(self.block.rows(self.grad));
        let mut channels = 0usize;
        for (ch, (x, g)) in rows.enumerate() {
            channels += 1;
            let wc = self.weight.map_or(1.0, |w| w[ch].to_f64());
            let sums = self.gw.iter_mut().zip(self.gwx.iter_mut());
            let stats = self.mean.iter().zip(self.rstd);
            for (((a, b), (m, r)), (x, g)) in sums.zip(stats).zip(x.iter().zip(g)) {
                let gw = g.to_f64() * wc;
                *a += gw;
                *b += gw * (x.to_f64() - m) * r;
            }
        }
        let inv_c = 1.0 / channels.max(1) as f64;
        self.gw.iter_mut().for_each(|v| *v *= inv_c);
        self.gwx.iter_mut().for_each(|v| *v *= inv_c);
    }
}

/// `K` per-position arrays `[N, S]`, each block of columns filled in parallel by
/// `fill(image, block, its part of each array)`.
fn per_position<const K: usize>(
    (n, c, s): (usize, usize, usize),
    fill: impl Fn(usize, Block, &mut [Vec<f64>; K]) + Sync,
) -> [Vec<f64>; K] {
    // A block's `C` rows stay in cache between its passes.
    let bw = (cpu::CHUNK / c.max(1)).clamp(8, 1024).min(s);
    let per_image = s.div_ceil(bw);
    let parts: Vec<[Vec<f64>; K]> = (0..n * per_image)
        .into_par_iter()
        .map(|i| {
            let s0 = (i % per_image) * bw;
            let block = Block {
                s,
                s0,
                width: bw.min(s - s0),
            };
            let mut part = std::array::from_fn(|_| vec![0f64; block.width]);
            fill(i / per_image, block, &mut part);
            part
        })
        .collect();
    let mut out: [Vec<f64>; K] = std::array::from_fn(|_| Vec::with_capacity(n * s));
    for part in parts {
        for (o, p) in out.iter_mut().zip(part) {
            o.extend(p);
        }
    }
    out
}

/// Per-position mean and `1/√(var + eps)`, `[N, S]` each.
fn statistics<T: Float>(xs: &[T], dims: (usize, usize, usize), eps: f64) -> [Vec<f64>; 2] {
    let plane = dims.1 * dims.2;
    per_position(dims, |n, block, [mean, rstd]| {
        cpu::run_wide(ColumnStats {
            plane: &xs[n * plane..][..plane],
            block,
            mean,
            rstd,
            eps,
        })
    })
}

/// Rows `(n, c)` per task of the row passes.
fn rows_per_task(rows: usize, s: usize) -> usize {
    (cpu::CHUNK / s.max(1)).clamp(1, rows.div_ceil(4 * cpu::threads()).max(1))
}

/// Where a block of rows starts (row `r` is image `r / C`, channel `r % C`) and the
/// per-position arrays it reads.
#[derive(Clone, Copy)]
struct RowsAt<'a> {
    r0: usize,
    c: usize,
    s: usize,
    mean: &'a [f64],
    rstd: &'a [f64],
}

impl<'a> RowsAt<'a> {
    /// Row `i` of the block: its channel and its image's mean and rstd.
    #[inline(always)]
    fn row(self, i: usize) -> (usize, &'a [f64], &'a [f64]) {
        let (n, ch) = ((self.r0 + i) / self.c, (self.r0 + i) % self.c);
        let at = |v: &'a [f64]| &v[n * self.s..][..self.s];
        (ch, at(self.mean), at(self.rstd))
    }
}

/// The forward of a block of rows.
struct ForwardRows<'a, T> {
    x: &'a [T],
    out: &'a mut [T],
    at: RowsAt<'a>,
    weight: Option<&'a [T]>,
    bias: Option<&'a [T]>,
}

impl<T: Float> WideKernel for ForwardRows<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let s = self.at.s;
        let rows = self.x.chunks_exact(s).zip(self.out.chunks_exact_mut(s));
        for (i, (x, y)) in rows.enumerate() {
            let (ch, mean, rstd) = self.at.row(i);
            let w = self.weight.map_or(1.0, |w| w[ch].to_f64());
            let b = self.bias.map_or(0.0, |b| b[ch].to_f64());
            for (((y, x), m), r) in y.iter_mut().zip(x).zip(mean).zip(rstd) {
                *y = T::from_f64((x.to_f64() - m) * r * w + b);
            }
        }
    }
}

/// `layer_norm` over dimension 1 of an `[N, C, ...]` input, with per-channel `weight`
/// and `bias`.
pub(crate) fn forward<T: Float>(
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    let dims @ (_, c, s) = sizes(x);
    let mut out = vec![T::ZERO; x.elem_count()];
    let (w, b) = (
        cpu::opt_values::<T>(OP, weight)?,
        cpu::opt_values::<T>(OP, bias)?,
    );
    if !out.is_empty() {
        cpu::with_slice::<T, _>(OP, x, |xs| {
            let [mean, rstd] = statistics(xs, dims, eps);
            let per = rows_per_task(xs.len() / s, s);
            out.par_chunks_mut(per * s)
                .zip(xs.par_chunks(per * s))
                .enumerate()
                .for_each(|(t, (out, x))| {
                    let at = RowsAt {
                        r0: t * per,
                        c,
                        s,
                        mean: &mean,
                        rstd: &rstd,
                    };
                    cpu::run_wide(ForwardRows {
                        x,
                        out,
                        at,
                        weight: w.as_deref(),
                        bias: b.as_deref(),
                    })
                });
            Ok(())
        })?;
    }
    cpu::tensor(OP, out, x.dims())
}

/// The backward of a block of rows: their input gradient, and their share of the weight
/// and bias gradients (f64 sums per channel).
struct BackwardRows<'a, T> {
    x: &'a [T],
    g: &'a [T],
    dx: &'a mut [T],
    at: RowsAt<'a>,
    gw: &'a [f64],
    gwx: &'a [f64],
    weight: Option<&'a [T]>,
}

impl<T: Float> WideKernel for BackwardRows<'_, T> {
    type Output = (Vec<f64>, Vec<f64>);
    #[inline(always)]
    fn run(self) -> (Vec<f64>, Vec<f64>) {
        let (s, c) = (self.at.s, self.at.c);
        let (mut dw, mut db) = (vec![0f64; c], vec![0f64; c]);
        let rows = self.x.chunks_exact(s).zip(self.g.chunks_exact(s));
        for (i, ((x, g), dx)) in rows.zip(self.dx.chunks_exact_mut(s)).enumerate() {
            let (ch, mean, rstd) = self.at.row(i);
            let n = (self.at.r0 + i) / c;
            let (gw, gwx) = (&self.gw[n * s..][..s], &self.gwx[n * s..][..s]);
            let w = self.weight.map_or(1.0, |w| w[ch].to_f64());
            let (mut sw, mut sb) = (0f64, 0f64);
            let stats = mean.iter().zip(rstd).zip(gw.iter().zip(gwx));
            for (((dx, x), g), ((m, r), (a, b))) in dx.iter_mut().zip(x).zip(g).zip(stats) {
                let (g, h) = (g.to_f64(), (x.to_f64() - m) * r);
                *dx = T::from_f64((g * w - a - h * b) * r);
                sw += g * h;
                sb += g;
            }
            dw[ch] += sw;
            db[ch] += sb;
        }
        (dw, db)
    }
}

/// Layer norm over channels: the input gradient and the per-channel sums `Σ g·x̂` and
/// `Σ g` (the weight's and the bias's gradients), from the output gradient and the input.
pub(crate) fn backward<T: Float>(
    grad_y: &Tensor,
    x: &Tensor,
    weight: Option<&Tensor>,
    eps: f64,
) -> Result<(Tensor, Tensor, Tensor)> {
    let dims @ (_, c, s) = sizes(x);
    let mut dx = vec![T::ZERO; x.elem_count()];
    let w = cpu::opt_values::<T>(OP, weight)?;
    let mut sums = (vec![0f64; c], vec![0f64; c]);
    if !dx.is_empty() {
        let parts: Vec<(Vec<f64>, Vec<f64>)> =
            cpu::with_slices::<T, _>(OP, x, grad_y, |xs, gs| {
                let [mean, rstd] = statistics(xs, dims, eps);
                let plane = c * s;
                let [gw, gwx] = per_position(dims, |n, block, [gw, gwx]| {
                    let range = n * s + block.s0..n * s + block.s0 + block.width;
                    cpu::run_wide(ColumnGradMeans {
                        plane: &xs[n * plane..][..plane],
                        grad: &gs[n * plane..][..plane],
                        block,
                        weight: w.as_deref(),
                        mean: &mean[range.clone()],
                        rstd: &rstd[range],
                        gw,
                        gwx,
                    })
                });
                let per = rows_per_task(xs.len() / s, s);
                Ok(dx
                    .par_chunks_mut(per * s)
                    .zip(xs.par_chunks(per * s))
                    .zip(gs.par_chunks(per * s))
                    .enumerate()
                    .map(|(t, ((dx, x), g))| {
                        let at = RowsAt {
                            r0: t * per,
                            c,
                            s,
                            mean: &mean,
                            rstd: &rstd,
                        };
                        cpu::run_wide(BackwardRows {
                            x,
                            g,
                            dx,
                            at,
                            gw: &gw,
                            gwx: &gwx,
                            weight: w.as_deref(),
                        })
                    })
                    .collect())
            })?;
        crate::layer_norm_cpu::add_parts(&mut sums, parts);
    }
    let [dw, db] = crate::layer_norm_cpu::affine_grads::<T>(OP, sums)?;
    Ok((cpu::tensor(OP, dx, x.dims())?, dw, db))
}
