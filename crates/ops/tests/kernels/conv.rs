//! conv2d: PyTorch fixtures, finite differences, the device-generic path, and errors.

use crate::common::*;
use candle_core::Tensor;
use wick_ops::conv::*;
use wick_ops::Conv2dParams;
use wick_ops::KernelPath;

fn params(f: &Fixture) -> Conv2dParams {
    Conv2dParams {
        stride: [f.usize("stride"); 2],
        padding: [f.usize("padding"); 2],
        dilation: [f.usize("dilation"); 2],
        groups: f.usize("groups"),
    }
}

fn check_fixture(case: &str, path: KernelPath) {
    path.scope(|| check_fixture_here(case))
}

fn check_fixture_here(case: &str) {
    let f = Fixture::load(case);
    assert_eq!(f.meta("op"), "conv2d");
    let p = params(&f);
    let (x, w) = (f.t("x"), f.t("w"));
    let bias = if f.bool("bias") { Some(f.t("b")) } else { None };
    let tol = f.tol();
    let out = conv2d(x, w, bias, &p).unwrap();
    assert_eq!(
        p.output_shape(x.dims(), w.dims()).unwrap().as_slice(),
        out.dims()
    );
    assert_close(&format!("{case} out"), &out, f.t("out"), tol);
    let g = f.t("grad_out");
    let dx = conv2d_backward_data(g, w, x.dims(), &p).unwrap();
    assert_close(&format!("{case} grad_x"), &dx, f.t("grad_x"), tol);
    let dw = conv2d_backward_filter(g, x, w.dims(), &p).unwrap();
    assert_close(&format!("{case} grad_w"), &dw, f.t("grad_w"), tol);
    if bias.is_some() {
        let db = conv2d_backward_bias(g).unwrap();
        assert_close(&format!("{case} grad_b"), &db, f.t("grad_b"), tol);
    }
}

const CASES: [&str; 6] = [
    "conv2d_basic",
    "conv2d_stride2_nonsquare",
    "conv2d_7x7_stem",
    "conv2d_1x1_stride2",
    "conv2d_dilation_groups",
    "conv2d_f32_resnet_layer",
];

#[test]
fn cpu_kernels_match_pytorch_fixtures() {
    for case in CASES {
        check_fixture(case, KernelPath::Auto);
    }
}

#[test]
fn generic_path_matches_pytorch_fixtures() {
    for case in CASES {
        check_fixture(case, KernelPath::Generic);
    }
}

/// Finite-difference check of both gradients for one configuration.
fn fd_check(x_shape: [usize; 4], w_shape: [usize; 4], p: Conv2dParams, seed: u64) {
    let x = rand_tensor(seed, &x_shape);
    let w = rand_tensor(seed + 1, &w_shape);
    let out_shape = p.output_shape(&x_shape, &w_shape).unwrap();
    let g = rand_tensor(seed + 2, &out_shape);
    for path in PATHS {
        let _on_path = path.enter();
        let dx = conv2d_backward_data(&g, &w, &x_shape, &p).unwrap();
        let num_dx = numeric_grad(|x| conv2d(x, &w, None, &p).unwrap(), &x, &g);
        assert_close(
            &format!("dx {x_shape:?} {p:?} {path:?}"),
            &dx,
            &num_dx,
            FD_TOL,
        );
        let dw = conv2d_backward_filter(&g, &x, &w_shape, &p).unwrap();
        let num_dw = numeric_grad(|w| conv2d(&x, w, None, &p).unwrap(), &w, &g);
        assert_close(
            &format!("dw {x_shape:?} {p:?} {path:?}"),
            &dw,
            &num_dw,
            FD_TOL,
        );
    }
}

#[test]
fn gradients_match_finite_differences_on_7x6_stride2_pad1() {
    // candle's autograd fails on exactly this case.
    fd_check([2, 3, 7, 6], [4, 3, 3, 3], Conv2dParams::new(2, 1), 10);
}

