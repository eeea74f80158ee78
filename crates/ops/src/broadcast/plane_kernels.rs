//! CPU kernels for the broadcasts of convolutional nets: one operand constant over each
//! image plane (squeeze-excitation's `[N, C, 1, 1]`, a layer scale's `[C, 1, 1]`, a
//! per-channel bias). Each plane of the large operand meets one value of the small one.

use candle_core::Tensor;
use rayon::prelude::*;

use super::op::BinaryOp;
use crate::cpu::{self, Float};
use crate::error::Result;

/// How a small operand broadcasts over a large one's planes.
pub(crate) struct Planes {
    /// Elements per plane (the trailing dimensions the small operand has as 1).
    pub inner: usize,
    /// Per plane of the large operand, the index of its value in the small one.
    pub index: Vec<usize>,
}

/// `Some` when `small` broadcasts to `big` by being constant over `big`'s trailing
/// dimensions (at least one element per plane), each leading dimension equal or 1.
pub(crate) fn planes(big: &[usize], small: &[usize]) -> Option<Planes> {
    if small.len() > big.len() || big.is_empty() {
        return None;
    }
    let pad = big.len() - small.len();
    let dim = |i: usize| if i < pad { 1 } else { small[i - pad] };
    let mut split = big.len();
    while split > 0 && dim(split - 1) == 1 && big[split - 1] != 1 {
        split -= 1;
    }
    while split > 0 && dim(split - 1) == 1 && big[split - 1] == 1 {
        split -= 1;
    }
    if split == big.len() || (0..split).any(|i| dim(i) != big[i] && dim(i) != 1) {
        return None;
    }
    let inner: usize = big[split..].iter().product();
    let lead = &big[..split];
    let count: usize = lead.iter().product();
    // Row-major strides of the small operand over the leading dimensions (0 where 1).
    let mut strides = vec![0; split];
    let mut s = 1;
    for i in (0..split).rev() {
        strides[i] = if dim(i) == 1 { 0 } else { s };
        s *= dim(i);
    }
    let index = (0..count)
        .map(|mut p| {
            let mut at = 0;
            for i in (0..split).rev() {
                at += (p % lead[i]) * strides[i];
                p /= lead[i];
            }
            at
        })
        .collect();
    Some(Planes { inner, index })
}

/// `big op small` (`small_first`: `small op big`) over the planes.
pub(crate) fn forward<T: Float>(
    op: BinaryOp,
    big: &Tensor,
    small: &Tensor,
    small_first: bool,
    p: &Planes,
) -> Result<Tensor> {
    let name = op.name();
    let mut out = vec![T::ZERO; big.elem_count()];
    cpu::with_slices::<T, _>(name, big, small, |bs, ss| {
        out.par_chunks_mut(p.inner)
            .zip(bs.par_chunks(p.inner))
            .zip(p.index.par_iter())
            .for_each(|((o, b), &i)| {
                let s = ss[i];
                match (op, small_first) {
                    (BinaryOp::Add, _) => o.iter_mut().zip(b).for_each(|(o, b)| *o = *b + s),
                    (BinaryOp::Mul, _) => o.iter_mut().zip(b).for_each(|(o, b)| *o = *b * s),
                    (BinaryOp::Sub, false) => o.iter_mut().zip(b).for_each(|(o, b)| *o = *b - s),
                    (BinaryOp::Sub, true) => o.iter_mut().zip(b).for_each(|(o, b)| *o = s - *b),
                    (BinaryOp::Div, false) => o.iter_mut().zip(b).for_each(|(o, b)| *o = *b / s),
                    (BinaryOp::Div, true) => o.iter_mut().zip(b).for_each(|(o, b)| *o = s / *b),
                }
            });
        Ok(())
    })?;
    cpu::tensor(name, out, big.dims())
}

/// Per value of the small operand (`small_len` of them), the sum over its planes of
/// `f(plane of a, plane of b)`, each plane's sum in `T`, the planes' in f64.
pub(crate) fn reduce_planes<T: Float>(
    name: &'static str,
    a: &Tensor,
    b: Option<&Tensor>,
    small_len: usize,
    p: &Planes,
    shape: &[usize],
) -> Result<Tensor> {
    let sums: Vec<T> = cpu::with_slice::<T, _>(name, a, |xa| match b {
        Some(b) => cpu::with_slice::<T, _>(name, b, |xb| {
            Ok(xa
                .par_chunks(p.inner)
                .zip(xb.par_chunks(p.inner))
                .map(|(a, b)| a.iter().zip(b).fold(T::ZERO, |s, (a, b)| s + *a * *b))
                .collect())
        }),
        None => Ok(xa
            .par_chunks(p.inner)
            .map(|a| a.iter().fold(T::ZERO, |s, v| s + *v))
            .collect()),
    })?;
    let mut acc = vec![0f64; small_len];
    for (s, &i) in sums.iter().zip(&p.index) {
        acc[i] += s.to_f64();
    }
    cpu::tensor(name, acc.into_iter().map(T::from_f64).collect(), shape)
}
