//! A convolution [`Epilogue`](super::Epilogue)'s data on the CPU, applied to each block of
//! output right after its GEMM writes it.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::params::Geom;
use crate::cpu::{self, Float};

/// An [`Epilogue`](super::Epilogue)'s data on the CPU.
pub(super) struct CpuEpilogue<'a, T> {
    pub(super) bias: Option<Vec<T>>,
    pub(super) residual: Option<&'a [T]>,
    pub(super) relu: bool,
}

impl<T: Float> CpuEpilogue<'_, T> {
    pub(super) fn is_empty(&self) -> bool {
        self.bias.is_none() && self.residual.is_none() && !self.relu
    }

    /// Applies the epilogue to `row`: pixels `p0..` of image `n`'s channel `c`.
    #[inline]
    pub(super) fn apply_row(&self, g: &Geom, n: usize, c: usize, p0: usize, row: &mut [T]) {
        let relu = |v: T| {
            if self.relu && v <= T::ZERO {
                T::ZERO
            } else {
                v
            }
        };
        let b = self.bias.as_ref().map_or(T::ZERO, |b| b[c]);
        match self.residual {
            Some(r) => {
                let r = &r[(n * g.c_out + c) * g.pixels() + p0..][..row.len()];
                for (v, r) in row.iter_mut().zip(r) {
                    *v = relu(*v + b + *r);
                }
            }
            None => row.iter_mut().for_each(|v| *v = relu(*v + b)),
        }
    }

    /// Applies the epilogue to `out`, the whole planes of image `n`'s channels from `c0` on.
    pub(super) fn apply(&self, g: &Geom, n: usize, c0: usize, out: &mut [T]) {
        for (i, plane) in out.chunks_mut(g.pixels()).enumerate() {
            self.apply_row(g, n, c0 + i, 0, plane);
        }
    }

    /// Columns `p0..p0 + cols` of `planes` (image `n`'s channels from `c0` on), which a
    /// GEMM has just written: the epilogue, over the threads by channel when `parallel`
    /// (the GEMM used every thread; the epilogue must too). Splitting the GEMM into
    /// column blocks to run the epilogue while each is in L2 was measured slower: the
    /// smaller GEMMs lose more than the epilogue gains.
    pub(super) fn apply_columns(
        &self,
        g: &Geom,
        n: usize,
        c0: usize,
        planes: &mut [MaybeUninit<T>],
        (p0, cols): (usize, usize),
        parallel: bool,
    ) {
        let one = |(i, plane): (usize, &mut [MaybeUninit<T>])| {
            // SAFETY: the GEMM before this call wrote columns p0..p0 + cols of every row.
            let row = unsafe { cpu::assume_init_mut(&mut plane[p0..p0 + cols]) };
            self.apply_row(g, n, c0 + i, p0, row);
        };
        if parallel && cpu::threads() > 1 {
            planes.par_chunks_mut(g.pixels()).enumerate().for_each(one);
        } else {
            planes.chunks_mut(g.pixels()).enumerate().for_each(one);
        }
    }
}