#[test]
fn gradients_match_finite_differences_across_settings() {
    fd_check([1, 2, 5, 5], [3, 2, 3, 3], Conv2dParams::new(1, 1), 20);
    fd_check([2, 4, 6, 5], [4, 4, 1, 1], Conv2dParams::new(1, 0), 30); // pointwise: no im2col
    fd_check([2, 4, 7, 7], [6, 4, 1, 1], Conv2dParams::new(2, 0), 40); // downsample shortcut
    fd_check(
        [1, 4, 8, 7],
        [6, 2, 3, 3],
        Conv2dParams::new(1, 2).with_dilation(2).with_groups(2),
        50,
    );
    fd_check([1, 2, 9, 8], [2, 2, 5, 5], Conv2dParams::new(3, 2), 60);
}

#[test]
fn per_image_and_whole_batch_gemm_strategies_both_match_finite_differences() {
    // 17x16 outputs (272 pixels) take the per-image GEMMs; 7x6 ones the whole-batch GEMM.
    fd_check([2, 2, 17, 16], [3, 2, 3, 3], Conv2dParams::new(1, 1), 70);
    fd_check([3, 2, 7, 6], [3, 2, 3, 3], Conv2dParams::new(1, 1), 80);
    fd_check([2, 3, 16, 16], [4, 3, 1, 1], Conv2dParams::new(1, 0), 90);
    // Grouped, on both strategies: the per-image weight gradient is accumulated transposed
    // (k > cout per group); the whole-batch one reads the pixel-major im2col matrix, and
    // the whole-batch input gradient is laid out pixel-major.
    let grouped = Conv2dParams::new(1, 1).with_groups(2);
    fd_check([2, 4, 16, 16], [4, 2, 3, 3], grouped, 100);
    fd_check([2, 4, 6, 5], [6, 2, 3, 3], grouped, 110);
    // The whole-batch pixel-major im2col with stride, padding and dilation together.
    let dilated = Conv2dParams::new(2, 2).with_dilation(2).with_groups(2);
    fd_check([3, 4, 9, 8], [6, 2, 3, 3], dilated, 120);
    // Pointwise convolutions run image by image from 32 output pixels (6x6 here); below
    // it over the whole batch, copying planes instead of building im2col: with more input
    // channels than output ones (the input gradient transposed back per image), fewer,
    // and grouped.
    let pointwise = Conv2dParams::new(1, 0);
    fd_check([3, 5, 6, 6], [3, 5, 1, 1], pointwise, 130);
    fd_check([3, 6, 5, 4], [2, 6, 1, 1], pointwise, 140);
    fd_check([2, 2, 3, 5], [5, 2, 1, 1], pointwise, 150);
    fd_check([2, 6, 4, 4], [4, 3, 1, 1], pointwise.with_groups(2), 160);
}

#[test]
fn bias_gradient_matches_finite_differences() {
    let x = rand_tensor(1, &[2, 3, 5, 4]);
    let w = rand_tensor(2, &[4, 3, 3, 3]);
    let b = rand_tensor(3, &[4]);
    let p = Conv2dParams::new(1, 1);
    let g = rand_tensor(4, &[2, 4, 5, 4]);
    let db = conv2d_backward_bias(&g).unwrap();
    let num = numeric_grad(|b| conv2d(&x, &w, Some(b), &p).unwrap(), &b, &g);
    assert_close("db", &db, &num, FD_TOL);
}

#[test]
fn batch_of_one_and_many_threads_agree() {
    // A batch of one takes the GEMM-parallel path; a batch of 5 the image-parallel path.
    let x = rand_tensor(7, &[5, 3, 9, 9]);
    let w = rand_tensor(8, &[4, 3, 3, 3]);
    let p = Conv2dParams::new(1, 1);
    let all = conv2d(&x, &w, None, &p).unwrap();
    for n in 0..5 {
        let one = conv2d(&x.narrow(0, n, 1).unwrap(), &w, None, &p).unwrap();
        assert_close("per-image", &one, &all.narrow(0, n, 1).unwrap(), 1e-12);
    }
}

fn err(r: wick_ops::Result<Tensor>) -> String {
    r.expect_err("expected an error").to_string()
}

