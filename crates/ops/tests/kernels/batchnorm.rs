//! batch_norm: PyTorch fixtures (outputs, gradients, running statistics) and finite differences.

use crate::common::*;
use candle_core::Tensor;
use wick_ops::batchnorm::*;

fn params(f: &Fixture) -> BatchNorm2dParams {
    BatchNorm2dParams {
        eps: f.f64("eps"),
        momentum: f.f64("momentum"),
    }
}

#[test]
fn training_mode_matches_pytorch_fixture() {
    for path in PATHS {
        path.scope(training_fixture_here);
    }
}

fn training_fixture_here() {
    let f = Fixture::load("batchnorm_train");
    assert!(f.bool("training"));
    let p = params(&f);
    let (x, w, b) = (f.t("x"), f.t("weight"), f.t("bias"));
    let out = batch_norm_train(x, w, b, f.t("running_mean"), f.t("running_var"), &p).unwrap();
    assert_close("out", &out.y, f.t("out"), 1e-9);
    assert_close(
        "running_mean",
        &out.running_mean,
        f.t("running_mean_after"),
        1e-9,
    );
    assert_close(
        "running_var",
        &out.running_var,
        f.t("running_var_after"),
        1e-9,
    );
    let g = batch_norm_train_backward(f.t("grad_out"), x, w, &out.mean, &out.inv_std).unwrap();
    assert_close("grad_x", &g.x, f.t("grad_x"), 1e-9);
    assert_close("grad_weight", &g.weight, f.t("grad_weight"), 1e-9);
    assert_close("grad_bias", &g.bias, f.t("grad_bias"), 1e-9);
}

#[test]
fn inference_mode_matches_pytorch_fixture() {
    let f = Fixture::load("batchnorm_eval");
    assert!(!f.bool("training"));
    let p = params(&f);
    let (x, w, b, rm, rv) = (
        f.t("x"),
        f.t("weight"),
        f.t("bias"),
        f.t("running_mean"),
        f.t("running_var"),
    );
    for path in PATHS {
        let _on_path = path.enter();
        let y = batch_norm_eval(x, w, b, rm, rv, &p).unwrap();
        assert_close(&format!("out {path:?}"), &y, f.t("out"), 1e-9);
        let g = batch_norm_eval_backward(f.t("grad_out"), x, w, rm, rv, &p).unwrap();
        assert_close("grad_x", &g.x, f.t("grad_x"), 1e-9);
        assert_close("grad_weight", &g.weight, f.t("grad_weight"), 1e-9);
        assert_close("grad_bias", &g.bias, f.t("grad_bias"), 1e-9);
    }
}

/// Checks the analytic gradients of `fwd(x, w, b)` against central differences,
/// one input at a time with the other two held fixed.
fn assert_matches_finite_differences(
    grads: &BatchNormGrads,
    fwd: impl Fn(&Tensor, &Tensor, &Tensor) -> Tensor,
    [x, w, b]: [&Tensor; 3],
    g: &Tensor,
) {
    let dx = numeric_grad(|x| fwd(x, w, b), x, g);
    let dw = numeric_grad(|w| fwd(x, w, b), w, g);
    let db = numeric_grad(|b| fwd(x, w, b), b, g);
    assert_close("dx", &grads.x, &dx, FD_TOL);
    assert_close("dw", &grads.weight, &dw, FD_TOL);
    assert_close("db", &grads.bias, &db, FD_TOL);
}

#[test]
fn training_gradients_match_finite_differences() {
    let p = BatchNorm2dParams::default();
    let shape = [3, 2, 4, 3];
    let (x, w, b) = (
        rand_tensor(1, &shape),
        rand_tensor(2, &[2]),
        rand_tensor(3, &[2]),
    );
    let (rm, rv) = (
        rand_tensor(4, &[2]),
        (rand_tensor(5, &[2]).abs().unwrap() + 0.5).unwrap(),
    );
    let g = rand_tensor(6, &shape);
    let fwd =
        |x: &Tensor, w: &Tensor, b: &Tensor| batch_norm_train(x, w, b, &rm, &rv, &p).unwrap().y;
    let out = batch_norm_train(&x, &w, &b, &rm, &rv, &p).unwrap();
    let grads = batch_norm_train_backward(&g, &x, &w, &out.mean, &out.inv_std).unwrap();
    assert_matches_finite_differences(&grads, fwd, [&x, &w, &b], &g);
}

#[test]
fn inference_gradients_match_finite_differences() {
    let p = BatchNorm2dParams::default();
    let shape = [2, 3, 3, 4];
    let (x, w, b) = (
        rand_tensor(11, &shape),
        rand_tensor(12, &[3]),
        rand_tensor(13, &[3]),
    );
    let (rm, rv) = (
        rand_tensor(14, &[3]),
        (rand_tensor(15, &[3]).abs().unwrap() + 0.5).unwrap(),
    );
    let g = rand_tensor(16, &shape);
    let grads = batch_norm_eval_backward(&g, &x, &w, &rm, &rv, &p).unwrap();
    let fwd = |x: &Tensor, w: &Tensor, b: &Tensor| batch_norm_eval(x, w, b, &rm, &rv, &p).unwrap();
    assert_matches_finite_differences(&grads, fwd, [&x, &w, &b], &g);
}

#[test]
fn training_forward_leaves_its_inputs_untouched() {
    let p = BatchNorm2dParams::default();
    let (x, w, b) = (
        rand_tensor(1, &[2, 2, 3, 3]),
        rand_tensor(2, &[2]),
        rand_tensor(3, &[2]),
    );
    let (rm, rv) = (
        rand_tensor(4, &[2]),
        (rand_tensor(5, &[2]).abs().unwrap() + 0.5).unwrap(),
    );
    let before = (rm.to_vec1::<f64>().unwrap(), rv.to_vec1::<f64>().unwrap());
    let out = batch_norm_train(&x, &w, &b, &rm, &rv, &p).unwrap();
    assert_eq!(
        before,
        (rm.to_vec1::<f64>().unwrap(), rv.to_vec1::<f64>().unwrap())
    );
    assert_ne!(before.0, out.running_mean.to_vec1::<f64>().unwrap());
    assert!(out.y.is_contiguous());
}

#[test]
fn mismatched_channels_are_errors_naming_shapes() {
    let p = BatchNorm2dParams::default();
    let x = rand_tensor(1, &[2, 3, 4, 4]);
    let c2 = rand_tensor(2, &[2]);
    let c3 = rand_tensor(3, &[3]);
    let msg = batch_norm_train(&x, &c2, &c3, &c3, &c3, &p)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("batch_norm")
            && msg.contains("weight")
            && msg.contains("[2]")
            && msg.contains("[2, 3, 4, 4]"),
        "{msg}"
    );
    let one = rand_tensor(4, &[1, 3, 1, 1]);
    let msg = batch_norm_train(&one, &c3, &c3, &c3, &c3, &p)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("more than one value per channel"), "{msg}");
}
