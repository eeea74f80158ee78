//! wick's CPU pooling kernels: planes in parallel, each output's window clipped to the
//! input (padding is never read).

use std::ops::Range;

use candle_core::Tensor;
use rayon::prelude::*;

use super::params::{Geom, MaxPoolOutput};
use crate::cpu::{self, Float};
use crate::error::Result;

const MAX: &str = "max_pool2d";
const AVG: &str = "avg_pool2d";

impl Geom {
    /// Elements of one input plane and of one output plane.
    fn plane_sizes(&self) -> (usize, usize) {
        (self.h * self.w, self.oh * self.ow)
    }

    /// Calls `f(o, rows, cols)` for each output element `o` of a plane (row-major), with the
    /// in-bounds input rows and columns of its window.
    fn for_each_window(&self, mut f: impl FnMut(usize, Range<usize>, Range<usize>)) {
        for oy in 0..self.oh {
            let rows = self.window(0, oy);
            for ox in 0..self.ow {
                f(oy * self.ow + ox, rows.clone(), self.window(1, ox));
            }
        }
    }

    /// The in-bounds input rows (`axis` 0) or columns (`axis` 1) of the window of output
    /// row or column `o`.
    fn window(&self, axis: usize, o: usize) -> Range<usize> {
        let (s, p, k) = (
            self.p.stride[axis],
            self.p.padding[axis],
            self.p.kernel[axis],
        );
        let len = [self.h, self.w][axis];
        let start = (o * s) as isize - p as isize;
        start.max(0) as usize..((start + k as isize).min(len as isize)) as usize
    }

    /// `1 / (kh * kw)`: average pooling divides by the whole window, padding included.
    fn avg_scale<T: Float>(&self) -> T {
        T::from_f64(1.0 / (self.p.kernel[0] * self.p.kernel[1]) as f64)
    }
}

/// The first maximum of `values(i)` for `i` in `range` (a NaN wins and ends the search),
/// and where it is.
#[inline]
fn first_max<T: Float>(range: Range<usize>, values: impl Fn(usize) -> T) -> (T, usize) {
    let (mut best, mut at) = (values(range.start), range.start);
    if best.is_nan() {
        return (best, at);
    }
    for i in range.start + 1..range.end {
        let v = values(i);
        if v > best || v.is_nan() {
            (best, at) = (v, i);
            if v.is_nan() {
                break;
            }
        }
    }
    (best, at)
}

/// Max-pool forward: the first maximum of each window in row-major order (a NaN wins and
/// ends the search), separably: first each input row's maximum over every window's
/// columns, then each window's maximum over its rows' results. The first row holding the
/// window's maximum, at its first column, is the row-major first maximum, so the values
/// and indices are the direct scan's. Windows are never empty (padding <= kernel / 2).
pub(super) fn max_forward<T: Float>(g: &Geom, x: &Tensor) -> Result<MaxPoolOutput> {
    let (hw, ohw) = g.plane_sizes();
    let ow = g.ow;
    let cols: Vec<Range<usize>> = (0..ow).map(|ox| g.window(1, ox)).collect();
    let rows: Vec<Range<usize>> = (0..g.oh).map(|oy| g.window(0, oy)).collect();
    let mut y = vec![T::ZERO; g.planes * ohw];
    let mut idx = vec![0u32; g.planes * ohw];
    cpu::with_slice::<T, _>(MAX, x, |xs| {
        y.par_chunks_mut(ohw)
            .zip(idx.par_chunks_mut(ohw))
            .zip(xs.par_chunks(hw))
            .for_each_init(
                || (Vec::new(), Vec::new()),
                |(row_max, row_col), ((y, idx), xs)| {
                    // Each input row's maximum over every window's columns.
                    row_max.resize(g.h * ow, T::ZERO);
                    row_col.resize(g.h * ow, 0usize);
                    for (iy, row) in xs.chunks_exact(g.w).enumerate() {
                        for (ox, c) in cols.iter().enumerate() {
                            let (v, at) = first_max(c.clone(), |i| row[i]);
                            row_max[iy * ow + ox] = v;
                            row_col[iy * ow + ox] = at;
                        }
                    }
                    for (oy, r) in rows.iter().enumerate() {
                        for ox in 0..ow {
                            let (v, iy) = first_max(r.clone(), |iy| row_max[iy * ow + ox]);
                            y[oy * ow + ox] = v;
                            idx[oy * ow + ox] = (iy * g.w + row_col[iy * ow + ox]) as u32;
                        }
                    }
                },
            );
        Ok(())
    })?;
    let shape = (g.n, g.c, g.oh, g.ow);
    Ok(MaxPoolOutput {
        y: cpu::tensor(MAX, y, shape)?,
        indices: cpu::tensor(MAX, idx, shape)?,
    })
}

