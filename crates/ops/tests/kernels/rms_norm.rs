//! RMS norm over the last dimension (`F.rms_norm`, `nn.RMSNorm`): wick's CPU kernel
//! against the generic path, in f32 against f64, and against finite differences
//! (PyTorch's values are checked in `tier.rs`).

use candle_core::{DType, Tensor};
use wick_ops::{norm, KernelPath};

use crate::common::*;

/// One value per row, a short row, a row longer than a task's chunk, and a rank-4 input.
/// (With one value per row the input gradient is `g·eps/(x² + eps)^1.5`, the difference
/// of two values within float32's rounding of each other: compared in f64 only.)
const SHAPES: [&[usize]; 4] = [&[6, 1], &[3, 5], &[2, 3, 4100], &[2, 3, 4, 6]];

/// `(y, dx, dw)` for an input, output gradient and optional weight.
fn run(x: &Tensor, g: &Tensor, w: Option<&Tensor>, eps: f64) -> Vec<Tensor> {
    let y = norm::rms_norm(x, w, eps).unwrap();
    let grads = norm::rms_norm_backward(g, x, w, eps).unwrap();
    assert!(grads.bias.is_none(), "RMS norm has no bias");
    [Some(y), Some(grads.input), grads.weight]
        .into_iter()
        .flatten()
        .collect()
}

#[test]
fn cpu_kernel_matches_the_generic_path() {
    for dims in SHAPES {
        let d = *dims.last().unwrap();
        let dtypes: &[DType] = if d == 1 {
            &[DType::F64]
        } else {
            &[DType::F32, DType::F64]
        };
        for &dtype in dtypes {
            let t = |seed, s: &[usize]| rand_tensor(seed, s).to_dtype(dtype).unwrap();
            // An offset mean, which RMS norm keeps (layer norm would remove it).
            let x = (t(1, dims) * 3.0).unwrap().affine(1.0, 0.5).unwrap();
            let (g, w) = (t(2, dims), t(3, &[d]));
            for weight in [Some(&w), None] {
                let got = run(&x, &g, weight, 1e-6);
                let want = KernelPath::Generic.scope(|| run(&x, &g, weight, 1e-6));
                assert_eq!(got.len(), want.len());
                let tol = if dtype == DType::F32 { 2e-5 } else { 1e-12 };
                for (i, (a, e)) in got.iter().zip(&want).enumerate() {
                    let case = format!("{dims:?} {dtype:?} weight {} output {i}", weight.is_some());
                    assert_close(&case, a, e, tol);
                }
            }
        }
    }
}

#[test]
fn float32_is_as_close_to_float64_as_its_rounding() {
    let dims = [4, 7, 384];
    let x = rand_tensor(5, &dims).affine(2.0, 1.0).unwrap();
    let g = rand_tensor(6, &dims);
    let w = rand_tensor(7, &[384]);
    let want = run(&x, &g, Some(&w), 1e-6);
    let f32 = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
    let got = run(&f32(&x), &f32(&g), Some(&f32(&w)), 1e-6);
    for (i, (a, e)) in got.iter().zip(&want).enumerate() {
        let a = a.to_dtype(DType::F64).unwrap();
        assert_close(&format!("output {i}"), &a, e, 2e-6);
    }
}

#[test]
fn gradients_match_finite_differences() {
    let dims = [3, 4, 5];
    let x = rand_tensor(9, &dims);
    let g = rand_tensor(10, &dims);
    let w = rand_tensor(11, &[5]);
    let grads = norm::rms_norm_backward(&g, &x, Some(&w), 1e-5).unwrap();
    let through_x = |x: &Tensor| norm::rms_norm(x, Some(&w), 1e-5).unwrap();
    let through_w = |w: &Tensor| norm::rms_norm(&x, Some(w), 1e-5).unwrap();
    assert_close("dx", &grads.input, &numeric_grad(through_x, &x, &g), 1e-6);
    let dw = grads.weight.unwrap();
    assert_close("dw", &dw, &numeric_grad(through_w, &w, &g), 1e-6);
}

#[test]
fn the_default_eps_is_pytorchs_machine_epsilon_per_dtype() {
    assert_eq!(
        norm::rms_norm_default_eps(DType::F32),
        Some(1.1920928955078125e-7)
    );
    assert_eq!(norm::rms_norm_default_eps(DType::F64), Some(f64::EPSILON));
    assert_eq!(norm::rms_norm_default_eps(DType::BF16), Some(0.0078125));
    assert_eq!(norm::rms_norm_default_eps(DType::F16), Some(0.0009765625));
    assert_eq!(norm::rms_norm_default_eps(DType::I64), None);
}

#[test]
fn bad_input_names_the_op_and_the_shapes() {
    let x = rand_tensor(13, &[2, 3, 4]);
    let w = rand_tensor(14, &[3]);
    let err = norm::rms_norm(&x, Some(&w), 1e-5);
    assert_error_names(err, &["rms_norm", "weight", "[3]", "[4]"]);
    let g = rand_tensor(16, &[2, 3, 5]);
    let err = norm::rms_norm_backward(&g, &x, None, 1e-5);
    assert_error_names(err, &["rms_norm", "[2, 3, 5]", "[2, 3, 4]"]);
}