#[test]
fn invalid_shapes_and_settings_are_errors_naming_op_and_shapes() {
    let x = rand_tensor(1, &[1, 3, 5, 5]);
    let w4 = rand_tensor(2, &[2, 4, 3, 3]);
    let msg = err(conv2d(&x, &w4, None, &Conv2dParams::new(1, 1)));
    assert_mentions(&msg, &["conv2d", "[1, 3, 5, 5]", "[2, 4, 3, 3]"]);

    let w7 = rand_tensor(3, &[2, 3, 7, 7]);
    let msg = err(conv2d(&x, &w7, None, &Conv2dParams::new(1, 0)));
    assert_mentions(&msg, &["conv2d", "larger than the padded input"]);

    let w3 = rand_tensor(4, &[2, 3, 3, 3]);
    let msg = err(conv2d(&x, &w3, None, &Conv2dParams::new(0, 1)));
    assert_mentions(&msg, &["conv2d", "stride"]);

    let msg = err(conv2d(
        &x.flatten_all().unwrap(),
        &w3,
        None,
        &Conv2dParams::new(1, 1),
    ));
    assert_mentions(&msg, &["4-D", "[75]"]);

    let b = rand_tensor(5, &[3]);
    let msg = err(conv2d(&x, &w3, Some(&b), &Conv2dParams::new(1, 1)));
    assert_mentions(&msg, &["bias", "[3]"]);

    let g = rand_tensor(6, &[1, 2, 4, 4]);
    let msg = err(conv2d_backward_data(
        &g,
        &w3,
        x.dims(),
        &Conv2dParams::new(1, 1),
    ));
    assert_mentions(&msg, &["output gradient", "[1, 2, 4, 4]", "[1, 2, 5, 5]"]);

    let msg = err(conv2d(
        &x,
        &w3,
        None,
        &Conv2dParams::new(1, 1).with_groups(2),
    ));
    assert!(msg.contains("groups"), "{msg}");
}

#[test]
fn flops_count_multiply_adds_twice() {
    let p = Conv2dParams::new(1, 1);
    // [8,64,56,56] * [64,64,3,3]: 1.85 GFLOP, as in the baselines.
    let f = p.flops(&[8, 64, 56, 56], &[64, 64, 3, 3]);
    assert_eq!(f, 2 * 8 * 64 * 56 * 56 * 64 * 9);
}

/// One conv configuration in float32 against float64 (see `precision.rs`): every output
/// element of the forward pass is a sum of `C_in/groups · kh · kw` products plus the bias,
/// every input-gradient element one of at most `C_out/groups · kh · kw` (col2im's
/// overlapping sums included), every weight-gradient element one of `N · oh · ow`.
fn precision_check(x_shape: [usize; 4], w_shape: [usize; 4], p: Conv2dParams, seed: u64) {
    use crate::precision::{abs, assert_within, gamma, input};
    let what = format!("{x_shape:?} {w_shape:?} {p:?} {:?}", KernelPath::current());
    let [n, _, _, _] = x_shape;
    let [c_out, c_in_group, kh, kw] = w_shape;
    let (x, w, b) = (
        input(seed, &x_shape, 0.0, 1.0),
        input(seed + 1, &w_shape, 0.0, 0.5),
        input(seed + 2, &[c_out], 0.0, 0.5),
    );
    let y = conv2d(&x.f32, &w.f32, Some(&b.f32), &p).unwrap();
    let exact = conv2d(&x.f64, &w.f64, Some(&b.f64), &p).unwrap();
    let magnitude = conv2d(&abs(&x.f64), &abs(&w.f64), Some(&abs(&b.f64)), &p).unwrap();
    let bound = (magnitude * gamma(c_in_group * kh * kw + 1)).unwrap();
    assert_within(&format!("conv forward {what}"), &y, &exact, &bound);

    let [_, _, oh, ow] = p.output_shape(&x_shape, &w_shape).unwrap();
    let dy = input(seed + 3, y.dims(), 0.0, 1.0);
    let dx = conv2d_backward_data(&dy.f32, &w.f32, &x_shape, &p).unwrap();
    let exact = conv2d_backward_data(&dy.f64, &w.f64, &x_shape, &p).unwrap();
    let magnitude = conv2d_backward_data(&abs(&dy.f64), &abs(&w.f64), &x_shape, &p).unwrap();
    let bound = (magnitude * gamma(c_out / p.groups * kh * kw)).unwrap();
    assert_within(&format!("conv input gradient {what}"), &dx, &exact, &bound);

    let dw = conv2d_backward_filter(&dy.f32, &x.f32, &w_shape, &p).unwrap();
    let exact = conv2d_backward_filter(&dy.f64, &x.f64, &w_shape, &p).unwrap();
    let magnitude = conv2d_backward_filter(&abs(&dy.f64), &abs(&x.f64), &w_shape, &p).unwrap();
    let bound = (magnitude * gamma(n * oh * ow)).unwrap();
    assert_within(&format!("conv weight gradient {what}"), &dw, &exact, &bound);

    let db = conv2d_backward_bias(&dy.f32).unwrap();
    let exact = conv2d_backward_bias(&dy.f64).unwrap();
    let bound = (conv2d_backward_bias(&abs(&dy.f64)).unwrap() * gamma(n * oh * ow)).unwrap();
    assert_within(&format!("conv bias gradient {what}"), &db, &exact, &bound);
}

