//! Comparing two tensors as wick's tests and numerical checks do: in f64, on the host,
//! with any NaN on either side counting as an infinite difference (never a silent pass).

use candle_core::{DType, Tensor};

use crate::error::{CandleContext, Result};

const OP: &str = "compare";

/// The values of `t` as f64 on the host, in row-major order; errors name `op`.
pub(crate) fn host_f64(op: &'static str, t: &Tensor) -> Result<Vec<f64>> {
    t.to_dtype(DType::F64)
        .ctx(op)?
        .flatten_all()
        .ctx(op)?
        .to_vec1::<f64>()
        .ctx(op)
}

/// `n` deterministic values in [-1, 1) from `seed` (xorshift), the inputs of wick's
/// numerical checks and tests.
pub fn uniform(seed: u64, n: usize) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect()
}

/// The values of `t` as f64 on the host, in row-major order (for checks and tests).
pub fn host_values(t: &Tensor) -> Result<Vec<f64>> {
    host_f64(OP, t)
}

/// The bit patterns of an f32 tensor's values (any shape), for checks that two runs agree
/// to the bit.
pub fn f32_bits(t: &Tensor) -> Result<Vec<u32>> {
    let v = t.flatten_all().ctx(OP)?.to_vec1::<f32>().ctx(OP)?;
    Ok(v.iter().map(|x| x.to_bits()).collect())
}

/// `max |a - b|` over all elements (NaN where either side has a NaN the other lacks);
/// the shapes must agree.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> Result<f64> {
    Ok(diff_and_scale(a, b)?.0)
}

/// `max |actual - expected| / max |expected|`: the largest difference relative to the
/// expected tensor's scale (an absolute difference where `expected` is all zeros).
pub fn max_rel_diff(actual: &Tensor, expected: &Tensor) -> Result<f64> {
    let (diff, scale) = diff_and_scale(actual, expected)?;
    Ok(if scale > 0.0 { diff / scale } else { diff })
}

/// [`max_abs_diff`] of host values (the tests' float64 copies of tensors); NaN, which
/// passes no tolerance, when the lengths differ or one side has a NaN the other lacks.
pub fn max_abs_diff_values(actual: &[f64], expected: &[f64]) -> f64 {
    if actual.len() != expected.len() {
        return f64::NAN;
    }
    values_diff_and_scale(actual, expected).0
}

/// [`max_rel_diff`] of host values (the tests' float64 copies of tensors); NaN, which
/// passes no tolerance, when the lengths differ.
pub fn max_rel_diff_values(actual: &[f64], expected: &[f64]) -> f64 {
    if actual.len() != expected.len() {
        return f64::NAN;
    }
    let (diff, scale) = values_diff_and_scale(actual, expected);
    if scale > 0.0 {
        diff / scale
    } else {
        diff
    }
}

/// `(max |a - b|, max |b|)` in one pass over both tensors' host values.
fn diff_and_scale(a: &Tensor, b: &Tensor) -> Result<(f64, f64)> {
    crate::shape::same(OP, "left", a.dims(), "right", b.dims())?;
    let (a, b) = (host_f64(OP, a)?, host_f64(OP, b)?);
    Ok(values_diff_and_scale(&a, &b))
}

/// `(max |a - b|, max |b|)` of host values (NaN where one side has a NaN the other lacks).
fn values_diff_and_scale(a: &[f64], b: &[f64]) -> (f64, f64) {
    a.iter()
        .zip(b)
        .fold((0.0, 0.0), |(m, scale): (f64, f64), (x, y)| {
            let d = if x.is_nan() && y.is_nan() {
                0.0
            } else {
                (x - y).abs()
            };
            let m = if d.is_nan() || m.is_nan() {
                f64::NAN
            } else {
                m.max(d)
            };
            (m, scale.max(y.abs()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn t(v: &[f32]) -> Tensor {
        Tensor::new(v, &Device::Cpu).unwrap()
    }

    #[test]
    fn differences_are_measured_and_nan_never_passes() {
        assert_eq!(max_abs_diff_values(&[1.0, -2.0], &[1.5, -2.0]), 0.5);
        assert!(max_abs_diff_values(&[1.0, f64::NAN], &[1.0, 2.0]).is_nan());
        assert!(max_abs_diff_values(&[1.0], &[1.0, 2.0]).is_nan());
        assert_eq!(max_abs_diff(&t(&[1.0, 2.0]), &t(&[1.0, 2.5])).unwrap(), 0.5);
        assert_eq!(
            max_rel_diff(&t(&[1.0, 3.0]), &t(&[2.0, 4.0])).unwrap(),
            0.25
        );
        assert_eq!(max_rel_diff(&t(&[0.5]), &t(&[0.0])).unwrap(), 0.5);
        assert!(max_abs_diff(&t(&[f32::NAN, 1.0]), &t(&[0.0, 1.0]))
            .unwrap()
            .is_nan());
        assert!(max_abs_diff(&t(&[1.0, 0.0]), &t(&[1.0, f32::NAN]))
            .unwrap()
            .is_nan());
        assert_eq!(max_abs_diff(&t(&[f32::NAN]), &t(&[f32::NAN])).unwrap(), 0.0);
        assert!(max_abs_diff(&t(&[1.0]), &t(&[1.0, 2.0])).is_err());
    }
}
