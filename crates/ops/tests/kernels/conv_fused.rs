//! The fused convolution (`ConvBiasActivationForward`) and batch-norm folding: each equals
//! the unfused ops it replaces, on both implementation paths, in f64 (where the only
//! difference is rounding) and f32; ReLU at exactly 0 and NaN behave as `relu`'s.

use candle_core::{DType, Tensor};
use wick_ops::batchnorm::{batch_norm_eval, fold_into_conv, BatchNorm2dParams};
use wick_ops::conv::{conv2d, conv2d_fused, Conv2dParams, Epilogue};
use wick_ops::relu::relu;

use crate::common::{assert_close, assert_error_names, rand_tensor, PATHS};

/// The unfused reference: conv, + bias, + residual, relu, as separate ops.
fn unfused(x: &Tensor, w: &Tensor, epi: &Epilogue<'_>, p: &Conv2dParams) -> Tensor {
    let mut y = conv2d(x, w, epi.bias, p).unwrap();
    if let Some(r) = epi.residual {
        y = (y + r).unwrap();
    }
    if epi.relu {
        y = relu(&y).unwrap();
    }
    y
}

#[test]
fn fused_epilogues_equal_the_separate_ops() {
    // A whole-batch (small image) shape and a per-image one, strided and grouped.
    let cases = [
        (
            [2, 6, 9, 7],
            [8, 3, 3, 3],
            Conv2dParams::new(2, 1).with_groups(2),
        ),
        ([2, 4, 20, 18], [6, 4, 3, 3], Conv2dParams::new(1, 1)),
        ([1, 4, 17, 16], [6, 4, 1, 1], Conv2dParams::new(1, 0)),
        // 256 output channels: the epilogue runs on blocks of 256 columns (600 pixels:
        // 256 + 256 + 88), one image and two.
        ([1, 8, 20, 30], [256, 8, 3, 3], Conv2dParams::new(1, 1)),
        ([2, 8, 20, 30], [256, 8, 1, 1], Conv2dParams::new(1, 0)),
    ];
    for dtype in [DType::F64, DType::F32] {
        for (i, (xs, ws, p)) in cases.into_iter().enumerate() {
            let x = rand_tensor(10 + i as u64, &xs).to_dtype(dtype).unwrap();
            let w = rand_tensor(20 + i as u64, &ws).to_dtype(dtype).unwrap();
            let b = rand_tensor(30 + i as u64, &[ws[0]])
                .to_dtype(dtype)
                .unwrap();
            let out = p.output_shape(&xs, &ws).unwrap();
            let r = rand_tensor(40 + i as u64, &out).to_dtype(dtype).unwrap();
            for path in PATHS {
                for (bias, residual, relu) in [
                    (true, false, false),
                    (false, false, true),
                    (true, true, false),
                    (true, true, true),
                    (false, true, true),
                ] {
                    let epi = Epilogue {
                        bias: bias.then_some(&b),
                        residual: residual.then_some(&r),
                        relu,
                    };
                    let what = format!(
                        "{dtype:?} case {i} {path:?} bias {bias} residual {residual} relu {relu}"
                    );
                    let fused = path.scope(|| conv2d_fused(&x, &w, &epi, &p)).unwrap();
                    let reference = unfused(&x, &w, &epi, &p);
                    // The same additions in the same order: equal, not just close.
                    assert_eq!(fused.dims(), reference.dims(), "{what}");
                    let tol = if dtype == DType::F64 { 1e-15 } else { 1e-6 };
                    assert_close(&what, &fused, &reference, tol);
                }
            }
        }
    }
}

#[test]
fn fused_relu_maps_zero_and_negative_zero_to_zero_and_keeps_nan() {
    // A 1x1 convolution with weight 1 passes x through: the epilogue sees x + bias.
    let x = Tensor::new(
        &[[[[0.0f32, -0.0, -1.0, 2.0, f32::NAN]]]],
        &candle_core::Device::Cpu,
    )
    .unwrap();
    let w = Tensor::new(&[[[[1.0f32]]]], &candle_core::Device::Cpu).unwrap();
    let b = Tensor::new(&[0.0f32], &candle_core::Device::Cpu).unwrap();
    for path in PATHS {
        let epi = Epilogue {
            bias: Some(&b),
            residual: None,
            relu: true,
        };
        let y: Vec<f32> = path
            .scope(|| conv2d_fused(&x, &w, &epi, &Conv2dParams::default()))
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(y[..4], [0.0, 0.0, 0.0, 2.0], "{path:?}");
        assert!(
            y[..3].iter().all(|v| v.is_sign_positive()),
            "{path:?}: {y:?}"
        );
        assert!(y[4].is_nan(), "{path:?}: NaN must stay NaN, got {}", y[4]);
    }
}

#[test]
fn folded_batch_norm_equals_conv_then_batch_norm() {
    let p = Conv2dParams::new(2, 1);
    let bn = BatchNorm2dParams::default();
    let x = rand_tensor(1, &[2, 5, 11, 9]);
    let w = rand_tensor(2, &[7, 5, 3, 3]);
    let gamma = rand_tensor(3, &[7]).affine(0.2, 1.0).unwrap();
    let beta = rand_tensor(4, &[7]);
    let mean = rand_tensor(5, &[7]);
    let var = (rand_tensor(6, &[7]).abs().unwrap() + 0.5).unwrap();
    for dtype in [DType::F64, DType::F32] {
        let c = |t: &Tensor| t.to_dtype(dtype).unwrap();
        let (x, w) = (c(&x), c(&w));
        let (g, b, m, v) = (c(&gamma), c(&beta), c(&mean), c(&var));
        let reference =
            batch_norm_eval(&conv2d(&x, &w, None, &p).unwrap(), &g, &b, &m, &v, &bn).unwrap();
        let (fw, fb) = fold_into_conv(&w, &g, &b, &m, &v, &bn).unwrap();
        assert_eq!((fw.dtype(), fb.dims()), (dtype, [7].as_slice()));
        let folded = conv2d(&x, &fw, Some(&fb), &p).unwrap();
        // Exact algebra; f64 differs by rounding only, f32 by a few ulps of the outputs.
        let tol = if dtype == DType::F64 { 1e-13 } else { 2e-6 };
        assert_close(&format!("{dtype:?}"), &folded, &reference, tol);
    }
    // A per-channel tensor of the wrong size is an error naming it.
    assert_error_names(
        fold_into_conv(&w, &gamma, &beta, &mean, &rand_tensor(7, &[6]), &bn),
        &["running_var"],
    );
}