#[test]
fn float32_forward_and_gradients_are_within_rounding_error_bounds_of_float64() {
    for path in PATHS {
        path.scope(|| {
            // ResNet's three conv shapes (3x3, 3x3 stride 2 on a non-square input, the 1x1
            // stride-2 shortcut), both GEMM strategies, and a grouped dilated one.
            precision_check([2, 16, 17, 16], [8, 16, 3, 3], Conv2dParams::new(1, 1), 1);
            precision_check([3, 32, 9, 7], [16, 32, 3, 3], Conv2dParams::new(2, 1), 2);
            precision_check([2, 32, 8, 8], [64, 32, 1, 1], Conv2dParams::new(2, 0), 3);
            let grouped = Conv2dParams::new(1, 2).with_dilation(2).with_groups(2);
            precision_check([2, 8, 10, 9], [6, 4, 3, 3], grouped, 4);
            // A batch of one with a narrow, deep product (64 x 36 x 288): on 2+ threads its
            // forward GEMM runs as one single-threaded GEMM per block of output channels.
            precision_check([1, 32, 6, 6], [64, 32, 3, 3], Conv2dParams::new(1, 1), 5);
        });
    }
}

#[test]
fn strided_im2col_from_split_phases_matches_the_generic_path() {
    // Column strides above 1 with overlapping windows and rows of 16+ outputs: im2col
    // reads rows split into their stride phases. Odd and even widths, strides 2 and 3,
    // dilation, a batch of one (threads inside the image) and of two (images across
    // threads), forward and weight gradient (both read im2col), in float64 against
    // candle's own convolution. The last two are larger: a stride-1 layer beside them,
    // and a 7x7 stride-2 stem-like layer on 3060 output pixels.
    let cases = [
        ([1, 3, 41, 37], [8, 3, 7, 7], Conv2dParams::new(2, 3)),
        ([2, 4, 40, 34], [6, 4, 3, 3], Conv2dParams::new(2, 1)),
        (
            [1, 2, 19, 61],
            [5, 2, 5, 5],
            Conv2dParams::new(3, 2).with_dilation(2),
        ),
        ([2, 3, 60, 53], [4, 3, 5, 5], Conv2dParams::new(3, 0)),
        ([2, 8, 66, 61], [4, 8, 3, 3], Conv2dParams::new(1, 1)),
        ([2, 3, 120, 101], [8, 3, 7, 7], Conv2dParams::new(2, 3)),
    ];
    for (seed, (xs, ws, p)) in cases.into_iter().enumerate() {
        let seed = seed as u64 * 3;
        let x = rand_tensor(20 + seed, &xs);
        let w = rand_tensor(21 + seed, &ws);
        let ys = p.output_shape(&xs, &ws).unwrap();
        assert!(ys[3] >= 16, "{xs:?} {ws:?}: rows of {} outputs", ys[3]);
        // Batches of two with 256+ output pixels per image (below that, one GEMM over the
        // whole batch reads its own column matrix).
        assert!(xs[0] == 1 || ys[2] * ys[3] >= 256, "{xs:?}: per-image path");
        let dy = rand_tensor(22 + seed, &ys);
        let run = || {
            (
                conv2d(&x, &w, None, &p).unwrap(),
                conv2d_backward_filter(&dy, &x, &ws, &p).unwrap(),
            )
        };
        let (y, dw) = run();
        let (y_ref, dw_ref) = KernelPath::Generic.scope(run);
        assert_close(&format!("forward {xs:?} {ws:?} {p:?}"), &y, &y_ref, 1e-12);
        assert_close(
            &format!("weight gradient {xs:?} {ws:?} {p:?}"),
            &dw,
            &dw_ref,
            1e-12,
        );
    }
}
