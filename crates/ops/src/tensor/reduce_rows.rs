//! The CPU kernels of the reductions over whole rows (f32 and f64): each row of the
//! input reduced in one pass (two for logsumexp and var), sums in f64 in a fixed order,
//! and each gradient written in one pass.

use std::mem::MaybeUninit;

use candle_core::Tensor;
use rayon::prelude::*;

use super::reduction::Reduction;
use crate::cpu::{self, Float, CHUNK};
use crate::error::Result;

/// `(rows, group)` when a reduction over `dims` of `shape` reduces whole rows: every
/// reduced dimension longer than 1 comes after every kept one longer than 1. `None`
/// otherwise, or when a group is empty.
pub(crate) fn trailing_group(shape: &[usize], dims: &[usize]) -> Option<(usize, usize)> {
    let long = |d: &usize| shape[*d] > 1;
    let last_kept = (0..shape.len())
        .filter(|d| !dims.contains(d))
        .filter(long)
        .max();
    let first_reduced = dims.iter().copied().filter(long).min();
    if let (Some(k), Some(r)) = (last_kept, first_reduced) {
        if k > r {
            return None;
        }
    }
    let group: usize = dims.iter().map(|&d| shape[d]).product();
    (group > 0).then(|| (shape.iter().product::<usize>() / group, group))
}

/// Rows of `group` values per parallel task: about [`CHUNK`] elements.
fn rows_per_task(group: usize) -> usize {
    (CHUNK / group.max(1)).max(1)
}

/// An error for argmax and argmin, which are not sums over rows.
fn not_a_row_reduction(op: Reduction) -> Result<()> {
    match op {
        Reduction::Argmax | Reduction::Argmin => Err(crate::error::OpError::invalid(
            op.op_name(),
            "is not a row reduction (it has its own kernel and no gradient)",
        )),
        _ => Ok(()),
    }
}

/// The maximum (`MAX`) or minimum of a non-empty row; NaN if any value is NaN. Eight
/// interleaved running extremes (selects, which vectorize) and a NaN flag.
#[inline(always)]
fn extreme<T: Float, const MAX: bool>(r: &[T]) -> T {
    let pick = |m: T, v: T| match MAX {
        true => {
            if v > m {
                v
            } else {
                m
            }
        }
        false => {
            if v < m {
                v
            } else {
                m
            }
        }
    };
    let mut lanes = [r[0]; 8];
    let mut nan = false;
    let mut blocks = r.chunks_exact(8);
    for b in &mut blocks {
        for (m, &v) in lanes.iter_mut().zip(b) {
            nan |= v.is_nan();
            *m = pick(*m, v);
        }
    }
    for (m, &v) in lanes.iter_mut().zip(blocks.remainder()) {
        nan |= v.is_nan();
        *m = pick(*m, v);
    }
    if nan {
        return T::from_f64(f64::NAN);
    }
    lanes.iter().fold(lanes[0], |m, &v| pick(m, v))
}

/// The reduction `op` of one non-empty row.
#[inline(always)]
fn reduce_row<T: Float>(op: Reduction, correction: usize, r: &[T]) -> T {
    let n = r.len() as f64;
    let sum = |r: &[T]| cpu::sum_f64(r, |v| v.to_f64());
    match op {
        Reduction::Sum => T::from_f64(sum(r)),
        Reduction::Mean => T::from_f64(sum(r) / n),
        Reduction::Amax => extreme::<T, true>(r),
        Reduction::Amin => extreme::<T, false>(r),
        Reduction::LogSumExp => {
            let m = extreme::<T, true>(r);
            // An infinite or NaN maximum shifts by 0: all -inf gives -inf, +inf gives
            // +inf, NaN stays NaN, as PyTorch's.
            let m = if m.abs().to_f64() < f64::INFINITY {
                m
            } else {
                T::ZERO
            };
            let s = cpu::sum_f64(r, move |v| (v - m).exp().to_f64());
            T::from_f64(s.ln() + m.to_f64())
        }
        Reduction::Var => {
            let mean = sum(r) / n;
            let ss = cpu::sum_f64(r, move |v| (v.to_f64() - mean).powi(2));
            T::from_f64(ss / (n - correction as f64))
        }
        Reduction::Argmax | Reduction::Argmin => T::from_f64(f64::NAN),
    }
}

/// The reduction of each row of `group` values of `x` (not argmax or argmin), sums in
/// f64.
pub(crate) fn reduce_rows<T: Float>(
    op: Reduction,
    correction: usize,
    x: &Tensor,
    group: usize,
    out_shape: &[usize],
) -> Result<Tensor> {
    not_a_row_reduction(op)?;
    let name = op.op_name();
    let per_task = rows_per_task(group);
    let rows = x.elem_count() / group;
    let mut out = Vec::<T>::with_capacity(rows);
    cpu::with_slice::<T, _>(name, x, |xd| {
        out.spare_capacity_mut()[..rows]
            .par_chunks_mut(per_task)
            .zip(xd.par_chunks(group * per_task))
            .for_each(|(o, x)| cpu::vectorized(|| forward_task(op, correction, o, x, group)));
        Ok(())
    })?;
    // SAFETY: each task wrote one value per row of its part, and the parts cover `rows`.
    unsafe { out.set_len(rows) };
    cpu::tensor(name, out, out_shape)
}

