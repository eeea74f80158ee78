//! Adam on the CPU in one pass: each element's parameter, gradient and two moments read
//! once and the three results written once, in parallel chunks compiled for the widest
//! vectors (`cpu::run_wide`), with PyTorch's single-tensor Adam formula and its scalars
//! (`1 - beta`, the step size) rounded from f64. candle's ops took about a dozen passes,
//! each a new tensor.

use std::mem::MaybeUninit;

use candle_core::Tensor;
use rayon::prelude::*;

use super::params::AdamParams;
use crate::cpu::{self, Float, WideKernel, CHUNK};
use crate::error::Result;

const OP: &str = "adam";

/// The step's constants in the element type.
#[derive(Clone, Copy)]
struct Constants<T> {
    /// `1 - lr · weight_decay` (decoupled) or `weight_decay` (added to the gradient); 0
    /// and 1 without decay.
    decay: T,
    decoupled: bool,
    beta2: T,
    /// `1 - beta1` and `1 - beta2`, rounded from f64 as PyTorch's Python scalars are (1 -
    /// beta2 taken in f32 would be 1.3e-5 off for 0.999).
    one_minus_beta1: T,
    one_minus_beta2: T,
    eps: T,
    step_size: T,
    bias2_sqrt: T,
}

/// One chunk's update: `out` holds (parameter, m, v) slices, `inp` the old ones and `g`.
struct Chunk<'a, T> {
    c: Constants<T>,
    w: &'a [T],
    g: &'a [T],
    m: Option<&'a [T]>,
    v: Option<&'a [T]>,
    out: (Slots<'a, T>, Slots<'a, T>, Slots<'a, T>),
}

/// Output slots, each written once (no zeroing pass before).
type Slots<'a, T> = &'a mut [MaybeUninit<T>];

impl<T: Float> WideKernel for Chunk<'_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let (c, (pw, pm, pv)) = (self.c, self.out);
        for j in 0..self.w.len() {
            let (mut w, mut d) = (self.w[j], self.g[j]);
            if c.decoupled {
                w *= c.decay;
            } else {
                d += w * c.decay;
            }
            let (m0, v0) = (
                self.m.map_or(T::ZERO, |m| m[j]),
                self.v.map_or(T::ZERO, |v| v[j]),
            );
            let m = m0 + (d - m0) * c.one_minus_beta1;
            let v = v0 * c.beta2 + c.one_minus_beta2 * d * d;
            pm[j].write(m);
            pv[j].write(v);
            pw[j].write(w - m / (v.sqrt() / c.bias2_sqrt + c.eps) * c.step_size);
        }
    }
}

/// One Adam step of CPU tensors of one float dtype (shapes checked by the caller); new
/// tensors for the parameter and both moments.
pub(super) fn step<T: Float>(
    (param, grad, exp_avg, exp_avg_sq): (&Tensor, &Tensor, Option<&Tensor>, Option<&Tensor>),
    step: u64,
    p: &AdamParams,
) -> Result<(Tensor, Tensor, Tensor)> {
    let k = p.step_constants(step);
    let c = Constants {
        decay: T::from_f64(k.decay),
        decoupled: k.decoupled,
        beta2: T::from_f64(k.beta2),
        one_minus_beta1: T::from_f64(k.one_minus_beta1),
        one_minus_beta2: T::from_f64(k.one_minus_beta2),
        eps: T::from_f64(k.eps),
        step_size: T::from_f64(k.step_size),
        bias2_sqrt: T::from_f64(k.bias2_sqrt),
    };
    let n = param.elem_count();
    let (mut w1, mut m1, mut v1): (Vec<T>, Vec<T>, Vec<T>) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (sw, sm, sv) = (
        &mut w1.spare_capacity_mut()[..n],
        &mut m1.spare_capacity_mut()[..n],
        &mut v1.spare_capacity_mut()[..n],
    );
    cpu::with_slices::<T, _>(OP, param, grad, |w, g| {
        cpu::with_opt_slice::<T, _>(OP, exp_avg, |m| {
            cpu::with_opt_slice::<T, _>(OP, exp_avg_sq, |v| {
                let outs = sw.par_chunks_mut(CHUNK).zip(sm.par_chunks_mut(CHUNK));
                let outs = outs.zip(sv.par_chunks_mut(CHUNK));
                outs.enumerate().for_each(|(i, ((pw, pm), pv))| {
                    let r = i * CHUNK..i * CHUNK + pw.len();
                    cpu::run_wide(Chunk {
                        c,
                        w: &w[r.clone()],
                        g: &g[r.clone()],
                        m: m.map(|m| &m[r.clone()]),
                        v: v.map(|v| &v[r.clone()]),
                        out: (pw, pm, pv),
                    });
                });
                Ok(())
            })
        })
    })?;
    // SAFETY: the chunks above cover all n slots of each vector (w, g and the outputs
    // have n elements; the caller checked the shapes), and Chunk::run writes every slot.
    unsafe {
        w1.set_len(n);
        m1.set_len(n);
        v1.set_len(n);
    }
    let dims = param.dims();
    Ok((
        cpu::tensor(OP, w1, dims)?,
        cpu::tensor(OP, m1, dims)?,
        cpu::tensor(OP, v1, dims)?,
    ))
}
