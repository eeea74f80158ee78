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
    let BatchNormCase { x, w, b, rm, rv, g } = batch_norm_case(1, &shape);
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
    let BatchNormCase { x, w, b, rm, rv, g } = batch_norm_case(11, &shape);
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
    assert_error_names(
        batch_norm_train(&x, &c2, &c3, &c3, &c3, &p),
        &["batch_norm", "weight", "[2]", "[2, 3, 4, 4]"],
    );
    let one = rand_tensor(4, &[1, 3, 1, 1]);
    assert_error_names(
        batch_norm_train(&one, &c3, &c3, &c3, &c3, &p),
        &["more than one value per channel"],
    );
}

/// Float32 against float64 (see `precision.rs`) in training mode. The kernels are
/// reductions (the statistics; `Σdy` and `Σdy·(x - mean)`, which are the bias and weight
/// gradients) followed by elementwise passes, and each part is held to its own bound:
/// - the reductions, `N` terms each, to `γ_N`-type bounds of `Σ|terms|`;
/// - the elementwise outputs against float64 arithmetic on the reductions the float32 run
///   produced, to a few roundings of the centred terms (`|x - mean|`, not `|x|`).
///
/// The inputs sit at mean 8 with spread 1: the expanded forms
/// (`x * scale + (beta - mean * scale)`, `dx = a*dy + b*x + k`) round terms 8 to 16 times
/// larger than the centred ones and exceed the elementwise bounds.
#[test]
fn training_mode_float32_is_within_rounding_error_bounds_of_float64() {
    for path in PATHS {
        path.scope(train_precision_here);
    }
}

/// Per-channel views of an NCHW layout: the channel of every flat index.
struct Channels {
    c: usize,
    hw: usize,
    /// Values per channel, `N * H * W`.
    count: usize,
}

impl Channels {
    fn of(dims: &[usize]) -> Self {
        Channels {
            c: dims[1],
            hw: dims[2] * dims[3],
            count: dims[0] * dims[2] * dims[3],
        }
    }
    fn at(&self, i: usize) -> usize {
        (i / self.hw) % self.c
    }
    /// `Σ f(i)` over the flat indices of each channel.
    fn sums(&self, len: usize, f: impl Fn(usize) -> f64) -> Vec<f64> {
        let mut s = vec![0.0; self.c];
        for i in 0..len {
            s[self.at(i)] += f(i);
        }
        s
    }
}

/// A precision case on `[4, 6, 9, 7]` from seeds `seed..seed + 5`: the input (at mean 8,
/// where cancellation shows), the weight, the bias, and the running mean and variance
/// drawn around `running`'s (mean, spread) pairs; the shape and its channels.
fn precision_case(
    seed: u64,
    running: [(f64, f64); 2],
) -> ([crate::precision::Input; 5], [usize; 4], Channels) {
    use crate::precision::input;
    let shape = [4, 6, 9, 7];
    let c = [shape[1]];
    let [(mean, mean_spread), (var, var_spread)] = running;
    let inputs = [
        input(seed, &shape, 8.0, 1.0),
        input(seed + 1, &c, 1.0, 0.5),
        input(seed + 2, &c, 0.0, 1.0),
        input(seed + 3, &c, mean, mean_spread),
        input(seed + 4, &c, var, var_spread),
    ];
    (inputs, shape, Channels::of(&shape))
}

