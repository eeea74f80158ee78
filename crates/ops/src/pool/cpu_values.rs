//! Max pooling's values alone, for graphs that never differentiate it (inference): no
//! argmax to track, so both separable passes are plain element-wise maxima over whole
//! rows of outputs, which the compiler vectorizes.

use std::ops::Range;

use candle_core::Tensor;
use rayon::prelude::*;

use super::params::Geom;
use crate::cpu::{self, Float};
use crate::error::Result;
use crate::shape::{outputs_in_bounds, split_phases};

const MAX: &str = "max_pool2d";

/// `best` after also seeing `v`: the greater, and a NaN once either is one (PyTorch's
/// max pooling propagates NaN). Written as one select, so loops of it vectorize.
#[inline(always)]
fn nan_max<T: Float>(best: T, v: T) -> T {
    if v > best || v.is_nan() {
        v
    } else {
        best
    }
}

/// Max-pool forward values, as [`max_forward`](super::cpu::max_forward)'s `y` (the
/// windows' maxima, NaN if a window holds one), separably: each input row's maxima over
/// every window's columns, then each window's maximum over its rows'. A column stride
/// above 1 first splits the row into its stride phases, so that one kernel column's
/// values for consecutive outputs are consecutive. Padding is never read (windows are
/// never empty: padding <= kernel / 2).
pub(super) fn max_values<T: Float>(g: &Geom, x: &Tensor) -> Result<Tensor> {
    let (hw, ohw) = (g.h * g.w, g.oh * g.ow);
    let (p, ow) = (&g.p, g.ow);
    let (sw, pw) = (p.stride[1], p.padding[1]);
    let phase_len = g.w.div_ceil(sw);
    let col_outputs: Vec<Range<usize>> = (0..p.kernel[1])
        .map(|kj| outputs_in_bounds(ow, sw, kj, pw, g.w))
        .collect();
    let row_outputs: Vec<Range<usize>> = (0..p.kernel[0])
        .map(|ki| outputs_in_bounds(g.oh, p.stride[0], ki, p.padding[0], g.h))
        .collect();
    let mut y = vec![T::NEG_INFINITY; g.planes * ohw];
    cpu::with_slice::<T, _>(MAX, x, |xs| {
        y.par_chunks_mut(ohw).zip(xs.par_chunks(hw)).for_each_init(
            || (Vec::new(), Vec::new()),
            |(row_max, phases): &mut (Vec<T>, Vec<T>), (y, xs)| {
                row_max.clear();
                row_max.resize(g.h * ow, T::NEG_INFINITY);
                phases.resize(sw * phase_len, T::NEG_INFINITY);
                for (row, best) in xs.chunks_exact(g.w).zip(row_max.chunks_exact_mut(ow)) {
                    let src: &[T] = if sw == 1 {
                        row
                    } else {
                        split_phases(row, sw, phases);
                        phases
                    };
                    for (kj, outs) in col_outputs.iter().enumerate() {
                        // Output ox reads row element ox * sw + kj - pw: phase `shift mod
                        // sw`, position ox + floor(shift / sw) in it.
                        let shift = kj as isize - pw as isize;
                        let phase = shift.rem_euclid(sw as isize) as usize;
                        let from = (outs.start as isize + shift.div_euclid(sw as isize)) as usize;
                        let vals = &src[phase * phase_len + from..][..outs.len()];
                        for (b, v) in best[outs.clone()].iter_mut().zip(vals) {
                            *b = nan_max(*b, *v);
                        }
                    }
                }
                for (oy, y) in y.chunks_exact_mut(ow).enumerate() {
                    for (ki, outs) in row_outputs.iter().enumerate() {
                        if outs.contains(&oy) {
                            let iy = oy * p.stride[0] + ki - p.padding[0];
                            for (b, v) in y.iter_mut().zip(&row_max[iy * ow..][..ow]) {
                                *b = nan_max(*b, *v);
                            }
                        }
                    }
                }
            },
        );
        Ok(())
    })?;
    cpu::tensor(MAX, y, (g.n, g.c, g.oh, g.ow))
}
