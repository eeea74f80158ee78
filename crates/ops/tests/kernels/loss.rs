//! cross_entropy: PyTorch fixture, finite differences, label checks.

use crate::common::*;
use candle_core::{Device, Tensor};
use wick_ops::{cross_entropy, cross_entropy_backward};

#[test]
fn cross_entropy_matches_pytorch_fixture() {
    let f = Fixture::load("cross_entropy");
    let (logits, labels) = (f.t("logits"), f.t("labels"));
    for path in PATHS {
        let _on = path.enter();
        let loss = cross_entropy(logits, labels).unwrap();
        assert_eq!(loss.dims(), f.t("out").dims(), "the loss is 0-dim");
        assert_close(&format!("out {path:?}"), &loss, f.t("out"), 1e-12);
        let g = cross_entropy_backward(f.t("grad_out"), logits, labels).unwrap();
        assert_close(&format!("grad {path:?}"), &g, f.t("grad_logits"), 1e-12);
    }
}

#[test]
fn cross_entropy_gradient_matches_finite_differences() {
    let logits = (rand_tensor(1, &[4, 6]) * 3.0).unwrap();
    let labels = Tensor::new(&[0i64, 5, 2, 2], &Device::Cpu).unwrap();
    let g = Tensor::new(0.7f64, &Device::Cpu).unwrap();
    let grad = cross_entropy_backward(&g, &logits, &labels).unwrap();
    let num = numeric_grad(|l| cross_entropy(l, &labels).unwrap(), &logits, &g);
    assert_close("grad", &grad, &num, FD_TOL);
}

#[test]
fn label_outside_class_range_is_an_error() {
    let logits = rand_tensor(1, &[3, 4]);
    let labels = Tensor::new(&[0i64, 4, 1], &Device::Cpu).unwrap();
    assert_error_names(
        cross_entropy(&logits, &labels),
        &["cross_entropy", "label 4", "0..4", "labels [3]"],
    );
    let labels = Tensor::new(&[0i64, -1, 1], &Device::Cpu).unwrap();
    assert!(cross_entropy(&logits, &labels).is_err());
    let labels = Tensor::new(&[0i64, 1], &Device::Cpu).unwrap();
    assert_error_names(
        cross_entropy(&logits, &labels),
        &["labels must have shape [3]"],
    );
}

/// Float32 against float64 (see `precision.rs`), per row of logits `x` with `d = x - max`
/// (the subtraction: u|d|), `s = Σ exp(d)` (each term 2u + u|d|, then C - 1 additions),
/// `lse = ln s` (s's relative error, plus ln's 2u|lse|) and `log_softmax = d - lse` (one
/// more rounding). The loss is minus the mean of N picked values (N - 1 additions, 1/N and
/// the product); the gradient `(exp(log_softmax) - onehot) / N` adds exp's 2u, the
/// subtraction, and 1/N with its product.
#[test]
fn float32_is_within_rounding_error_bounds_of_float64() {
    use crate::precision::{assert_within_values as within, gamma, host, input, U};
    let (n, c) = (16, 10);
    for (case, offset, spread) in [("centred", 0.0, 4.0), ("large", 30.0, 8.0)] {
        let logits = input(1, &[n, c], offset, spread);
        let labels_values: Vec<u32> = (0..n as u32).map(|i| (i * 7) % c as u32).collect();
        let labels = Tensor::new(labels_values.as_slice(), &Device::Cpu).unwrap();
        let xs = host(&logits.f64);
        let (mut picked, mut e_picked) = (Vec::new(), Vec::new());
        let (mut grad, mut e_grad) = (Vec::new(), Vec::new());
        for (row, &label) in xs.chunks(c).zip(&labels_values) {
            let max = row.iter().cloned().fold(f64::MIN, f64::max);
            let d: Vec<f64> = row.iter().map(|x| x - max).collect();
            let s: f64 = d.iter().map(|d| d.exp()).sum();
            let lse = s.ln();
            let rel_s = gamma(c)
                + d.iter()
                    .map(|d| d.exp() / s * (U * d.abs() + 2.0 * U))
                    .sum::<f64>();
            let e_lse = rel_s + 2.0 * U * lse.abs();
            for (j, d) in d.iter().enumerate() {
                let log_p = d - lse;
                let e_log_p = U * d.abs() + e_lse + U * log_p.abs();
                let (p, onehot) = (log_p.exp(), f64::from(j == label as usize));
                let g = (p - onehot) / n as f64;
                grad.push(g);
                e_grad.push(
                    (p * (e_log_p + 2.0 * U) + U * (p - onehot).abs()) / n as f64
                        + 3.0 * U * g.abs(),
                );
                if j == label as usize {
                    picked.push(log_p);
                    e_picked.push(e_log_p);
                }
            }
        }
        let loss = -picked.iter().sum::<f64>() / n as f64;
        let bound = e_picked.iter().sum::<f64>() / n as f64
            + gamma(n + 2) * picked.iter().map(|v| v.abs()).sum::<f64>() / n as f64;
        let got = cross_entropy(&logits.f32, &labels).unwrap();
        within(
            &format!("cross entropy {case}"),
            &host(&got),
            &[loss],
            &[bound],
        );
        let one = Tensor::new(1f32, &Device::Cpu).unwrap();
        let g = cross_entropy_backward(&one, &logits.f32, &labels).unwrap();
        within(
            &format!("cross entropy gradient {case}"),
            &host(&g),
            &grad,
            &e_grad,
        );
    }
}
