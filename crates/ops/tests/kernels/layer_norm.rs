//! Layer norm over channels (`layer_norm2d`, torchvision's `LayerNorm2d`): wick's CPU
//! kernel, which sums down the channels in place, against the generic path (permute to
//! channels-last, layer norm, permute back), in f32 against f64, and against finite
//! differences.

use candle_core::{DType, Tensor};
use wick_ops::{norm, KernelPath};

use crate::common::*;

/// Shapes that cover one column block, several (the last one partial), one position per
/// image (the classifier's `[N, C, 1, 1]`) and a rank-3 input.
const SHAPES: [&[usize]; 5] = [
    &[2, 5, 3, 4],
    &[2, 96, 16, 16],
    &[3, 7, 1, 1],
    &[1, 6, 1030],
    &[2, 40, 2000],
];

/// `(y, dx, dw, db)` for an input, output gradient and optional affine parameters.
fn run(x: &Tensor, g: &Tensor, w: Option<&Tensor>, b: Option<&Tensor>) -> Vec<Tensor> {
    let y = norm::layer_norm2d(x, w, b, 1e-6).unwrap();
    let grads = norm::layer_norm2d_backward(g, x, w, b.is_some(), 1e-6).unwrap();
    [Some(y), Some(grads.input), grads.weight, grads.bias]
        .into_iter()
        .flatten()
        .collect()
}

#[test]
fn cpu_kernel_matches_the_permuted_layer_norm() {
    for dims in SHAPES {
        let c = dims[1];
        for dtype in [DType::F32, DType::F64] {
            let t = |seed, d: &[usize]| rand_tensor(seed, d).to_dtype(dtype).unwrap();
            // An offset mean per position, as a residual stream has.
            let x = (t(1, dims) * 3.0).unwrap().affine(1.0, 0.5).unwrap();
            let g = t(2, dims);
            let (w, b) = (t(3, &[c]), t(4, &[c]));
            for affine in [true, false] {
                let (w, b) = if affine {
                    (Some(&w), Some(&b))
                } else {
                    (None, None)
                };
                let got = run(&x, &g, w, b);
                let want = KernelPath::Generic.scope(|| run(&x, &g, w, b));
                assert_eq!(got.len(), want.len());
                let tol = if dtype == DType::F32 { 2e-5 } else { 1e-12 };
                for (i, (a, e)) in got.iter().zip(&want).enumerate() {
                    let case = format!("{dims:?} {dtype:?} affine {affine} output {i}");
                    assert_close(&case, a, e, tol);
                }
            }
        }
    }
}

/// An input `x` of shape `dims`, an output gradient `g` like it and a per-channel weight
/// and bias, drawn from seeds `seed` to `seed + 3`.
fn inputs(dims: [usize; 4], seed: u64) -> [Tensor; 4] {
    let c = [dims[1]];
    [(0, &dims[..]), (1, &dims[..]), (2, &c[..]), (3, &c[..])]
        .map(|(i, d)| rand_tensor(seed + i, d))
}

#[test]
fn float32_is_as_close_to_float64_as_its_rounding() {
    let [x, g, w, b] = inputs([2, 64, 9, 9], 5);
    let want = run(&x, &g, Some(&w), Some(&b));
    let f32 = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
    let got = run(&f32(&x), &f32(&g), Some(&f32(&w)), Some(&f32(&b)));
    for (i, (a, e)) in got.iter().zip(&want).enumerate() {
        let a = a.to_dtype(DType::F64).unwrap();
        assert_close(&format!("output {i}"), &a, e, 2e-6);
    }
}

#[test]
fn gradients_match_finite_differences() {
    let [x, g, w, b] = inputs([2, 4, 3, 3], 9);
    let grads = norm::layer_norm2d_backward(&g, &x, Some(&w), true, 1e-6).unwrap();
    let through_x = |x: &Tensor| norm::layer_norm2d(x, Some(&w), Some(&b), 1e-6).unwrap();
    let through_w = |w: &Tensor| norm::layer_norm2d(&x, Some(w), Some(&b), 1e-6).unwrap();
    let through_b = |b: &Tensor| norm::layer_norm2d(&x, Some(&w), Some(b), 1e-6).unwrap();
    assert_close("dx", &grads.input, &numeric_grad(through_x, &x, &g), 1e-6);
    assert_close(
        "dw",
        &grads.weight.unwrap(),
        &numeric_grad(through_w, &w, &g),
        1e-6,
    );
    assert_close(
        "db",
        &grads.bias.unwrap(),
        &numeric_grad(through_b, &b, &g),
        1e-6,
    );
}

#[test]
fn bad_input_names_the_op_and_the_shapes() {
    let x = rand_tensor(13, &[2, 3, 4, 4]);
    let w = rand_tensor(14, &[4]);
    let err = norm::layer_norm2d(&x, Some(&w), None, 1e-5);
    assert_error_names(err, &["layer_norm2d", "weight", "[4]", "[3]"]);
    let flat = rand_tensor(15, &[6]);
    assert_error_names(
        norm::layer_norm2d(&flat, None, None, 1e-5),
        &["layer_norm2d", "[6]"],
    );
    let g = rand_tensor(16, &[2, 3, 4, 5]);
    let err = norm::layer_norm2d_backward(&g, &x, None, false, 1e-5);
    assert_error_names(err, &["layer_norm2d", "[2, 3, 4, 5]", "[2, 3, 4, 4]"]);
}
