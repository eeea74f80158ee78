//! Bias + activation: wick's CPU kernel against the device-generic path (candle's add
//! and activation ops), and its errors.

use candle_core::DType;
use wick_ops::activation::Activation;
use wick_ops::bias_activation::{bias_activation, bias_activation_backward};
use wick_ops::KernelPath;

use crate::common::*;

#[test]
fn cpu_kernel_matches_the_generic_path() {
    for kind in [Activation::Gelu, Activation::GeluTanh, Activation::Silu] {
        for dtype in [DType::F32, DType::F64] {
            let t = |seed, dims: &[usize]| {
                (rand_tensor(seed, dims) * 4.0)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap()
            };
            let (h, b, g) = (t(1, &[3, 7, 37]), t(2, &[37]), t(3, &[3, 7, 37]));
            let run = || {
                let y = bias_activation(kind, &h, &b).unwrap();
                (y, bias_activation_backward(kind, &g, &h, &b).unwrap())
            };
            let (y, (gh, gb)) = run();
            let (want_y, (want_gh, want_gb)) = KernelPath::Generic.scope(run);
            // candle's erf and tanh against wick's f32 lanes: a few ulp apart.
            let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
            let case = format!("{kind:?} {dtype:?}");
            assert_close(&format!("{case} y"), &y, &want_y, tol);
            assert_close(&format!("{case} grad h"), &gh, &want_gh, tol);
            assert_close(&format!("{case} grad b"), &gb, &want_gb, tol);
            assert_eq!(gb.dims(), [37]);
        }
    }
}

#[test]
fn bad_input_names_the_kernel_and_the_shapes() {
    let h = rand_tensor(1, &[4, 6]);
    let b = rand_tensor(2, &[5]);
    let kind = Activation::GeluTanh;
    assert_error_names(
        bias_activation(kind, &h, &b),
        &["BiasGELUTanh", "bias", "[5]", "[6]"],
    );
    let b6 = rand_tensor(2, &[6]);
    assert_error_names(
        bias_activation(Activation::Relu6, &h, &b6),
        &["ReLU6", "does not fuse with a bias"],
    );
    let b32 = b6.to_dtype(DType::F32).unwrap();
    assert_error_names(
        bias_activation(kind, &h, &b32),
        &["BiasGELUTanh", "the bias", "F32", "F64"],
    );
    let g = rand_tensor(3, &[4, 5]);
    assert_error_names(
        bias_activation_backward(kind, &g, &h, &b6),
        &["BiasGELUTanhBackward", "[4, 5]", "[4, 6]"],
    );
}
