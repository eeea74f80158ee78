//! Layer norm and RMS norm over the last dimension on the CPU: one pass per row for the
//! statistics (summed in f64) and one to write, forward and backward; the weight and bias
//! gradients summed per thread over its rows, then across threads. In place of candle's
//! nine generic ops, each of which reads and writes the whole tensor. RMS norm is layer
//! norm without the centring: its mean is taken as 0, in forward and in backward.

use std::mem::MaybeUninit;

use candle_core::Tensor;
use rayon::prelude::*;

use crate::cpu::{self, Float, WideKernel};
use crate::error::Result;

/// Which statistics a row is normalised by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowNorm {
    /// `(x - mean) / √(var + eps)`: layer norm.
    Layer,
    /// `x / √(mean(x²) + eps)`: RMS norm.
    Rms,
}

impl RowNorm {
    /// The op's name, for errors.
    pub(crate) fn op(self) -> &'static str {
        match self {
            RowNorm::Layer => "layer_norm",
            RowNorm::Rms => "rms_norm",
        }
    }
}

/// Rows per task: enough work per task, enough tasks for the threads.
fn rows_per_task(rows: usize, d: usize) -> usize {
    (cpu::CHUNK / d.max(1)).clamp(1, rows.div_ceil(4 * cpu::threads()).max(1))
}

/// A row's centre and `1/√(mean((x - centre)²) + eps)`, in f64: the mean for layer norm,
/// 0 for RMS norm.
#[inline(always)]
fn stats<T: Float>(row: &[T], norm: RowNorm, eps: f64) -> (f64, f64) {
    let d = row.len() as f64;
    let mean = match norm {
        RowNorm::Layer => cpu::sum_f64(row, |v| v.to_f64()) / d,
        RowNorm::Rms => 0.0,
    };
    let var = cpu::sum_f64(row, |v| {
        let c = v.to_f64() - mean;
        c * c
    }) / d;
    (mean, 1.0 / (var + eps).sqrt())
}

/// `Σ a·b`, each product in `T` and summed in f64 over eight lanes (in vector registers).
#[inline(always)]
fn dot_f64<T: Float>(a: &[T], b: &[T]) -> f64 {
    let mut acc = [0f64; 8];
    let (ab, bb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ab.remainder(), bb.remainder());
    for (a, b) in ab.zip(bb) {
        for ((s, &a), &b) in acc.iter_mut().zip(a).zip(b) {
            *s += (a * b).to_f64();
        }
    }
    for ((s, &a), &b) in acc.iter_mut().zip(ar).zip(br) {
        *s += (a * b).to_f64();
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// The forward of a block of rows.
struct Forward<'a, T> {
    x: &'a [T],
    /// Written in full: every row of `x` writes its row here.
    out: &'a mut [MaybeUninit<T>],
    weight: Option<&'a [T]>,
    bias: Option<&'a [T]>,
    d: usize,
    norm: RowNorm,
    eps: f64,
}

impl<T: Float> WideKernel for Forward<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        for (x, y) in self
            .x
            .chunks_exact(self.d)
            .zip(self.out.chunks_exact_mut(self.d))
        {
            // The statistics in f64, the row in T (as PyTorch's CPU kernel computes it),
            // each case its own loop so that it runs in vector lanes.
            let (mean, rstd) = stats(x, self.norm, self.eps);
            let (m, r) = (T::from_f64(mean), T::from_f64(rstd));
            let xy = y.iter_mut().zip(x);
            match (self.weight, self.bias) {
                (Some(w), Some(b)) => xy
                    .zip(w.iter().zip(b))
                    .for_each(|((y, &x), (&w, &b))| _ = y.write((x - m) * r * w + b)),
                (Some(w), None) => xy
                    .zip(w)
                    .for_each(|((y, &x), &w)| _ = y.write((x - m) * r * w)),
                (None, Some(b)) => xy
                    .zip(b)
                    .for_each(|((y, &x), &b)| _ = y.write((x - m) * r + b)),
                (None, None) => xy.for_each(|(y, &x)| _ = y.write((x - m) * r)),
            }
        }
    }
}

/// `layer_norm(x, weight, bias, eps)` or `rms_norm(x, weight, eps)` (no bias) over the
/// last dimension (`d` values).
pub(crate) fn forward<T: Float>(
    norm: RowNorm,
    x: &Tensor,
    (weight, bias): (Option<&Tensor>, Option<&Tensor>),
    eps: f64,
) -> Result<Tensor> {
    let op = norm.op();
    let d = *x.dims().last().unwrap_or(&1);
    let rows = x.elem_count() / d.max(1);
    let mut out = Vec::with_capacity(x.elem_count());
    let w = cpu::opt_values::<T>(op, weight)?;
    let b = cpu::opt_values::<T>(op, bias)?;
    if d > 0 && rows > 0 {
        let per = rows_per_task(rows, d);
        cpu::with_slice::<T, _>(op, x, |xs| {
            out.spare_capacity_mut()[..rows * d]
                .par_chunks_mut(per * d)
                .zip(xs.par_chunks(per * d))
                .for_each(|(o, x)| {
                    cpu::run_wide(Forward {
                        x,
                        out: o,
                        weight: w.as_deref(),
                        bias: b.as_deref(),
                        d,
                        norm,
                        eps,
                    })
                });
            Ok(())
        })?;
        // SAFETY: the rows * d slots (all of x's elements) were written, one row each.
        unsafe { out.set_len(rows * d) };
    }
    cpu::tensor(op, out, x.dims())
}