fn train_precision_here() {
    use crate::precision::{assert_within_values as within, gamma, host, input, U};
    let path = wick_ops::KernelPath::current();
    let p = BatchNorm2dParams::default();
    let ([x, w, b, rm, rv], shape, ch) = precision_case(1, [(0.0, 1.0), (1.0, 0.5)]);
    let out = batch_norm_train(&x.f32, &w.f32, &b.f32, &rm.f32, &rv.f32, &p).unwrap();
    let n = ch.count as f64;
    let xs = host(&x.f64);

    // The statistics: the mean's sum of N terms and a division; the variance's N squares
    // of centred terms (the mean's error e enters as e², since Σ(x - mean) = 0), N - 1
    // additions and a division; 1/sqrt(var + eps) halves var's relative error and adds
    // the sum, the rounding of eps, the square root and the reciprocal.
    let mean = ch.sums(xs.len(), |i| xs[i] / n);
    let var = ch.sums(xs.len(), |i| (xs[i] - mean[ch.at(i)]).powi(2) / n);
    let mean_abs = ch.sums(xs.len(), |i| xs[i].abs() / n);
    let e_mean: Vec<f64> = mean_abs.iter().map(|a| gamma(ch.count + 1) * a).collect();
    let e_var: Vec<f64> = (0..ch.c)
        .map(|k| e_mean[k].powi(2) + gamma(ch.count + 3) * (var[k] + e_mean[k].powi(2)))
        .collect();
    let inv_std: Vec<f64> = var.iter().map(|v| 1.0 / (v + p.eps).sqrt()).collect();
    let rel_inv_std: Vec<f64> = (0..ch.c)
        .map(|k| 0.5 * e_var[k] / (var[k] + p.eps) + 3.0 * U)
        .collect();
    within(
        &format!("batch norm mean {path:?}"),
        &host(&out.mean),
        &mean,
        &e_mean,
    );
    let bound: Vec<f64> = (0..ch.c).map(|k| rel_inv_std[k] * inv_std[k]).collect();
    let what = format!("batch norm inv_std {path:?}");
    within(&what, &host(&out.inv_std), &inv_std, &bound);

    // The running statistics: (1 - momentum) * running + momentum * batch, momentum and
    // 1 - momentum rounded, two products and a sum.
    let (rms, rvs, mom) = (host(&rm.f64), host(&rv.f64), p.momentum);
    let blend = |old: &[f64], new: &[f64], e_new: &[f64]| -> (Vec<f64>, Vec<f64>) {
        (0..ch.c)
            .map(|k| {
                let v = (1.0 - mom) * old[k] + mom * new[k];
                let e = (1.0 - mom) * old[k].abs() * 2.0 * U
                    + mom * (e_new[k] + 2.0 * U * new[k].abs())
                    + U * v.abs();
                (v, e)
            })
            .unzip()
    };
    let (exact, bound) = blend(&rms, &mean, &e_mean);
    let what = format!("batch norm running_mean {path:?}");
    within(&what, &host(&out.running_mean), &exact, &bound);
    let unbiased: Vec<f64> = var.iter().map(|v| v * n / (n - 1.0)).collect();
    let e_unbiased: Vec<f64> = (0..ch.c)
        .map(|k| e_var[k] * n / (n - 1.0) + 2.0 * U * unbiased[k])
        .collect();
    let (exact, bound) = blend(&rvs, &unbiased, &e_unbiased);
    let what = format!("batch norm running_var {path:?}");
    within(&what, &host(&out.running_var), &exact, &bound);

    // y = (x - mean) * (gamma * inv_std) + beta on the run's own statistics: the
    // subtraction, gamma * inv_std (and inv_std's float32 rounding where it is kept in
    // float64), the product and the sum.
    let (m32, r32, ws, bs) = (
        host(&out.mean),
        host(&out.inv_std),
        host(&w.f64),
        host(&b.f64),
    );
    let (exact, bound): (Vec<f64>, Vec<f64>) = (0..xs.len())
        .map(|i| {
            let k = ch.at(i);
            let centred_scaled = (xs[i] - m32[k]) * ws[k] * r32[k];
            let y = centred_scaled + bs[k];
            (y, 4.0 * U * centred_scaled.abs() + U * y.abs())
        })
        .unzip();
    within(
        &format!("batch norm y {path:?}"),
        &host(&out.y),
        &exact,
        &bound,
    );

    // Backward, with dy correlated with x so that the batch statistics' gradient matters.
    let noise = host(&input(6, &shape, 0.0, 1.0).f64);
    let dy_values: Vec<f64> = (0..xs.len())
        .map(|i| noise[i] + 0.8 * (xs[i] - 8.0))
        .collect();
    let dy = input_from(&dy_values, &shape);
    let g = batch_norm_train_backward(&dy.f32, &x.f32, &w.f32, &out.mean, &out.inv_std).unwrap();
    let dys = host(&dy.f64);
    let centred = |i: usize| xs[i] - m32[ch.at(i)];
    // The bias gradient: N terms. The weight gradient: N products of dy and the centred
    // input (its subtraction and the product with inv_std), N - 1 additions.
    let sum_dy = ch.sums(xs.len(), |i| dys[i]);
    let bound: Vec<f64> = ch
        .sums(xs.len(), |i| dys[i].abs())
        .iter()
        .map(|s| gamma(ch.count) * s)
        .collect();
    within(
        &format!("batch norm d_bias {path:?}"),
        &host(&g.bias),
        &sum_dy,
        &bound,
    );
    let sum_dy_xc = ch.sums(xs.len(), |i| dys[i] * centred(i));
    let d_weight: Vec<f64> = (0..ch.c).map(|k| sum_dy_xc[k] * r32[k]).collect();
    let bound: Vec<f64> = ch
        .sums(xs.len(), |i| (dys[i] * centred(i) * r32[ch.at(i)]).abs())
        .iter()
        .map(|s| gamma(ch.count + 3) * s)
        .collect();
    let what = format!("batch norm d_weight {path:?}");
    within(&what, &host(&g.weight), &d_weight, &bound);

    // dx = gamma * inv_std / N * (N*dy - d_bias - x_hat * d_weight) on the run's own
    // reductions: N*dy, two subtractions, x_hat (two roundings) times d_weight, and the
    // scale's four roundings (gamma * inv_std, 1/N, its product, the final product).
    let (db32, dw32) = (host(&g.bias), host(&g.weight));
    let (exact, bound): (Vec<f64>, Vec<f64>) = (0..xs.len())
        .map(|i| {
            let k = ch.at(i);
            let a = ws[k] * r32[k];
            let x_hat_dw = centred(i) * r32[k] * dw32[k];
            let t = n * dys[i] - db32[k] - x_hat_dw;
            let dx = a / n * t;
            let e_t = 2.0 * U * n * dys[i].abs()
                + U * db32[k].abs()
                + 4.0 * U * x_hat_dw.abs()
                + U * t.abs();
            (dx, a.abs() / n * e_t + 4.0 * U * dx.abs())
        })
        .unzip();
    within(
        &format!("batch norm dx {path:?}"),
        &host(&g.x),
        &exact,
        &bound,
    );
}

