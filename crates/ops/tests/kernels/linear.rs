//! linear: PyTorch fixture and finite differences.

use crate::common::*;
use candle_core::DType;
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
    assert_error_names(
        linear(&rand_tensor(1, &[3, 5]), &rand_tensor(2, &[4, 6]), None),
        &["linear", "[3, 5]", "[4, 6]"],
    );
}

/// Float32 against float64 (see `precision.rs`): every output is a sum of `in` products
/// plus the bias, every input-gradient element one of `out` products, every weight- and
/// bias-gradient element one of `batch` terms.
#[test]
fn float32_is_within_rounding_error_bounds_of_float64() {
    use crate::precision::{abs, assert_within, gamma, input};
    let (batch, inputs, outputs) = (16, 512, 10);
    let (x, w, b) = (
        input(1, &[batch, inputs], 0.0, 1.0),
        input(2, &[outputs, inputs], 0.0, 0.1),
        input(3, &[outputs], 0.0, 0.1),
    );
    let y = linear(&x.f32, &w.f32, Some(&b.f32)).unwrap();
    let exact = linear(&x.f64, &w.f64, Some(&b.f64)).unwrap();
    let magnitude = linear(&abs(&x.f64), &abs(&w.f64), Some(&abs(&b.f64))).unwrap();
    let bound = (magnitude * gamma(inputs + 1)).unwrap();
    assert_within("linear forward", &y, &exact, &bound);

    let dy = input(4, &[batch, outputs], 0.0, 1.0);
    let g = linear_backward(&dy.f32, &x.f32, &w.f32, true).unwrap();
    let exact = linear_backward(&dy.f64, &x.f64, &w.f64, true).unwrap();
    let magnitude = linear_backward(&abs(&dy.f64), &abs(&x.f64), &abs(&w.f64), true).unwrap();
    let bound = (&magnitude.x * gamma(outputs)).unwrap();
    assert_within("linear input gradient", &g.x, &exact.x, &bound);
    let bound = (&magnitude.weight * gamma(batch)).unwrap();
    assert_within("linear weight gradient", &g.weight, &exact.weight, &bound);
    let bound = (magnitude.bias.unwrap() * gamma(batch)).unwrap();
    let (db, exact_db) = (g.bias.unwrap(), exact.bias.unwrap());
    assert_within("linear bias gradient", &db, &exact_db, &bound);
}

/// wick's CPU kernel (bias written first, the product accumulated onto it; the weight
/// gradient column-major) against candle's generic ops, with and without a bias, on
/// shapes that take the row-split and the crate-threaded products, and the few-rows
/// float32 forward (tails of the sum, of the weight rows and of the input rows).
#[test]
fn cpu_kernel_matches_the_generic_path() {
    use wick_ops::KernelPath;
    for (m, k, n, bias) in [
        (7, 5, 3, true),
        (300, 96, 384, true),
        (513, 384, 96, false),
        (64, 1024, 40, true),
        (1, 37, 5, true),
        (3, 100, 7, false),
        (16, 300, 22, true),
        (70, 65, 9, true),
    ] {
        for dtype in [DType::F32, DType::F64] {
            let t = |seed, dims: &[usize]| rand_tensor(seed, dims).to_dtype(dtype).unwrap();
            let (x, w, b, g) = (t(1, &[m, k]), t(2, &[n, k]), t(3, &[n]), t(4, &[m, n]));
            let b = bias.then_some(&b);
            let run = || {
                let y = linear(&x, &w, b).unwrap();
                (y, linear_backward(&g, &x, &w, bias).unwrap())
            };
            let (y, grads) = run();
            let (want_y, want) = KernelPath::Generic.scope(run);
            let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
            let case = format!("{m}x{k}x{n} bias {bias} {dtype:?}");
            assert_close(&format!("{case} y"), &y, &want_y, tol);
            assert_close(&format!("{case} dx"), &grads.x, &want.x, tol);
            assert_close(&format!("{case} dw"), &grads.weight, &want.weight, tol);
            if bias {
                let (db, want_db) = (grads.bias.unwrap(), want.bias.unwrap());
                assert_close(&format!("{case} db"), &db, &want_db, tol);
            }
        }
    }
}

#[test]
fn mixed_dtypes_are_an_error_naming_the_operand() {
    let x = rand_tensor(1, &[3, 5]).to_dtype(DType::F32).unwrap();
    let w = rand_tensor(2, &[4, 5]).to_dtype(DType::F64).unwrap();
    assert_error_names(linear(&x, &w, None), &["linear", "weight", "F64", "F32"]);
}

/// `matmul`'s flat products (`[.., m, k] @ [k, n]`, vectors included) on wick's CPU GEMM
/// against candle's matmul, both gradients too; a batched right side keeps candle's path.
#[test]
fn matmul_cpu_kernel_matches_the_generic_path() {
    use wick_ops::tensor::matmul::MatMulShape;
    use wick_ops::KernelPath;
    let cases: [(&[usize], &[usize]); 6] = [
        (&[7, 5], &[5, 3]),
        (&[4, 256, 96], &[96, 288]),
        (&[2, 3, 37, 64], &[64, 17]),
        (&[5], &[5, 4]),
        (&[3, 5], &[5]),
        (&[2, 3, 5], &[2, 5, 4]),
    ];
    for (a_dims, b_dims) in cases {
        for dtype in [DType::F32, DType::F64] {
            let s = MatMulShape::new(a_dims, b_dims).unwrap();
            let t = |seed, dims: &[usize]| rand_tensor(seed, dims).to_dtype(dtype).unwrap();
            let (a, b, gy) = (t(1, a_dims), t(2, b_dims), t(3, &s.out));
            let run = || {
                let y = s.forward(&a, &b).unwrap();
                (
                    y,
                    s.backward_a(&gy, &b).unwrap(),
                    s.backward_b(&gy, &a).unwrap(),
                )
            };
            let (y, ga, gb) = run();
            let (want_y, want_ga, want_gb) = KernelPath::Generic.scope(run);
            let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
            let case = format!("{a_dims:?} @ {b_dims:?} {dtype:?}");
            assert_eq!(y.dims(), s.out.as_slice(), "{case}");
            assert_eq!((ga.dims(), gb.dims()), (a_dims, b_dims), "{case}");
            assert_close(&format!("{case} y"), &y, &want_y, tol);
            assert_close(&format!("{case} grad a"), &ga, &want_ga, tol);
            assert_close(&format!("{case} grad b"), &gb, &want_gb, tol);
        }
    }
}
