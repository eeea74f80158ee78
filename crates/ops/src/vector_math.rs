//! Branch-free versions of libm's functions, for loops that should vectorize: written
//! with selects, multiplies and bit casts only, so that inside
//! [`vectorized`](crate::cpu::vectorized) each runs 8 or 16 lanes at a time where a call
//! to libm runs one.

/// `exp(x)` in f32 within 1 ulp of the exact value over the whole range (0.96 at worst) (Cephes'
/// `expf`: `x = n·ln 2 + r` with `|r| ≤ ln 2 / 2`, a degree-6 polynomial for `exp(r)`,
/// `2ⁿ` from the exponent bits in two halves so that results below `2⁻¹²⁶` come out
/// subnormal). `+inf` above 88.72, 0 below -103.97, NaN for NaN.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split so that n·LN2_HI is exact for |n| < 2¹⁵.
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5·2²³ rounds to the nearest integer (|y| < 2²²).
    const ROUND: f32 = 12_582_912.0;
    // Comparisons with NaN are false: NaN passes both selects.
    let x = if x < -104.0 { -104.0 } else { x };
    let x = if x > 88.8 { 88.8 } else { x };
    let shifted = x * LOG2E + ROUND;
    let n = shifted - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = (p * (r * r) + r) + 1.0;
    // `shifted` lies in [2²³, 2²⁴), where one unit in the last place is 1: its bits
    // count n up from ROUND's (a float-to-int conversion would not vectorize as well).
    let n = shifted.to_bits() as i32 - ROUND.to_bits() as i32;
    let half = n >> 1;
    let scale = |k: i32| f32::from_bits(((k + 127) as u32) << 23);
    y * scale(half) * scale(n - half)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Units in the last place between `got` and the exact `want`, at `want`'s scale
    /// (subnormals at the smallest normal's).
    fn ulps(got: f32, want: f64) -> f64 {
        let ulp = (want.abs().max(f32::MIN_POSITIVE as f64) as f32).to_bits();
        let step = f32::from_bits(ulp + 1) as f64 - f32::from_bits(ulp) as f64;
        (got as f64 - want).abs() / step
    }

    #[test]
    fn exp_is_within_one_ulp_of_f64_over_its_whole_range() {
        let mut worst = (0.0, 0.0f32);
        let mut x = -103.9f32;
        while x < 88.7 {
            let e = ulps(exp_f32(x), (x as f64).exp());
            if e > worst.0 {
                worst = (e, x);
            }
            x += 0.000_37;
        }
        assert!(worst.0 <= 1.0, "{} ulp at x = {}", worst.0, worst.1);
    }

    #[test]
    fn exp_keeps_ieee_special_values() {
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(-200.0), 0.0);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(89.0), f32::INFINITY);
        assert!(exp_f32(f32::NAN).is_nan());
        let tiny = exp_f32(-100.0);
        assert!(
            tiny > 0.0 && tiny < f32::MIN_POSITIVE,
            "subnormal, got {tiny:e}"
        );
        assert!(ulps(tiny, (-100f64).exp()) <= 2.0);
    }
}
