//! Pooling: PyTorch fixtures (including max-pool ties), finite differences, errors.

use crate::common::*;
use candle_core::{DType, Tensor};
use wick_ops::pool::*;

fn params(f: &Fixture) -> Pool2dParams {
    Pool2dParams::new(f.usize("kernel"), f.usize("stride"), f.usize("padding"))
}

fn check_max_fixture(case: &str) {
    let f = Fixture::load(case);
    assert_eq!(f.meta("op"), "max_pool2d");
    let p = params(&f);
    let x = f.t("x");
    let out = max_pool2d(x, &p).unwrap();
    assert_close("out", &out.y, f.t("out"), 1e-12);
    let idx: Vec<i64> = out
        .indices
        .to_dtype(DType::I64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let expected: Vec<i64> = f.t("indices").flatten_all().unwrap().to_vec1().unwrap();
    assert_eq!(idx, expected, "{case}: argmax indices");
    let dx = max_pool2d_backward(f.t("grad_out"), &out.indices, x.dims(), &p).unwrap();
    assert_close("grad_x", &dx, f.t("grad_x"), 1e-12);
}

/// The input gradient of a 2x2 max pool over the one 2x2 plane `x`, its output's
/// gradient `g`.
fn max_pool_2x2_gradient(x: [f64; 4], g: f64) -> Vec<f64> {
    let cpu = &candle_core::Device::Cpu;
    let x = Tensor::from_vec(x.to_vec(), (1, 1, 2, 2), cpu).unwrap();
    let p = Pool2dParams::new(2, 2, 0);
    let out = max_pool2d(&x, &p).unwrap();
    let g = Tensor::from_vec(vec![g], (1, 1, 1, 1), cpu).unwrap();
    let dx = max_pool2d_backward(&g, &out.indices, x.dims(), &p).unwrap();
    dx.flatten_all().unwrap().to_vec1().unwrap()
}

#[test]
fn max_pool_3x3_s2_p1_matches_pytorch_fixture() {
    check_max_fixture("maxpool_3x3_s2_p1");
}

#[test]
fn max_pool_ties_route_to_the_first_maximum_as_pytorch() {
    check_max_fixture("maxpool_2x2_ties");
    // The same rule checked directly: a window of equal values sends everything to its first element.
    assert_eq!(
        max_pool_2x2_gradient([5., 5., 5., 5.], 3.),
        [3., 0., 0., 0.]
    );
}

#[test]
fn avg_pool_matches_pytorch_fixture() {
    let f = Fixture::load("avgpool_3x3_s2_p1");
    assert_eq!(f.meta("count_include_pad"), "true");
    let p = params(&f);
    let x = f.t("x");
    assert_close("out", &avg_pool2d(x, &p).unwrap(), f.t("out"), 1e-9);
    let dx = avg_pool2d_backward(f.t("grad_out"), x.dims(), &p).unwrap();
    assert_close("grad_x", &dx, f.t("grad_x"), 1e-9);
}

#[test]
fn global_avg_pool_matches_pytorch_fixture() {
    let f = Fixture::load("adaptive_avgpool_1x1");
    let x = f.t("x");
    assert_close("out", &global_avg_pool(x).unwrap(), f.t("out"), 1e-9);
    let dx = global_avg_pool_backward(f.t("grad_out"), x.dims()).unwrap();
    assert_close("grad_x", &dx, f.t("grad_x"), 1e-9);
}

#[test]
fn max_pool_unique_maximum_gets_gradient_one() {
    // candle's autograd scales this by (#maxima)/(k*k); the right answer is 1.
    assert_eq!(
        max_pool_2x2_gradient([1., 2., 3., 9.], 1.),
        [0., 0., 0., 1.]
    );
}

#[test]
fn pool_gradients_match_finite_differences() {
    for (shape, k, s, pad) in [
        ([2, 2, 7, 6], 3, 2, 1),
        ([1, 3, 6, 6], 2, 2, 0),
        ([1, 2, 8, 5], 3, 1, 1),
    ] {
        let x = rand_tensor(shape.iter().sum::<usize>() as u64, &shape);
        for kind in [PoolKind::Max, PoolKind::Avg] {
            let p = Pool2dParams::new(k, s, pad);
            let g = rand_tensor(99, &p.output_shape(kind, &shape).unwrap());
            let (dx, num) = match kind {
                PoolKind::Max => {
                    let out = max_pool2d(&x, &p).unwrap();
                    let dx = max_pool2d_backward(&g, &out.indices, &shape, &p).unwrap();
                    (dx, numeric_grad(|x| max_pool2d(x, &p).unwrap().y, &x, &g))
                }
                PoolKind::Avg => (
                    avg_pool2d_backward(&g, &shape, &p).unwrap(),
                    numeric_grad(|x| avg_pool2d(x, &p).unwrap(), &x, &g),
                ),
            };
            assert_close(
                &format!("{kind:?} {shape:?} k{k} s{s} p{pad}"),
                &dx,
                &num,
                FD_TOL,
            );
        }
    }
    let x = rand_tensor(5, &[2, 3, 4, 5]);
    let g = rand_tensor(6, &[2, 3, 1, 1]);
    let dx = global_avg_pool_backward(&g, x.dims()).unwrap();
    assert_close(
        "global",
        &dx,
        &numeric_grad(|x| global_avg_pool(x).unwrap(), &x, &g),
        FD_TOL,
    );
}

#[test]
fn output_shapes_follow_pytorch_rule() {
    let p = Pool2dParams::new(3, 2, 1);
    assert_eq!(
        p.output_shape(PoolKind::Max, &[1, 64, 112, 112]).unwrap(),
        [1, 64, 56, 56]
    );
    assert_eq!(
        p.output_shape(PoolKind::Max, &[2, 3, 9, 8]).unwrap(),
        [2, 3, 5, 4]
    );
}

#[test]
fn invalid_settings_are_errors() {
    let x = rand_tensor(1, &[1, 1, 4, 4]);
    assert_error_names(
        max_pool2d(&x, &Pool2dParams::new(2, 0, 0)),
        &["max_pool2d", "stride"],
    );
    assert_error_names(
        avg_pool2d(&x, &Pool2dParams::new(7, 1, 1)),
        &["avg_pool2d", "larger than the padded input"],
    );
    assert_error_names(
        max_pool2d(&x, &Pool2dParams::new(2, 1, 2)),
        &["at most half"],
    );
    assert_error_names(
        global_avg_pool(&x.flatten_all().unwrap()),
        &["global_avg_pool", "[16]"],
    );
}

/// Float32 against float64 (see `precision.rs`). Max pooling's forward selects, so it is
/// exact, with the same argmax; its backward sums, into each input, at most
/// `ceil(k/s)²` gradients of the windows that chose it. Average pooling sums `k²` terms
/// and divides (allowing the reciprocal's rounding: `k² + 1` roundings); its backward
/// sums at most `ceil(k/s)²` quotients (one more rounding each). The global average pool
/// is a mean over W, then one over H.
#[test]
fn float32_is_within_rounding_error_bounds_of_float64() {
    use crate::precision::{abs, assert_within, gamma, input};
    let (k, s) = (3, 2);
    let p = Pool2dParams::new(k, s, 1);
    let x = input(1, &[2, 5, 11, 9], 0.0, 1.0);
    let out = max_pool2d(&x.f32, &p).unwrap();
    let exact = max_pool2d(&x.f64, &p).unwrap();
    let zero = exact.y.zeros_like().unwrap();
    assert_within("max pool forward", &out.y, &exact.y, &zero);
    let (i32, i64) = (
        out.indices.flatten_all().unwrap().to_vec1::<u32>().unwrap(),
        exact
            .indices
            .flatten_all()
            .unwrap()
            .to_vec1::<u32>()
            .unwrap(),
    );
    assert_eq!(i32, i64, "max pool: the same argmax in float32 and float64");
    let dy = input(2, out.y.dims(), 0.0, 1.0);
    let overlap = k.div_ceil(s).pow(2);
    let dx = max_pool2d_backward(&dy.f32, &out.indices, x.f32.dims(), &p).unwrap();
    let exact_dx = max_pool2d_backward(&dy.f64, &exact.indices, x.f64.dims(), &p).unwrap();
    let magnitude = max_pool2d_backward(&abs(&dy.f64), &exact.indices, x.f64.dims(), &p).unwrap();
    let bound = (magnitude * gamma(overlap)).unwrap();
    assert_within("max pool backward", &dx, &exact_dx, &bound);

    for path in PATHS {
        let _on_path = path.enter();
        let y = avg_pool2d(&x.f32, &p).unwrap();
        let exact = avg_pool2d(&x.f64, &p).unwrap();
        let bound = (avg_pool2d(&abs(&x.f64), &p).unwrap() * gamma(k * k + 1)).unwrap();
        assert_within(&format!("avg pool forward {path:?}"), &y, &exact, &bound);
    }
    let dy = input(
        3,
        &p.output_shape(PoolKind::Avg, x.f32.dims()).unwrap(),
        0.0,
        1.0,
    );
    let dx = avg_pool2d_backward(&dy.f32, x.f32.dims(), &p).unwrap();
    let exact = avg_pool2d_backward(&dy.f64, x.f64.dims(), &p).unwrap();
    let magnitude = avg_pool2d_backward(&abs(&dy.f64), x.f64.dims(), &p).unwrap();
    let bound = (magnitude * gamma(overlap + 2)).unwrap();
    assert_within("avg pool backward", &dx, &exact, &bound);

    let (_, _, h, w) = x.f32.dims4().unwrap();
    let y = global_avg_pool(&x.f32).unwrap();
    let exact = global_avg_pool(&x.f64).unwrap();
    // Each mean: its sum, the reciprocal of the count and the product.
    let bound = (global_avg_pool(&abs(&x.f64)).unwrap() * gamma(h + w + 2)).unwrap();
    assert_within("global avg pool forward", &y, &exact, &bound);
    let dy = input(4, y.dims(), 0.0, 1.0);
    let dx = global_avg_pool_backward(&dy.f32, x.f32.dims()).unwrap();
    let exact = global_avg_pool_backward(&dy.f64, x.f64.dims()).unwrap();
    let bound = (abs(&exact) * gamma(2)).unwrap();
    assert_within("global avg pool backward", &dx, &exact, &bound);
}

/// The direct row-major scan (the rule the separable kernel must reproduce): the first
/// maximum of each window, a NaN winning and ending the search; padding never read.
fn scan_reference(x: &[f64], h: usize, w: usize, p: &Pool2dParams) -> (Vec<f64>, Vec<u32>) {
    let out = |len: usize, a: usize| (len + 2 * p.padding[a] - p.kernel[a]) / p.stride[a] + 1;
    let (oh, ow) = (out(h, 0), out(w, 1));
    let (mut y, mut idx) = (Vec::new(), Vec::new());
    for oy in 0..oh {
        for ox in 0..ow {
            let (mut best, mut at) = (f64::NEG_INFINITY, usize::MAX);
            'window: for ky in 0..p.kernel[0] {
                for kx in 0..p.kernel[1] {
                    let iy = (oy * p.stride[0] + ky) as isize - p.padding[0] as isize;
                    let ix = (ox * p.stride[1] + kx) as isize - p.padding[1] as isize;
                    if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                        continue;
                    }
                    let i = iy as usize * w + ix as usize;
                    if at == usize::MAX || x[i] > best || x[i].is_nan() {
                        (best, at) = (x[i], i);
                        if x[i].is_nan() {
                            break 'window;
                        }
                    }
                }
            }
            y.push(best);
            idx.push(at as u32);
        }
    }
    (y, idx)
}

