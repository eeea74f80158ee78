//! CPU kernels for any broadcast, by rows ([`Rows`]): arithmetic between operands of
//! different shapes (a bias `[C]` over `[N, T, C]`, a mask over heads), and a gradient's
//! sum back to a broadcast operand's shape.

use std::mem::MaybeUninit;

use candle_core::{Tensor, WithDType};
use rayon::prelude::*;

use super::op::BinaryOp;
use super::rows::{Rows, Src};
use crate::cpu::{self, Float, CHUNK};
use crate::error::Result;

/// `out = f(a, b)` over `shape`, each operand broadcast to it by rows.
pub(crate) fn zip_rows<T: WithDType, U: WithDType>(
    op: &'static str,
    shape: &[usize],
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(T, U) -> T + Sync,
) -> Result<Tensor> {
    let rows = Rows::plan(shape, [a.dims(), b.dims()]);
    let (n, inner) = (shape.iter().product::<usize>(), rows.inner);
    let mut out = Vec::<T>::with_capacity(n);
    cpu::with_slice::<T, _>(op, a, |ad| {
        cpu::with_slice::<U, _>(op, b, |bd| {
            let slots = &mut out.spare_capacity_mut()[..n];
            rows.for_each_row(slots, |row, [sa, sb]| {
                let x = Src::of(ad, sa, rows.along[0], inner);
                zip_row(row, x, Src::of(bd, sb, rows.along[1], inner), &f)
            });
            Ok(())
        })
    })?;
    // SAFETY: the rows cover the `n` elements of `shape`, and each row's slots were written.
    unsafe { out.set_len(n) };
    cpu::tensor(op, out, shape)
}

/// One row of [`zip_rows`]: a loop per kind of operand, each simple enough to
/// vectorize.
#[inline(always)]
fn zip_row<T: Copy, U: Copy>(
    row: &mut [MaybeUninit<T>],
    x: Src<'_, T>,
    y: Src<'_, U>,
    f: &impl Fn(T, U) -> T,
) {
    match (x, y) {
        (Src::Run(x), Src::Run(y)) => {
            for ((o, x), y) in row.iter_mut().zip(x).zip(y) {
                o.write(f(*x, *y));
            }
        }
        (Src::Run(x), Src::One(y)) => {
            for (o, x) in row.iter_mut().zip(x) {
                o.write(f(*x, y));
            }
        }
        (x, y) => {
            for (j, o) in row.iter_mut().enumerate() {
                o.write(f(x.at(j), y.at(j)));
            }
        }
    }
}

/// `a op b` broadcast to `shape`.
pub(crate) fn binary<T: Float>(
    op: BinaryOp,
    a: &Tensor,
    b: &Tensor,
    shape: &[usize],
) -> Result<Tensor> {
    use BinaryOp::*;
    let name = op.name();
    match op {
        Add => zip_rows::<T, T>(name, shape, a, b, |x, y| x + y),
        Sub => zip_rows::<T, T>(name, shape, a, b, |x, y| x - y),
        Mul => zip_rows::<T, T>(name, shape, a, b, |x, y| x * y),
        Div => zip_rows::<T, T>(name, shape, a, b, |x, y| x / y),
    }
}

/// `t` summed over the dimensions along which a tensor of `shape` was broadcast to it.
/// Each output value is summed in f64 in row order, so the bits do not depend on the
/// number of threads.
pub(crate) fn sum_to_shape<T: Float>(
    op: &'static str,
    t: &Tensor,
    shape: &[usize],
) -> Result<Tensor> {
    let rows = Rows::plan(t.dims(), [t.dims(), shape]);
    let (inner, count, len) = (rows.inner, rows.count(), shape.iter().product::<usize>());
    let sums = cpu::with_slice::<T, _>(op, t, |td| {
        let row = |r: usize| {
            let [st, ss] = rows.starts(r);
            (&td[st..st + inner], ss)
        };
        let mut acc = vec![0f64; len];
        if !rows.along[1] {
            // One target value per row: rows summed in parallel, then added in order.
            let per_row: Vec<(f64, usize)> = (0..count)
                .into_par_iter()
                .map(|r| {
                    let (x, ss) = row(r);
                    (cpu::sum_f64(x, |v| v.to_f64()), ss)
                })
                .collect();
            per_row.into_iter().for_each(|(s, ss)| acc[ss] += s);
            return Ok(acc);
        }
        // The target runs along each row: blocks of columns in parallel, each summing
        // every row's part in order. Rows start at multiples of `inner` in the target.
        let block = CHUNK.min(inner).max(1);
        let blocks: Vec<Vec<f64>> = (0..inner.div_ceil(block))
            .into_par_iter()
            .map(|b| {
                let cols = b * block..((b + 1) * block).min(inner);
                let mut part = vec![0f64; (len / inner) * cols.len()];
                for r in 0..count {
                    let (x, ss) = row(r);
                    let at = (ss / inner) * cols.len();
                    for (a, v) in part[at..at + cols.len()].iter_mut().zip(&x[cols.clone()]) {
                        *a += v.to_f64();
                    }
                }
                part
            })
            .collect();
        for (b, part) in blocks.iter().enumerate() {
            let width = block.min(inner - b * block);
            for (m, chunk) in part.chunks(width).enumerate() {
                let at = m * inner + b * block;
                acc[at..at + width].copy_from_slice(chunk);
            }
        }
        Ok(acc)
    })?;
    cpu::tensor(op, sums.into_iter().map(T::from_f64).collect(), shape)
}
