//! wick's CPU pooling kernels: planes in parallel, each output's window clipped to the
//! input (padding is never read).

use std::ops::Range;

use candle_core::Tensor;
use rayon::prelude::*;

use super::{Geom, MaxPoolOutput};
use crate::cpu::{self, Float};
use crate::error::{OpError, Result};

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
        let [kh, kw] = self.p.kernel;
        let clip = |o: usize, s: usize, p: usize, k: usize, len: usize| {
            let start = (o * s) as isize - p as isize;
            start.max(0) as usize..((start + k as isize).min(len as isize)) as usize
        };
        for oy in 0..self.oh {
            let rows = clip(oy, self.p.stride[0], self.p.padding[0], kh, self.h);
            for ox in 0..self.ow {
                let cols = clip(ox, self.p.stride[1], self.p.padding[1], kw, self.w);
                f(oy * self.ow + ox, rows.clone(), cols);
            }
        }
    }

    /// `1 / (kh * kw)`: average pooling divides by the whole window, padding included.
    fn avg_scale<T: Float>(&self) -> T {
        T::from_f64(1.0 / (self.p.kernel[0] * self.p.kernel[1]) as f64)
    }
}

/// Max-pool forward: the first maximum of each window (a NaN wins and ends the search).
pub(super) fn max_forward<T: Float>(g: &Geom, x: &Tensor) -> Result<MaxPoolOutput> {
    let (hw, ohw) = g.plane_sizes();
    let mut y = vec![T::ZERO; g.planes * ohw];
    let mut idx = vec![0u32; g.planes * ohw];
    cpu::with_slice::<T, _>(MAX, x, |xs| {
        y.par_chunks_mut(ohw)
            .zip(idx.par_chunks_mut(ohw))
            .zip(xs.par_chunks(hw))
            .for_each(|((y, idx), xs)| {
                g.for_each_window(|o, rows, cols| {
                    let mut best = T::NEG_INFINITY;
                    let mut best_i = rows.start * g.w + cols.start;
                    'window: for iy in rows {
                        for ix in cols.clone() {
                            let v = xs[iy * g.w + ix];
                            if v > best || v.is_nan() {
                                best = v;
                                best_i = iy * g.w + ix;
                                if v.is_nan() {
                                    break 'window;
                                }
                            }
                        }
                    }
                    y[o] = best;
                    idx[o] = best_i as u32;
                })
            });
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
                return Err(OpError::invalid(
                    MAX,
                    format!("index {bad} is outside a {}x{} plane", g.h, g.w),
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
    let (hw, ohw) = g.plane_sizes();
    let scale = g.avg_scale::<T>();
    let mut y = vec![T::ZERO; g.planes * ohw];
    cpu::with_slice::<T, _>(AVG, x, |xs| {
        y.par_chunks_mut(ohw)
            .zip(xs.par_chunks(hw))
            .for_each(|(y, xs)| {
                g.for_each_window(|o, rows, cols| {
                    let mut sum = T::ZERO;
                    for iy in rows {
                        for v in &xs[iy * g.w + cols.start..iy * g.w + cols.end] {
                            sum += *v;
                        }
                    }
                    y[o] = sum * scale;
                })
            });
        Ok(())
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
    let mut dx = vec![T::ZERO; g.planes * hw];
    cpu::with_slice::<T, _>(AVG, grad_y, |gs| {
        dx.par_chunks_mut(hw)
            .zip(gs.par_chunks(ohw))
            .for_each(|(dx, gs)| {
                g.for_each_window(|o, rows, cols| {
                    let v = gs[o] * scale;
                    for iy in rows {
                        for d in &mut dx[iy * g.w + cols.start..iy * g.w + cols.end] {
                            *d += v;
                        }
                    }
                })
            });
        Ok(())
    })?;
    cpu::tensor(AVG, dx, input_shape)
}