/// Float32 values (rounded from `values`) and the same values in float64.
fn input_from(values: &[f64], shape: &[usize]) -> crate::precision::Input {
    let t = Tensor::from_vec(values.to_vec(), shape, &candle_core::Device::Cpu).unwrap();
    let f32 = t.to_dtype(candle_core::DType::F32).unwrap();
    let f64 = f32.to_dtype(candle_core::DType::F64).unwrap();
    crate::precision::Input { f32, f64 }
}

/// Float32 against float64 (see `precision.rs`) in inference mode, where the statistics
/// are the running ones: `inv_std = 1/sqrt(running_var + eps)` (the sum, eps's rounding,
/// the square root and the reciprocal: 3u), `scale = gamma * inv_std` (4u). The inputs sit
/// at the running mean 8 with spread 1, so an expanded `x * scale + shift` exceeds the
/// bound of the centred form.
#[test]
fn inference_mode_float32_is_within_rounding_error_bounds_of_float64() {
    for path in PATHS {
        path.scope(eval_precision_here);
    }
}

fn eval_precision_here() {
    use crate::precision::{assert_within_values as within, gamma, host, input, U};
    let path = wick_ops::KernelPath::current();
    let p = BatchNorm2dParams::default();
    let ([x, w, b, rm, rv], shape, ch) = precision_case(11, [(8.0, 0.1), (0.4, 0.2)]);
    let y = batch_norm_eval(&x.f32, &w.f32, &b.f32, &rm.f32, &rv.f32, &p).unwrap();
    let (xs, ws, bs, rms) = (host(&x.f64), host(&w.f64), host(&b.f64), host(&rm.f64));
    let inv_std: Vec<f64> = host(&rv.f64)
        .iter()
        .map(|v| 1.0 / (v + p.eps).sqrt())
        .collect();
    let centred = |i: usize| xs[i] - rms[ch.at(i)];
    // y: the subtraction (u), the scale (4u), the product (u) and the sum (u).
    let (exact, bound): (Vec<f64>, Vec<f64>) = (0..xs.len())
        .map(|i| {
            let k = ch.at(i);
            let cs = centred(i) * ws[k] * inv_std[k];
            (cs + bs[k], 6.0 * U * cs.abs() + U * (cs + bs[k]).abs())
        })
        .unzip();
    within(
        &format!("batch norm eval y {path:?}"),
        &host(&y),
        &exact,
        &bound,
    );

    let dy = input(16, &shape, 0.0, 1.0);
    let g = batch_norm_eval_backward(&dy.f32, &x.f32, &w.f32, &rm.f32, &rv.f32, &p).unwrap();
    let dys = host(&dy.f64);
    // dx = dy * scale: the scale (4u) and the product (u).
    let (exact, bound): (Vec<f64>, Vec<f64>) = (0..xs.len())
        .map(|i| {
            let dx = dys[i] * ws[ch.at(i)] * inv_std[ch.at(i)];
            (dx, 5.0 * U * dx.abs())
        })
        .unzip();
    within(
        &format!("batch norm eval dx {path:?}"),
        &host(&g.x),
        &exact,
        &bound,
    );
    // d_bias: N terms; d_weight: N products of dy and x_hat (the subtraction, inv_std's
    // 3u, the product with inv_std), N - 1 additions.
    let sum = |f: &dyn Fn(usize) -> f64| ch.sums(xs.len(), f);
    let gammas = |s: Vec<f64>, n: usize| -> Vec<f64> { s.iter().map(|v| gamma(n) * v).collect() };
    let what = format!("batch norm eval d_bias {path:?}");
    let bound = gammas(sum(&|i| dys[i].abs()), ch.count);
    within(&what, &host(&g.bias), &sum(&|i| dys[i]), &bound);
    let x_hat = |i: usize| centred(i) * inv_std[ch.at(i)];
    let what = format!("batch norm eval d_weight {path:?}");
    let bound = gammas(sum(&|i| (dys[i] * x_hat(i)).abs()), ch.count + 5);
    within(
        &what,
        &host(&g.weight),
        &sum(&|i| dys[i] * x_hat(i)),
        &bound,
    );
}
