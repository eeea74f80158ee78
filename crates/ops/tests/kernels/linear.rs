//! linear: PyTorch fixture and finite differences.

use crate::common::*;
use wick_ops::linear::*;

#[test]
fn linear_matches_pytorch_fixture() {
    let f = Fixture::load("linear");
    let (x, w, b) = (f.t("x"), f.t("weight"), f.t("bias"));
    assert_close("out", &linear(x, w, Some(b)).unwrap(), f.t("out"), 1e-9);
    let g = linear_backward(f.t("grad_out"), x, w, true).unwrap();
    assert_close("grad_x", &g.x, f.t("grad_x"), 1e-9);
    assert_close("grad_weight", &g.weight, f.t("grad_weight"), 1e-9);
    assert_close(
        "grad_bias",
        g.bias.as_ref().unwrap(),
        f.t("grad_bias"),
        1e-9,
    );
}

#[test]
fn linear_gradients_match_finite_differences() {
    let (x, w, b) = (
        rand_tensor(1, &[3, 5]),
        rand_tensor(2, &[4, 5]),
        rand_tensor(3, &[4]),
    );
    let g = rand_tensor(4, &[3, 4]);
    let grads = linear_backward(&g, &x, &w, true).unwrap();
    assert_close(
        "dx",
        &grads.x,
        &numeric_grad(|x| linear(x, &w, Some(&b)).unwrap(), &x, &g),
        FD_TOL,
    );
    assert_close(
        "dw",
        &grads.weight,
        &numeric_grad(|w| linear(&x, w, Some(&b)).unwrap(), &w, &g),
        FD_TOL,
    );
    let db = grads.bias.unwrap();
    assert_close(
        "db",
        &db,
        &numeric_grad(|b| linear(&x, &w, Some(b)).unwrap(), &b, &g),
        FD_TOL,
    );
}

#[test]
fn feature_mismatch_is_an_error_naming_shapes() {
    let msg = linear(&rand_tensor(1, &[3, 5]), &rand_tensor(2, &[4, 6]), None)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("linear") && msg.contains("[3, 5]") && msg.contains("[4, 6]"),
        "{msg}"
    );
}
