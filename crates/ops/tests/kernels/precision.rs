//! Float32 precision against float64: the helpers of every family's precision tests.
//!
//! A precision test runs a kernel on float32 inputs and on the same values in float64
//! (every float32 is exact in float64), as PyTorch's op-level tests do, and holds each
//! float32 output element within a bound from a rounding-error analysis of the kernel's
//! arithmetic (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., ch. 2-4).
//! With `u = 2^-24`, float32's unit roundoff:
//! - one `+ - * / sqrt` rounds with relative error at most `u`; `exp` and `ln` (glibc's
//!   `expf`/`logf`, within 1 ulp) at most `2u`;
//! - a sum of `n` products, in any order (sequential, blocked, pairwise, split across
//!   threads, with or without fused multiply-adds), is within `γ_n · Σ|a_i b_i|` of the
//!   exact sum, `γ_n = n u / (1 - n u)`.
//!
//! The bounds come from the data (the same kernel run in float64 on `|inputs|` gives the
//! `Σ|a_i b_i|` of every output element), never from a tolerance tuned to pass. A kernel
//! that cancels large terms (batch norm in the expanded `x * scale + shift` form on inputs
//! whose mean is large next to their spread), a conv through Winograd or an FFT, or a
//! half-precision accumulation exceeds them. Each check prints how much of its bound the
//! largest error used (`--nocapture`).

use candle_core::{DType, Tensor};

use crate::common::rand_tensor;

/// Float32's unit roundoff, `2^-24`.
pub const U: f64 = f32::EPSILON as f64 / 2.0;

/// `γ_n = n u / (1 - n u)`: the relative error bound of `n` roundings in a row, and of a
/// sum of `n` products in any order.
pub fn gamma(n: usize) -> f64 {
    let nu = n as f64 * U;
    assert!(nu < 0.5, "γ_{n} is not a useful bound in float32");
    nu / (1.0 - nu)
}

/// The same deterministic values in float32 and in float64.
pub struct Input {
    /// The float32 input the kernel under test gets.
    pub f32: Tensor,
    /// The same values, exactly, in float64: the reference run's input.
    pub f64: Tensor,
}

/// Uniform values in `[offset - spread, offset + spread)`, rounded to float32.
pub fn input(seed: u64, shape: &[usize], offset: f64, spread: f64) -> Input {
    let t = ((rand_tensor(seed, shape) * spread).unwrap() + offset).unwrap();
    let f32 = t.to_dtype(DType::F32).unwrap();
    let f64 = f32.to_dtype(DType::F64).unwrap();
    Input { f32, f64 }
}

/// `|t|` in float64.
pub fn abs(t: &Tensor) -> Tensor {
    t.to_dtype(DType::F64).unwrap().abs().unwrap()
}

/// Every element of `t`, flattened, in float64.
pub fn host(t: &Tensor) -> Vec<f64> {
    wick_ops::compare::host_values(t).unwrap()
}

/// Holds every element of `got` (the float32 run) within `bound` of `exact` (the float64
/// run), and returns the largest `|got - exact| / bound`. A NaN anywhere fails.
pub fn assert_within(what: &str, got: &Tensor, exact: &Tensor, bound: &Tensor) -> f64 {
    assert_eq!(
        got.dtype(),
        DType::F32,
        "{what}: the run under test is float32"
    );
    assert_eq!(
        exact.dtype(),
        DType::F64,
        "{what}: the reference is float64"
    );
    assert_eq!(got.dims(), exact.dims(), "{what}: shapes");
    assert_eq!(got.dims(), bound.dims(), "{what}: bound's shape");
    assert_within_values(what, &host(got), &host(exact), &host(bound))
}

/// [`assert_within`] on flat values.
pub fn assert_within_values(what: &str, got: &[f64], exact: &[f64], bound: &[f64]) -> f64 {
    assert_eq!(got.len(), exact.len(), "{what}: lengths");
    assert_eq!(got.len(), bound.len(), "{what}: bound's length");
    let mut worst = (0.0f64, 0usize);
    for (i, ((g, e), b)) in got.iter().zip(exact).zip(bound).enumerate() {
        let err = (g - e).abs();
        assert!(
            err <= *b,
            "{what}[{i}]: float32 {g:e} vs float64 {e:e}: error {err:.3e} exceeds the \
             rounding-error bound {b:.3e}"
        );
        let used = if *b > 0.0 { err / b } else { 0.0 };
        if used > worst.0 {
            worst = (used, i);
        }
    }
    println!(
        "{what}: the largest error used {:.1}% of its bound (element {})",
        100.0 * worst.0,
        worst.1
    );
    worst.0
}
