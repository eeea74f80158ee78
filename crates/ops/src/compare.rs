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

/// The median and the largest of a set of errors (NaN for both when it is empty; the
/// largest is NaN when any error is).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// The middle error (the upper one of an even count).
    pub median: f64,
    /// The largest error.
    pub worst: f64,
}

impl Spread {
    /// No error at all (as a floor: none).
    pub const ZERO: Spread = Spread {
        median: 0.0,
        worst: 0.0,
    };

    /// The spread of `errors`.
    pub fn of(errors: impl IntoIterator<Item = f64>) -> Spread {
        let mut v: Vec<f64> = errors.into_iter().collect();
        if v.is_empty() {
            return Spread {
                median: f64::NAN,
                worst: f64::NAN,
            };
        }
        v.sort_by(f64::total_cmp);
        let worst = if v.iter().any(|e| e.is_nan()) {
            f64::NAN
        } else {
            v[v.len() - 1]
        };
        Spread {
            median: v[v.len() / 2],
            worst,
        }
    }
}

/// How far a model's entries are from float64 in wick and in PyTorch's float32, as the
/// comparisons against PyTorch judge them: by the median and the worst relative error.
/// Its `Display` gives both spreads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ErrorSpreads {
    /// wick's relative errors against float64.
    pub wick: Spread,
    /// PyTorch float32's relative errors against float64.
    pub pytorch: Spread,
}

impl ErrorSpreads {
    /// The spreads of `errors`, one `(wick, PyTorch float32)` pair per entry.
    pub fn new(errors: &[(f64, f64)]) -> ErrorSpreads {
        ErrorSpreads {
            wick: Spread::of(errors.iter().map(|e| e.0)),
            pytorch: Spread::of(errors.iter().map(|e| e.1)),
        }
    }

    /// Whether wick's median and worst are each at most `k` times PyTorch's, PyTorch's
    /// taken as at least `floor` (its median and worst: entries PyTorch's float32
    /// computes exactly would otherwise allow no error at all). A NaN never passes.
    pub fn within(&self, k: f64, floor: Spread) -> bool {
        let (w, p) = (self.wick, self.pytorch);
        w.median <= k * p.median.max(floor.median) && w.worst <= k * p.worst.max(floor.worst)
    }
}

impl std::fmt::Display for ErrorSpreads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (w, p) = (self.wick, self.pytorch);
        write!(
            f,
            "wick median {:.2e} worst {:.2e}; PyTorch float32 median {:.2e} worst {:.2e}",
            w.median, w.worst, p.median, p.worst
        )
    }
}

/// `max(a, b)`, NaN when either is (`f64::max` drops a NaN, so a fold with it would let
/// a NaN error pass every bound).
pub fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
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
            (nan_max(m, d), scale.max(y.abs()))
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

    #[test]
    fn spreads_take_the_median_and_the_worst_and_a_nan_fails() {
        let s = Spread::of([3.0, 1.0, 2.0, 10.0]);
        assert_eq!((s.median, s.worst), (3.0, 10.0));
        assert!(Spread::of([]).median.is_nan());
        let nan = Spread::of([1.0, -f64::NAN, 2.0]);
        assert!(nan.worst.is_nan());
        let none = Spread {
            median: 0.0,
            worst: 0.0,
        };
        let errors = [(2e-7, 1e-7), (4e-7, 1e-7), (8e-7, 2e-7)];
        let spreads = ErrorSpreads::new(&errors);
        assert_eq!(
            spreads.wick,
            Spread {
                median: 4e-7,
                worst: 8e-7
            }
        );
        assert!(spreads.within(4.0, none));
        assert!(!spreads.within(3.0, none));
        // PyTorch exact: only the floor allows wick an error.
        let exact = ErrorSpreads::new(&[(1e-8, 0.0), (2e-8, 0.0)]);
        assert!(!exact.within(4.0, none));
        assert!(exact.within(
            4.0,
            Spread {
                median: 1e-8,
                worst: 1e-8
            }
        ));
        let with_nan = ErrorSpreads::new(&[(f64::NAN, 1.0), (0.0, 1.0)]);
        assert!(!with_nan.within(4.0, none));
        assert_eq!(
            spreads.to_string(),
            "wick median 4.00e-7 worst 8.00e-7; PyTorch float32 median 1.00e-7 worst 2.00e-7"
        );
    }
}
