//! The fused training kernels: batch norm + ReLU forward and backward, add + ReLU. Each
//! equals the unfused ops it replaces (bit for bit on wick's CPU path, which does the same
//! arithmetic in the same order; to rounding on the device-generic path), their gradients
//! match finite differences, and ReLU's mask at exactly 0 passes no gradient.

use candle_core::{DType, Device, Tensor};
use wick_ops::batchnorm::*;
use wick_ops::elementwise::{add, add_relu};
use wick_ops::relu::{relu, relu_backward};
use wick_ops::KernelPath;

use crate::common::*;

use crate::precision::host as values;

/// A batch whose channel 0 holds x = its mean exactly at some elements (values
/// symmetric around 0), so that with bias 0 the normalised output is exactly 0 there.
fn batch_with_exact_zeros() -> Tensor {
    let mut v = values(&rand_tensor(11, &[2, 2, 3, 4]));
    for (i, x) in v.iter_mut().enumerate().take(12) {
        *x = [-1.5, -0.5, 0.0, 0.5, 1.5, 0.0][i % 6];
    }
    // Channel 0 of image 1: the same values, so the channel's mean is exactly 0.
    for i in 0..12 {
        v[24 + i] = v[i];
    }
    Tensor::from_vec(v, (2, 2, 3, 4), &Device::Cpu).unwrap()
}

#[test]
fn batch_norm_relu_equals_batch_norm_then_relu() {
    let p = BatchNorm2dParams::default();
    let x = batch_with_exact_zeros();
    let w = Tensor::new(&[1.3f64, 0.7], &Device::Cpu).unwrap();
    let b = Tensor::new(&[0.0f64, 0.2], &Device::Cpu).unwrap();
    let (rm, rv) = (
        rand_tensor(4, &[2]),
        (rand_tensor(5, &[2]).abs().unwrap() + 0.5).unwrap(),
    );
    let gz = rand_tensor(6, &[2, 2, 3, 4]);
    for dtype in [DType::F64, DType::F32] {
        let c = |t: &Tensor| t.to_dtype(dtype).unwrap();
        let (x, w, b, rm, rv, gz) = (c(&x), c(&w), c(&b), c(&rm), c(&rv), c(&gz));
        for path in PATHS {
            let what = format!("{dtype:?} {path:?}");
            let (plain, fused) = path.scope(|| {
                (
                    batch_norm_train(&x, &w, &b, &rm, &rv, &p).unwrap(),
                    batch_norm_relu_train(&x, &w, &b, &rm, &rv, &p).unwrap(),
                )
            });
            let z = relu(&plain.y).unwrap();
            // Channel 0 has outputs of exactly 0 (x at the mean, bias 0).
            let zeros = values(&plain.y)[..12].iter().filter(|v| **v == 0.0).count();
            assert!(zeros >= 2, "{what}: the batch has no exact zeros ({zeros})");
            assert_eq!(values(&fused.y), values(&z), "{what}: forward");
            for (a, b) in [
                (&fused.mean, &plain.mean),
                (&fused.inv_std, &plain.inv_std),
                (&fused.running_mean, &plain.running_mean),
                (&fused.running_var, &plain.running_var),
            ] {
                assert_eq!(values(a), values(b), "{what}: statistics");
            }
            let (reference, grads) = path.scope(|| {
                let gy = relu_backward(&gz, &z).unwrap();
                (
                    batch_norm_train_backward(&gy, &x, &w, &plain.mean, &plain.inv_std).unwrap(),
                    batch_norm_relu_train_backward(
                        &gz,
                        &fused.y,
                        &x,
                        &w,
                        &fused.mean,
                        &fused.inv_std,
                    )
                    .unwrap(),
                )
            });
            let exact = path == KernelPath::Auto;
            for (name, a, b) in [
                ("dx", &grads.x, &reference.x),
                ("dweight", &grads.weight, &reference.weight),
                ("dbias", &grads.bias, &reference.bias),
            ] {
                if exact {
                    assert_eq!(values(a), values(b), "{what}: {name}");
                } else {
                    assert_close(&format!("{what}: {name}"), a, b, 1e-6);
                }
            }
        }
    }
}

#[test]
fn batch_norm_relu_gradients_match_finite_differences() {
    // Random inputs: no output sits at ReLU's kink, so central differences are exact to
    // their truncation error.
    let p = BatchNorm2dParams::default();
    let shape = [3, 2, 4, 3];
    let BatchNormCase { x, w, b, rm, rv, g } = batch_norm_case(1, &shape);
    let fwd = |x: &Tensor, w: &Tensor, b: &Tensor| {
        batch_norm_relu_train(x, w, b, &rm, &rv, &p).unwrap().y
    };
    let out = batch_norm_relu_train(&x, &w, &b, &rm, &rv, &p).unwrap();
    // Both sides of the kink, and no pre-ReLU output within reach of the differences' step.
    let pre = values(&batch_norm_train(&x, &w, &b, &rm, &rv, &p).unwrap().y);
    let positive = pre.iter().filter(|v| **v > 0.0).count();
    assert!(
        positive > 0 && positive < pre.len(),
        "{positive} of {} positive",
        pre.len()
    );
    assert!(pre.iter().all(|v| v.abs() > 1e-4), "an output at the kink");
    let grads =
        batch_norm_relu_train_backward(&g, &out.y, &x, &w, &out.mean, &out.inv_std).unwrap();
    for (name, analytic, numeric) in [
        ("dx", &grads.x, numeric_grad(|x| fwd(x, &w, &b), &x, &g)),
        (
            "dweight",
            &grads.weight,
            numeric_grad(|w| fwd(&x, w, &b), &w, &g),
        ),
        (
            "dbias",
            &grads.bias,
            numeric_grad(|b| fwd(&x, &w, b), &b, &g),
        ),
    ] {
        assert_close(name, analytic, &numeric, FD_TOL);
    }
}

