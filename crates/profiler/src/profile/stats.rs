//! Statistics over timed samples.

/// `amount` per second in units of 10⁹ (GFLOP/s, GB/s) over `sec`; 0 when no time was
/// measured.
pub(crate) fn giga_per_sec(amount: u64, sec: f64) -> f64 {
    if sec > 0.0 {
        amount as f64 / sec / 1e9
    } else {
        0.0
    }
}

/// The median of `values` (the mean of the middle two for an even count; 0 when empty).
pub(crate) fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_even_and_empty_sets() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[7.0]), 7.0);
        assert_eq!(median(&[]), 0.0);
    }
}
