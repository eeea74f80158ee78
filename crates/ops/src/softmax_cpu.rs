//! Softmax and log-softmax along one dimension on the CPU, forward and backward: one
//! pass for the maximum, one for the exponentials and their sum (in f64), one to write,
//! in place of candle's five generic ops, each of which reads and writes the whole
//! tensor. The tensor is seen as `[outer, d, inner]` around the dimension: a row when
//! `inner` is 1 (attention scores, logits), `inner` columns side by side otherwise (a
//! softmax over channels), each block of `d · inner` values one task.

use candle_core::Tensor;
use rayon::prelude::*;

use crate::cpu::{self, Float, WideKernel};
use crate::error::Result;

/// Which of the two the kernel computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SoftmaxKind {
    /// `exp(x - max) / Σ exp(x - max)`.
    Softmax,
    /// `x - max - ln Σ exp(x - max)`.
    LogSoftmax,
}

impl SoftmaxKind {
    fn op(self) -> &'static str {
        match self {
            SoftmaxKind::Softmax => "softmax",
            SoftmaxKind::LogSoftmax => "log_softmax",
        }
    }
}

/// `(outer, d, inner)` of `dims` around `dim`.
fn split(dims: &[usize], dim: usize) -> (usize, usize, usize) {
    let outer = dims[..dim].iter().product();
    let inner = dims[dim + 1..].iter().product();
    (outer, dims[dim], inner)
}

/// Blocks per task: enough work per task, enough tasks for the threads.
fn blocks_per_task(blocks: usize, block: usize) -> usize {
    (cpu::CHUNK / block.max(1)).clamp(1, blocks.div_ceil(4 * cpu::threads()).max(1))
}

/// A softmax's blocks: `d` values along the dimension, `inner` columns after it.
#[derive(Clone, Copy)]
struct Blocks {
    d: usize,
    inner: usize,
    kind: SoftmaxKind,
}

/// The forward of a run of blocks.
struct Forward<'a, T> {
    x: &'a [T],
    out: &'a mut [T],
    blocks: Blocks,
}

impl<T: Float> WideKernel for Forward<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let Blocks { d, inner, kind } = self.blocks;
        // Per column of the block: its maximum and Σ exp(x - max).
        let mut max = vec![T::NEG_INFINITY; inner];
        let mut sum = vec![0f64; inner];
        for (x, y) in self
            .x
            .chunks_exact(d * inner)
            .zip(self.out.chunks_exact_mut(d * inner))
        {
            max.fill(T::NEG_INFINITY);
            for row in x.chunks_exact(inner) {
                for (m, &v) in max.iter_mut().zip(row) {
                    // NaN never wins: it reaches the output through exp(NaN - max).
                    *m = if v > *m { v } else { *m };
                }
            }
            if inner == 1 {
                // One row: the sum in eight interleaved partials, which vectorizes.
                let m = max[0];
                for (y, &v) in y.iter_mut().zip(x) {
                    *y = (v - m).exp();
                }
                sum[0] = cpu::sum_f64(y, |e| e.to_f64());
            } else {
                sum.fill(0.0);
                for (yr, xr) in y.chunks_exact_mut(inner).zip(x.chunks_exact(inner)) {
                    for (((y, &v), &m), s) in yr.iter_mut().zip(xr).zip(&max).zip(&mut sum) {
                        *y = (v - m).exp();
                        *s += y.to_f64();
                    }
                }
            }
            match kind {
                SoftmaxKind::Softmax => {
                    let scale: Vec<T> = sum.iter().map(|&s| T::from_f64(1.0 / s)).collect();
                    for yr in y.chunks_exact_mut(inner) {
                        for (y, &r) in yr.iter_mut().zip(&scale) {
                            *y *= r;
                        }
                    }
                }
                SoftmaxKind::LogSoftmax => {
                    // x - (max + ln Σ), the shift rounded once from f64.
                    let shift: Vec<T> = max
                        .iter()
                        .zip(&sum)
                        .map(|(&m, &s)| T::from_f64(m.to_f64() + s.ln()))
                        .collect();
                    for (yr, xr) in y.chunks_exact_mut(inner).zip(x.chunks_exact(inner)) {
                        for ((y, &v), &c) in yr.iter_mut().zip(xr).zip(&shift) {
                            *y = v - c;
                        }
                    }
                }
            }
        }
    }
}

/// `softmax(x, dim)` or `log_softmax(x, dim)` of an f32 or f64 CPU tensor.
pub(crate) fn forward_on_cpu(x: &Tensor, dim: usize, kind: SoftmaxKind) -> Result<Tensor> {
    cpu::dispatch_float!(kind.op(), x.dtype(), forward(x, dim, kind))
}