/// One task's rows of [`reduce_rows`], always inlined so that the loops compile inside
/// [`vectorized`](cpu::vectorized)'s wide-vector wrapper.
#[inline(always)]
fn forward_task<T: Float>(
    op: Reduction,
    correction: usize,
    o: &mut [MaybeUninit<T>],
    x: &[T],
    group: usize,
) {
    for (o, r) in o.iter_mut().zip(x.chunks(group)) {
        o.write(reduce_row(op, correction, r));
    }
}

/// `o[j] = f(x[j])` over one row.
#[inline(always)]
fn write_row<T: Copy>(o: &mut [MaybeUninit<T>], x: &[T], f: impl Fn(T) -> T) {
    for (o, v) in o.iter_mut().zip(x) {
        o.write(f(*v));
    }
}

/// The gradient of a row reduction for one row: `g` the row's output gradient, `y` its
/// output (amax, amin, logsumexp), `x` its input (all but sum and mean, which write
/// every slot of `o` without reading it).
#[inline(always)]
fn reduce_row_backward<T: Float>(
    op: Reduction,
    correction: usize,
    o: &mut [MaybeUninit<T>],
    g: T,
    x: &[T],
    y: T,
) {
    let n = o.len() as f64;
    match op {
        Reduction::Sum | Reduction::Mean => {
            let v = match op {
                Reduction::Sum => g,
                _ => T::from_f64(g.to_f64() / n),
            };
            o.iter_mut().for_each(|o| {
                o.write(v);
            });
        }
        Reduction::Amax | Reduction::Amin => {
            let ties = x.iter().filter(|&&v| v == y).count() as f64;
            let share = T::from_f64(g.to_f64() / ties);
            write_row(o, x, move |v| if v == y { share } else { T::ZERO });
        }
        Reduction::LogSumExp => write_row(o, x, move |v| (v - y).exp() * g),
        Reduction::Var => {
            let mean = cpu::sum_f64(x, |v| v.to_f64()) / n;
            let k = 2.0 * g.to_f64() / (n - correction as f64);
            write_row(o, x, move |v| T::from_f64((v.to_f64() - mean) * k));
        }
        Reduction::Argmax | Reduction::Argmin => write_row(o, x, move |_| T::ZERO),
    }
}

/// One task's rows of [`reduce_rows_backward`]: `g` and `y` one value per row, `x` the
/// rows' inputs where the reduction reads them. Always inlined, as [`forward_task`].
#[inline(always)]
fn backward_task<T: Float>(
    op: Reduction,
    correction: usize,
    o: &mut [MaybeUninit<T>],
    x: Option<&[T]>,
    g: &[T],
    y: &[T],
) {
    let group = o.len() / g.len().max(1);
    for (r, o) in o.chunks_mut(group).enumerate() {
        let x = x.map_or(&[][..], |x| &x[r * group..(r + 1) * group]);
        reduce_row_backward(op, correction, o, g[r], x, y[r]);
    }
}

/// The gradient of a row reduction over an input of `shape`: `gy` holds one value per
/// row, `x` the forward's input (all but sum and mean read it) and `y` its output
/// (amax, amin and logsumexp read it).
pub(crate) fn reduce_rows_backward<T: Float>(
    op: Reduction,
    correction: usize,
    gy: &Tensor,
    x: Option<&Tensor>,
    y: Option<&Tensor>,
    group: usize,
    shape: &[usize],
) -> Result<Tensor> {
    not_a_row_reduction(op)?;
    let name = op.op_name();
    let len: usize = shape.iter().product();
    let per_task = rows_per_task(group);
    let mut out = Vec::<T>::with_capacity(len);
    let slots = &mut out.spare_capacity_mut()[..len];
    let mut run = |gd: &[T], xd: Option<&[T]>, yd: &[T]| {
        slots
            .par_chunks_mut(group * per_task)
            .enumerate()
            .for_each(|(task, o)| {
                let (first, rows) = (task * per_task, o.len() / group);
                let x = xd.map(|x| &x[first * group..(first + rows) * group]);
                let (g, y) = (&gd[first..first + rows], &yd[first..first + rows]);
                cpu::vectorized(|| backward_task(op, correction, o, x, g, y))
            })
    };
    cpu::with_slice::<T, _>(name, gy, |gd| match x {
        // A sum's or a mean's gradient reads neither the input nor the output.
        None => {
            run(gd, None, gd);
            Ok(())
        }
        Some(x) => cpu::with_slice::<T, _>(name, x, |xd| {
            cpu::with_slice::<T, _>(name, y.unwrap_or(gy), |yd| {
                run(gd, Some(xd), yd);
                Ok(())
            })
        }),
    })?;
    // SAFETY: the chunks of `group` cover the `len` slots, each written above.
    unsafe { out.set_len(len) };
    cpu::tensor(name, out, shape)
}
