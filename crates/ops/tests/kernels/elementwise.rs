//! relu and add: PyTorch fixtures (relu's gradient at 0 is 0) and finite differences.

use crate::common::*;
use wick_ops::{add, relu, relu_backward};

#[test]
fn relu_matches_pytorch_fixture_with_zero_gradient_at_zero() {
    for path in PATHS {
        let _on_path = path.enter();
        relu_fixture_here();
    }
}

fn relu_fixture_here() {
    let f = Fixture::load("relu_with_zeros");
    let x = f.t("x");
    assert_close("out", &relu(x).unwrap(), f.t("out"), 0.0);
    let dx = relu_backward(f.t("grad_out"), x).unwrap();
    assert_close("grad_x", &dx, f.t("grad_x"), 0.0);
    // At x == 0 exactly, the gradient is 0 (candle's autograd gives 1).
    let xs = x.flatten_all().unwrap().to_vec1::<f64>().unwrap();
    let ds = dx.flatten_all().unwrap().to_vec1::<f64>().unwrap();
    let zeros: Vec<_> = xs.iter().zip(&ds).filter(|(x, _)| **x == 0.0).collect();
    assert!(!zeros.is_empty());
    assert!(zeros.iter().all(|(_, d)| **d == 0.0));
}

#[test]
fn relu_gradient_matches_finite_differences() {
    let x = rand_tensor(1, &[2, 3, 4]);
    let g = rand_tensor(2, &[2, 3, 4]);
    let dx = relu_backward(&g, &x).unwrap();
    assert_close(
        "relu",
        &dx,
        &numeric_grad(|x| relu(x).unwrap(), &x, &g),
        FD_TOL,
    );
}

#[test]
fn add_matches_pytorch_fixture() {
    let f = Fixture::load("add_broadcast_free");
    for path in PATHS {
        let _on_path = path.enter();
        assert_close("out", &add(f.t("a"), f.t("b")).unwrap(), f.t("out"), 1e-15);
    }
    // The gradient of a + b is the upstream gradient for both inputs.
    assert_close("grad_a", f.t("grad_out"), f.t("grad_a"), 0.0);
    assert_close("grad_b", f.t("grad_out"), f.t("grad_b"), 0.0);
}

#[test]
fn add_of_different_shapes_is_an_error_naming_both() {
    assert_error_names(
        add(&rand_tensor(1, &[2, 3]), &rand_tensor(2, &[3, 2])),
        &["add", "[2, 3]", "[3, 2]"],
    );
}

/// NaN passes through ReLU as in PyTorch: a ReLU that maps NaN to 0 hides a diverging run
/// behind a finite loss. Its gradient passes too (PyTorch's `threshold_backward` zeroes
/// only where `x <= 0`).
#[test]
fn relu_passes_nan_through_forward_and_backward_as_pytorch() {
    for path in PATHS {
        let _on_path = path.enter();
        for dtype in [candle_core::DType::F32, candle_core::DType::F64] {
            let x = candle_core::Tensor::new(
                &[f64::NAN, -1.0, 0.0, 2.0, f64::INFINITY, f64::NEG_INFINITY],
                &candle_core::Device::Cpu,
            )
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
            let y: Vec<f64> = relu(&x)
                .unwrap()
                .to_dtype(candle_core::DType::F64)
                .unwrap()
                .to_vec1()
                .unwrap();
            assert!(y[0].is_nan(), "{path:?} {dtype:?}: relu(NaN) = {}", y[0]);
            assert_eq!(&y[1..], &[0.0, 0.0, 2.0, f64::INFINITY, 0.0]);
            let g = x.ones_like().unwrap();
            let dx: Vec<f64> = relu_backward(&g, &x)
                .unwrap()
                .to_dtype(candle_core::DType::F64)
                .unwrap()
                .to_vec1()
                .unwrap();
            assert_eq!(dx, [1.0, 0.0, 0.0, 1.0, 1.0, 0.0], "{path:?} {dtype:?}");
        }
    }
}