#[test]
fn the_fused_mask_passes_no_gradient_at_exactly_zero() {
    // One channel, all of whose outputs but one are 0 after the ReLU: only that one's
    // gradient reaches the sums. With every output at or below 0, no gradient passes at all.
    let p = BatchNorm2dParams::default();
    let x = Tensor::new(&[[[[-1.0f64, 0.0, 0.0, 1.0]]]], &Device::Cpu).unwrap();
    let (w, b) = (
        Tensor::new(&[1.0f64], &Device::Cpu).unwrap(),
        Tensor::new(&[0.0f64], &Device::Cpu).unwrap(),
    );
    let (rm, rv) = (
        Tensor::new(&[0.0f64], &Device::Cpu).unwrap(),
        Tensor::new(&[1.0f64], &Device::Cpu).unwrap(),
    );
    let out = batch_norm_relu_train(&x, &w, &b, &rm, &rv, &p).unwrap();
    let z = values(&out.y);
    assert_eq!(z[..3], [0.0, 0.0, 0.0]);
    assert!(z[3] > 0.0);
    let gz = Tensor::new(&[[[[5.0f64, 7.0, 11.0, 13.0]]]], &Device::Cpu).unwrap();
    let g = batch_norm_relu_train_backward(&gz, &out.y, &x, &w, &out.mean, &out.inv_std).unwrap();
    // d bias = sum of the passed gradient: only 13 (z > 0), not the 7 and 11 at exactly 0.
    assert_eq!(values(&g.bias), [13.0]);
    let none = batch_norm_relu_train_backward(
        &gz,
        &out.y.zeros_like().unwrap(),
        &x,
        &w,
        &out.mean,
        &out.inv_std,
    )
    .unwrap();
    assert_eq!(values(&none.bias), [0.0]);
    assert!(values(&none.x).iter().all(|v| *v == 0.0));
}

#[test]
fn add_relu_equals_add_then_relu_with_zeros_and_nan() {
    let a = Tensor::new(&[1.0f32, -1.0, 0.5, f32::NAN, -0.0, 2.0], &Device::Cpu).unwrap();
    let b = Tensor::new(&[-1.0f32, 0.5, -1.0, 1.0, 0.0, 0.25], &Device::Cpu).unwrap();
    for path in PATHS {
        let (fused, reference) = path.scope(|| {
            (
                add_relu(&a, &b).unwrap(),
                relu(&add(&a, &b).unwrap()).unwrap(),
            )
        });
        let (f, r): (Vec<f32>, Vec<f32>) = (fused.to_vec1().unwrap(), reference.to_vec1().unwrap());
        assert!(f[3].is_nan() && r[3].is_nan(), "{path:?}: NaN kept");
        for i in [0, 1, 2, 4, 5] {
            assert_eq!(f[i].to_bits(), r[i].to_bits(), "{path:?}: element {i}");
        }
        assert_eq!(f[0], 0.0);
    }
    assert_error_names(
        add_relu(&a, &b.reshape((2, 3)).unwrap()),
        &["[6]", "[2, 3]"],
    );
}

#[test]
fn batch_norm_backward_on_the_cpu_matches_the_generic_path_for_small_and_large_planes() {
    // Planes under 256 values run plane by plane in memory order, larger ones channel by
    // channel (two CPU schedules of the same sums): both against the device-generic path.
    for shape in [[4, 3, 5, 7], [2, 3, 16, 17], [1, 2, 40, 40]] {
        let c = shape[1];
        let x = rand_tensor(21, &shape);
        let w = (rand_tensor(22, &[c]).abs().unwrap() + 0.5).unwrap();
        let z = rand_tensor(23, &shape);
        let gz = rand_tensor(24, &shape);
        let mean = rand_tensor(25, &[c]);
        let inv_std = (rand_tensor(26, &[c]).abs().unwrap() + 0.5).unwrap();
        let [cpu, generic] = PATHS.map(|path| {
            path.scope(|| {
                (
                    batch_norm_relu_train_backward(&gz, &z, &x, &w, &mean, &inv_std).unwrap(),
                    batch_norm_train_backward(&gz, &x, &w, &mean, &inv_std).unwrap(),
                )
            })
        });
        for (what, a, b) in [("fused", &cpu.0, &generic.0), ("plain", &cpu.1, &generic.1)] {
            for (name, u, v) in [
                ("dx", &a.x, &b.x),
                ("dweight", &a.weight, &b.weight),
                ("dbias", &a.bias, &b.bias),
            ] {
                assert_close(&format!("{shape:?} {what} {name}"), u, v, 1e-12);
            }
        }
    }
}