#[test]
fn max_pool_values_and_indices_equal_the_direct_scan_with_ties_and_nans() {
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut cases = 0;
    let windows = [
        (3, 2, 1),
        (2, 2, 0),
        (3, 1, 1),
        (2, 1, 1),
        (3, 3, 0),
        (4, 2, 2),
    ];
    for ((k, s, pad), values) in windows
        .into_iter()
        .flat_map(|w| [(w, "levels"), (w, "NaNs"), (w, "-infs")])
    {
        for (h, w) in [(7, 9), (8, 8), (5, 12)] {
            // Values from a handful of levels (many ties); then with some NaNs; then
            // mostly -inf, so that whole windows hold nothing greater than the padding.
            let x: Vec<f64> = (0..h * w)
                .map(|_| match (values, next() % 23) {
                    ("NaNs", 0) => f64::NAN,
                    ("-infs", r) if r % 3 != 0 => f64::NEG_INFINITY,
                    (_, r) => (r % 4) as f64 - 2.0,
                })
                .collect();
            let p = Pool2dParams::new(k, s, pad);
            let t = Tensor::from_vec(x.clone(), (1, 1, h, w), &candle_core::Device::Cpu).unwrap();
            let out = max_pool2d(&t, &p).unwrap();
            let y: Vec<f64> = out.y.flatten_all().unwrap().to_vec1().unwrap();
            let idx: Vec<u32> = out.indices.flatten_all().unwrap().to_vec1().unwrap();
            let (ry, ridx) = scan_reference(&x, h, w, &p);
            assert_eq!(idx, ridx, "k{k} s{s} p{pad} {h}x{w} {values}: indices");
            // The values-only kernel (inference graphs) gives the same values.
            let only: Vec<f64> = max_pool2d_values(&t, &p)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            for ((a, b), v) in y.iter().zip(&ry).zip(&only) {
                assert!(
                    a == b || (a.is_nan() && b.is_nan()),
                    "k{k} s{s} p{pad} {h}x{w}: {a} vs {b}"
                );
                assert!(
                    v == b || (v.is_nan() && b.is_nan()),
                    "k{k} s{s} p{pad} {h}x{w} {values}: values only {v} vs {b}"
                );
            }
            cases += 1;
        }
    }
    assert_eq!(cases, 54);
}