/// The backward of a block of rows: their input gradient, and their share of the weight
/// and bias gradients (f64 column sums).
struct Backward<'a, T> {
    x: &'a [T],
    g: &'a [T],
    dx: &'a mut [T],
    weight: Option<&'a [T]>,
    d: usize,
    norm: RowNorm,
    eps: f64,
}

impl<T: Float> WideKernel for Backward<'_, T> {
    type Output = (Vec<f64>, Vec<f64>);
    #[inline(always)]
    fn run(self) -> (Vec<f64>, Vec<f64>) {
        let d = self.d;
        let (mut dw, mut db) = (vec![0f64; d], vec![0f64; d]);
        let mut gw = vec![T::ZERO; d];
        let mut xhat = vec![T::ZERO; d];
        let rows = self
            .x
            .chunks_exact(d)
            .zip(self.g.chunks_exact(d))
            .zip(self.dx.chunks_exact_mut(d));
        for ((x, g), dx) in rows {
            let (mean, rstd) = stats(x, self.norm, self.eps);
            let (mean_t, rstd_t) = (T::from_f64(mean), T::from_f64(rstd));
            for (h, &x) in xhat.iter_mut().zip(x) {
                *h = (x - mean_t) * rstd_t;
            }
            match self.weight {
                Some(w) => gw
                    .iter_mut()
                    .zip(g)
                    .zip(w)
                    .for_each(|((o, &g), &w)| *o = g * w),
                None => gw.copy_from_slice(g),
            }
            let n = d as f64;
            // RMS norm's statistics do not depend on a mean: no mean(g) term.
            let mean_g = match self.norm {
                RowNorm::Layer => T::from_f64(cpu::sum_f64(&gw, |v| v.to_f64()) / n),
                RowNorm::Rms => T::ZERO,
            };
            let mean_gx = T::from_f64(dot_f64(&gw, &xhat) / n);
            for ((dx, &a), &h) in dx.iter_mut().zip(&gw).zip(&xhat) {
                *dx = (a - mean_g - h * mean_gx) * rstd_t;
            }
            for (((w, b), &g), &h) in dw.iter_mut().zip(db.iter_mut()).zip(g).zip(&xhat) {
                *w += (g * h).to_f64();
                *b += g.to_f64();
            }
        }
        (dw, db)
    }
}

/// The norm's input gradient and the column sums `Σ g·x̂` and `Σ g` (the weight's and
/// the bias's gradients), from the output gradient `g` and the input `x`.
pub(crate) fn backward<T: Float>(
    norm: RowNorm,
    (grad_y, x): (&Tensor, &Tensor),
    weight: Option<&Tensor>,
    eps: f64,
) -> Result<(Tensor, Tensor, Tensor)> {
    let op = norm.op();
    let d = *x.dims().last().unwrap_or(&1);
    let rows = x.elem_count() / d.max(1);
    let mut dx = vec![T::ZERO; x.elem_count()];
    let w = cpu::opt_values::<T>(op, weight)?;
    let mut sums = (vec![0f64; d], vec![0f64; d]);
    if d > 0 && rows > 0 {
        let per = rows_per_task(rows, d);
        let parts: Vec<(Vec<f64>, Vec<f64>)> =
            cpu::with_slices::<T, _>(op, x, grad_y, |xs, gs| {
                Ok(dx
                    .par_chunks_mut(per * d)
                    .zip(xs.par_chunks(per * d))
                    .zip(gs.par_chunks(per * d))
                    .map(|((dx, x), g)| {
                        cpu::run_wide(Backward {
                            x,
                            g,
                            dx,
                            weight: w.as_deref(),
                            d,
                            norm,
                            eps,
                        })
                    })
                    .collect())
            })?;
        add_parts(&mut sums, parts);
    }
    let [dw, db] = affine_grads::<T>(op, sums)?;
    Ok((cpu::tensor(op, dx, x.dims())?, dw, db))
}

/// Adds each task's `(Σ g·x̂, Σ g)` partial sums into `sums`.
pub(crate) fn add_parts(sums: &mut (Vec<f64>, Vec<f64>), parts: Vec<(Vec<f64>, Vec<f64>)>) {
    for (pw, pb) in parts {
        sums.0.iter_mut().zip(&pw).for_each(|(a, b)| *a += b);
        sums.1.iter_mut().zip(&pb).for_each(|(a, b)| *a += b);
    }
}

/// The weight's and the bias's gradients from their f64 sums, rounded once to `T`.
pub(crate) fn affine_grads<T: Float>(
    op: &'static str,
    (dw, db): (Vec<f64>, Vec<f64>),
) -> Result<[Tensor; 2]> {
    let col = |v: Vec<f64>| {
        let n = v.len();
        cpu::tensor(op, v.into_iter().map(T::from_f64).collect::<Vec<T>>(), n)
    };
    Ok([col(dw)?, col(db)?])
}
