//! The activations' f32 kernels: one function of `(x, g)` per activation, run over a
//! tensor by [`wide_f32`] inside the wide-vector wrapper, with the constants and the f32
//! sigmoid they share.

use candle_core::Tensor;

use crate::cpu;
use crate::error::Result;
use crate::vector_math::exp_f32;

pub(crate) const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
pub(crate) const GELU_TANH_C: f64 = 0.044715;

/// `out[i] = f(x[i], g[i])` (`g[i]` = 0 without `g`) over f32 CPU tensors, each chunk
/// compiled for the CPU's widest vectors ([`cpu::run_wide`]).
pub(crate) fn wide_f32<F: Fn(f32, f32) -> f32 + Sync + Copy>(
    op: &'static str,
    x: &Tensor,
    g: Option<&Tensor>,
    f: F,
) -> Result<Tensor> {
    use rayon::prelude::*;
    let mut out = vec![0f32; x.elem_count()];
    cpu::with_slice::<f32, _>(op, x, |xs| {
        let mut body = |gs: Option<&[f32]>| {
            out.par_chunks_mut(cpu::CHUNK)
                .enumerate()
                .for_each(|(i, o)| {
                    let a = &xs[i * cpu::CHUNK..][..o.len()];
                    let b = gs.map(|gs| &gs[i * cpu::CHUNK..][..o.len()]);
                    cpu::run_wide(Lanes {
                        out: o,
                        x: a,
                        g: b,
                        f,
                    })
                });
        };
        match g {
            Some(g) => cpu::with_slice::<f32, _>(op, g, |gs| {
                body(Some(gs));
                Ok(())
            }),
            None => {
                body(None);
                Ok(())
            }
        }
    })?;
    cpu::tensor(op, out, x.dims())
}

/// One chunk of [`wide_f32`]: its loop inlined into the wide-vector wrapper.
struct Lanes<'a, F> {
    out: &'a mut [f32],
    x: &'a [f32],
    g: Option<&'a [f32]>,
    f: F,
}

impl<F: Fn(f32, f32) -> f32> cpu::WideKernel for Lanes<'_, F> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let f = self.f;
        match self.g {
            Some(g) => {
                for ((o, a), b) in self.out.iter_mut().zip(self.x).zip(g) {
                    *o = f(*a, *b);
                }
            }
            None => {
                for (o, a) in self.out.iter_mut().zip(self.x) {
                    *o = f(*a, 0.0);
                }
            }
        }
    }
}

/// The f32 activations [`wide_f32`] runs, as `(x, g)` functions (`g`: the output
/// gradient, 0 in a forward). Function items marked `inline(always)`, not closures: a
/// closure this large is called rather than inlined into the loop, which then does not
/// vectorize.
pub(crate) mod lanes {
    use super::{sigmoid_f32, GELU_TANH_C, SQRT_2_OVER_PI};

    #[inline(always)]
    pub fn sigmoid(x: f32, _: f32) -> f32 {
        sigmoid_f32(x)
    }

    #[inline(always)]
    pub fn silu(x: f32, _: f32) -> f32 {
        x * sigmoid_f32(x)
    }

    #[inline(always)]
    pub fn silu_backward(x: f32, g: f32) -> f32 {
        let s = sigmoid_f32(x);
        g * (s * (1.0 + x * (1.0 - s)))
    }

    /// `Φ(x)` (the standard normal CDF) and `φ(x)`'s exponent: `erfc(|x|/√2)` by
    /// Numerical Recipes' Chebyshev fit (`erfcc`, relative error under 1.2e-7 for every
    /// argument), so the negative tail `Φ(x) = erfc(-x/√2)/2` keeps its relative
    /// precision; the positive side is `1 - erfc(x/√2)/2`.
    #[inline(always)]
    fn normal_cdf(x: f32) -> f32 {
        let z = x.abs() * std::f32::consts::FRAC_1_SQRT_2;
        let t = 1.0 / (1.0 + 0.5 * z);
        let poly = -1.265_512_2
            + t * (1.000_023_7
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_204
                                    + t * (1.488_515_9
                                        + t * (-0.822_152_23 + t * 0.170_872_77))))))));
        let half_erfc = 0.5 * t * crate::vector_math::exp_f32(poly - z * z);
        if x < 0.0 {
            half_erfc
        } else {
            1.0 - half_erfc
        }
    }

    /// GELU's erf form, `x·Φ(x)`.
    #[inline(always)]
    pub fn gelu(x: f32, _: f32) -> f32 {
        x * normal_cdf(x)
    }

    /// `Φ(x) + x·φ(x)`, with `φ(x) = e^{-x²/2}/√(2π)`.
    #[inline(always)]
    pub fn gelu_backward(x: f32, g: f32) -> f32 {
        let pdf = 0.398_942_3 * crate::vector_math::exp_f32(-0.5 * x * x);
        g * (normal_cdf(x) + x * pdf)
    }

    /// `2u`, with `u = √(2/π)·(x + 0.044715·x³)` the argument of GELU's tanh form.
    #[inline(always)]
    fn two_u(x: f32) -> f32 {
        2.0 * SQRT_2_OVER_PI as f32 * (x + GELU_TANH_C as f32 * x * x * x)
    }

    /// `x/2 · (1 + tanh u) = x · σ(2u)`: no cancellation in the negative tail.
    #[inline(always)]
    pub fn gelu_tanh(x: f32, _: f32) -> f32 {
        x * sigmoid_f32(two_u(x))
    }

    /// With `t = tanh u`: `(1 + t)/2 = σ(2u)` and `(1 - t²)/2 = 2·σ(2u)·σ(-2u)`.
    #[inline(always)]
    pub fn gelu_tanh_backward(x: f32, g: f32) -> f32 {
        let u2 = two_u(x);
        let (s, s_neg) = (sigmoid_f32(u2), sigmoid_f32(-u2));
        let d_inner = (SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_TANH_C * (x * x) as f64)) as f32;
        g * (s + 2.0 * x * s * s_neg * d_inner)
    }
}

/// `1 / (1 + e^-x)` in f32, within 3 ulp.
#[inline(always)]
pub(crate) fn sigmoid_f32(x: f32) -> f32 {
    1.0 / (1.0 + exp_f32(-x))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// |a - b| in units of b's f32 ulp.
    fn ulps(a: f32, b: f64) -> f64 {
        let b32 = b as f32;
        let ulp = (f32::from_bits(b32.abs().to_bits() + 1) - b32.abs()) as f64;
        (a as f64 - b).abs() / ulp
    }

    #[test]
    fn f32_exp_and_sigmoid_stay_within_their_ulp_bounds() {
        let (mut worst_exp, mut worst_sigmoid) = (0f64, 0f64);
        for i in 0..=2_000_000 {
            let x = -87.0 + 175.0 * i as f32 / 2_000_000.0;
            worst_exp = worst_exp.max(ulps(exp_f32(x), (x as f64).exp()));
            worst_sigmoid =
                worst_sigmoid.max(ulps(sigmoid_f32(x), 1.0 / (1.0 + (-(x as f64)).exp())));
        }
        assert!(worst_exp <= 2.0, "exp: {worst_exp} ulp");
        assert!(worst_sigmoid <= 3.0, "sigmoid: {worst_sigmoid} ulp");
        assert!(exp_f32(f32::NAN).is_nan() && sigmoid_f32(f32::NAN).is_nan());
        assert_eq!(sigmoid_f32(f32::INFINITY), 1.0);
        assert!(sigmoid_f32(f32::NEG_INFINITY) < 1e-37);
        assert_eq!(exp_f32(0.0), 1.0);
    }
}
