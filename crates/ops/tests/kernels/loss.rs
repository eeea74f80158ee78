//! cross_entropy: PyTorch fixture, finite differences, label checks.

use crate::common::*;
use candle_core::{Device, Tensor};
use wick_ops::{cross_entropy, cross_entropy_backward};

#[test]
fn cross_entropy_matches_pytorch_fixture() {
    let f = Fixture::load("cross_entropy");
    let (logits, labels) = (f.t("logits"), f.t("labels"));
    let loss = cross_entropy(logits, labels).unwrap();
    assert_eq!(loss.dims(), f.t("out").dims(), "the loss is 0-dim");
    assert_close("out", &loss, f.t("out"), 1e-12);
    let g = cross_entropy_backward(f.t("grad_out"), logits, labels).unwrap();
    assert_close("grad_logits", &g, f.t("grad_logits"), 1e-12);
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
    let msg = cross_entropy(&logits, &labels).unwrap_err().to_string();
    assert!(
        msg.contains("cross_entropy")
            && msg.contains("label 4")
            && msg.contains("0..4")
            && msg.contains("labels [3]"),
        "{msg}"
    );
    let labels = Tensor::new(&[0i64, -1, 1], &Device::Cpu).unwrap();
    assert!(cross_entropy(&logits, &labels).is_err());
    let labels = Tensor::new(&[0i64, 1], &Device::Cpu).unwrap();
    let msg = cross_entropy(&logits, &labels).unwrap_err().to_string();
    assert!(msg.contains("labels must have shape [3]"), "{msg}");
}