/// The input gradient of `softmax` or `log_softmax` along `dim` on the CPU, from its
/// output `y` (f32 or f64, the gradient's dtype too).
pub(crate) fn backward_on_cpu(
    grad_y: &Tensor,
    y: &Tensor,
    dim: usize,
    kind: SoftmaxKind,
) -> Result<Tensor> {
    cpu::same_dtype(kind.op(), y.dtype(), &[("output gradient", grad_y)])?;
    cpu::dispatch_float!(kind.op(), y.dtype(), backward(grad_y, y, dim, kind))
}

fn forward<T: Float>(x: &Tensor, dim: usize, kind: SoftmaxKind) -> Result<Tensor> {
    let out = forward_values::<T>(x, dim, kind)?;
    cpu::tensor(kind.op(), out, x.dims())
}

/// The values of `softmax(x, dim)` or `log_softmax(x, dim)`, row-major in `x`'s shape.
pub(crate) fn forward_values<T: Float>(
    x: &Tensor,
    dim: usize,
    kind: SoftmaxKind,
) -> Result<Vec<T>> {
    let (outer, d, inner) = split(x.dims(), dim);
    let mut out = vec![T::ZERO; x.elem_count()];
    let block = d * inner;
    if block > 0 && outer > 0 {
        let per = blocks_per_task(outer, block) * block;
        cpu::with_slice::<T, _>(kind.op(), x, |xs| {
            out.par_chunks_mut(per)
                .zip(xs.par_chunks(per))
                .for_each(|(out, x)| {
                    let blocks = Blocks { d, inner, kind };
                    cpu::run_wide(Forward { x, out, blocks })
                });
            Ok(())
        })?;
    }
    Ok(out)
}

/// The backward of a run of blocks, from the output `y` and its gradient `g`.
struct Backward<'a, T> {
    y: &'a [T],
    g: &'a [T],
    dx: &'a mut [T],
    blocks: Blocks,
}

impl<T: Float> WideKernel for Backward<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let Blocks { d, inner, kind } = self.blocks;
        let mut acc = vec![0f64; inner];
        let blocks = self
            .y
            .chunks_exact(d * inner)
            .zip(self.g.chunks_exact(d * inner))
            .zip(self.dx.chunks_exact_mut(d * inner));
        for ((y, g), dx) in blocks {
            // Softmax: Σ g·y per column; log-softmax: Σ g.
            let softmax = kind == SoftmaxKind::Softmax;
            if inner == 1 {
                acc[0] = if softmax {
                    let mut parts = [0f64; 8];
                    for (i, (&g, &y)) in g.iter().zip(y).enumerate() {
                        parts[i % 8] += (g * y).to_f64();
                    }
                    parts.iter().sum()
                } else {
                    cpu::sum_f64(g, |v| v.to_f64())
                };
            } else {
                acc.fill(0.0);
                for (gr, yr) in g.chunks_exact(inner).zip(y.chunks_exact(inner)) {
                    for ((a, &g), &y) in acc.iter_mut().zip(gr).zip(yr) {
                        *a += if softmax {
                            (g * y).to_f64()
                        } else {
                            g.to_f64()
                        };
                    }
                }
            }
            let c: Vec<T> = acc.iter().map(|&a| T::from_f64(a)).collect();
            let rows = dx
                .chunks_exact_mut(inner)
                .zip(g.chunks_exact(inner))
                .zip(y.chunks_exact(inner));
            for ((dxr, gr), yr) in rows {
                for (((dx, &g), &y), &c) in dxr.iter_mut().zip(gr).zip(yr).zip(&c) {
                    // softmax: y·(g - Σ g·y); log-softmax: g - exp(y)·Σ g.
                    *dx = if softmax {
                        y * (g - c)
                    } else {
                        g - y.exp() * c
                    };
                }
            }
        }
    }
}

fn backward<T: Float>(
    grad_y: &Tensor,
    y: &Tensor,
    dim: usize,
    kind: SoftmaxKind,
) -> Result<Tensor> {
    let (outer, d, inner) = split(y.dims(), dim);
    let mut dx = vec![T::ZERO; y.elem_count()];
    let block = d * inner;
    if block > 0 && outer > 0 {
        let per = blocks_per_task(outer, block) * block;
        cpu::with_slice::<T, _>(kind.op(), y, |ys| {
            cpu::with_slice::<T, _>(kind.op(), grad_y, |gs| {
                dx.par_chunks_mut(per)
                    .zip(ys.par_chunks(per))
                    .zip(gs.par_chunks(per))
                    .for_each(|((dx, y), g)| {
                        let blocks = Blocks { d, inner, kind };
                        cpu::run_wide(Backward { y, g, dx, blocks })
                    });
                Ok(())
            })
        })?;
    }
    cpu::tensor(kind.op(), dx, y.dims())
}