/// Max-pool backward: each output gradient goes to the element its window chose.
pub(super) fn max_backward<T: Float>(
    g: &Geom,
    grad_y: &Tensor,
    indices: &Tensor,
    input_shape: &[usize],
) -> Result<Tensor> {
    let (hw, ohw) = g.plane_sizes();
    let mut dx = vec![T::ZERO; g.planes * hw];
    cpu::with_slice::<T, _>(MAX, grad_y, |gs| {
        cpu::with_slice::<u32, _>(MAX, indices, |is| {
            if let Some(bad) = is.iter().find(|&&i| i as usize >= hw) {
                return Err(crate::invalid!(
                    MAX,
                    "index {bad} is outside a {}x{} plane",
                    g.h,
                    g.w
                ));
            }
            dx.par_chunks_mut(hw)
                .zip(gs.par_chunks(ohw).zip(is.par_chunks(ohw)))
                .for_each(|(dx, (gs, is))| {
                    for (gv, &i) in gs.iter().zip(is) {
                        dx[i as usize] += *gv;
                    }
                });
            Ok(())
        })
    })?;
    cpu::tensor(MAX, dx, input_shape)
}

/// Average-pool forward: each window's sum over `kh * kw`.
pub(super) fn avg_forward<T: Float>(g: &Geom, x: &Tensor) -> Result<Tensor> {
    let scale = g.avg_scale::<T>();
    let y = per_plane(x, g.plane_sizes(), g.planes, |y, xs: &[T]| {
        g.for_each_window(|o, rows, cols| {
            let mut sum = T::ZERO;
            for iy in rows {
                for v in &xs[iy * g.w + cols.start..iy * g.w + cols.end] {
                    sum += *v;
                }
            }
            y[o] = sum * scale;
        })
    })?;
    cpu::tensor(AVG, y, (g.n, g.c, g.oh, g.ow))
}

/// Average-pool backward: each output gradient over `kh * kw`, added to every in-bounds
/// element of its window.
pub(super) fn avg_backward<T: Float>(
    g: &Geom,
    grad_y: &Tensor,
    input_shape: &[usize],
) -> Result<Tensor> {
    let (hw, ohw) = g.plane_sizes();
    let scale = g.avg_scale::<T>();
    let dx = per_plane(grad_y, (ohw, hw), g.planes, |dx, gs: &[T]| {
        g.for_each_window(|o, rows, cols| {
            let v = gs[o] * scale;
            for iy in rows {
                for d in &mut dx[iy * g.w + cols.start..iy * g.w + cols.end] {
                    *d += v;
                }
            }
        })
    })?;
    cpu::tensor(AVG, dx, input_shape)
}

/// `planes` output planes of `out_plane` elements, zeroed and then filled by `f` from the
/// matching plane of `t` (`in_plane` elements), the planes in parallel.
fn per_plane<T: Float>(
    t: &Tensor,
    (in_plane, out_plane): (usize, usize),
    planes: usize,
    f: impl Fn(&mut [T], &[T]) + Sync,
) -> Result<Vec<T>> {
    let mut out = vec![T::ZERO; planes * out_plane];
    cpu::with_slice::<T, _>(AVG, t, |ts| {
        out.par_chunks_mut(out_plane)
            .zip(ts.par_chunks(in_plane))
            .for_each(|(o, t)| f(o, t));
        Ok(())
    })?;
    Ok(out)
}
