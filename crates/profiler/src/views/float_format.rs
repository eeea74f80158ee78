//! C++'s default float formatting (`std::cout << x`, printf's `%g`): 6 significant
//! digits, scientific notation below 1e-4 or from 1e6 on, trailing zeros removed. SINGA's
//! profiler prints its times this way (`1.73722e-05`, `0.000612724`); Rust's `{}` does not.

/// Formats `v` as C++'s default stream formatting does (`%g`, precision 6).
pub fn cpp_float(v: f64) -> String {
    if v.is_nan() {
        return if v.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // Rounding to 6 significant digits decides the exponent, as in C.
    let sci = format!("{v:.5e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", strip_zeros(mantissa), exp.abs())
    } else {
        let decimals = (5 - exp) as usize;
        strip_zeros(&format!("{v:.decimals$}")).to_string()
    }
}

/// Removes trailing zeros after a decimal point, and the point itself if nothing follows.
fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::cpp_float;

    #[test]
    fn matches_singa_documented_values() {
        for s in [
            "1.73722e-05",
            "0.000612724",
            "0.0409127",
            "0.114813",
            "3.4176e-06",
            "0.00148837",
            "0.00056836",
            "9.95494e-05",
        ] {
            let v: f64 = s.parse().unwrap();
            assert_eq!(cpp_float(v), s);
        }
    }

    #[test]
    fn rounds_to_six_significant_digits_and_switches_notation_like_c() {
        assert_eq!(cpp_float(0.0), "0");
        assert_eq!(cpp_float(1.0), "1");
        assert_eq!(cpp_float(123456.0), "123456");
        assert_eq!(cpp_float(1234567.0), "1.23457e+06");
        assert_eq!(cpp_float(0.0001), "0.0001");
        assert_eq!(cpp_float(0.000099999949), "9.99999e-05");
        assert_eq!(cpp_float(0.000099999951), "0.0001");
        assert_eq!(cpp_float(2.5e-10), "2.5e-10");
        assert_eq!(cpp_float(-0.125), "-0.125");
        assert_eq!(cpp_float(1e100), "1e+100");
        assert_eq!(cpp_float(999999.5), "1e+06");
    }
}
