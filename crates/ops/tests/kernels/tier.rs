//! The second op tier against PyTorch (fixtures/ops-tier, float64): activations with
//! their kinks, broadcasting arithmetic, softmax, layer, RMS and group norm, MSE and BCE; on
//! wick's CPU kernels and on the device-generic path; and in float32 against float64.

use candle_core::{DType, Tensor};
use wick_ops::activation::{self, Activation};
use wick_ops::broadcast::{self, BinaryOp, Operand};
use wick_ops::norm;
use wick_ops::regression_loss::{self, ElementwiseLoss};

use crate::common::*;

fn tier(case: &str) -> Fixture {
    Fixture::load_from("ops-tier", case)
}

fn case_of(kind: Activation) -> &'static str {
    match kind {
        Activation::Sigmoid => "act_sigmoid",
        Activation::Tanh => "act_tanh",
        Activation::Silu => "act_silu",
        Activation::Gelu => "act_gelu",
        Activation::GeluTanh => "act_gelu_tanh",
        Activation::Relu6 => "act_relu6",
        Activation::Hardswish => "act_hardswish",
        Activation::Hardsigmoid => "act_hardsigmoid",
        Activation::LeakyRelu => "act_leaky_relu",
    }
}

#[test]
fn activations_match_pytorch_at_random_points_and_kinks() {
    for path in PATHS {
        let _on = path.enter();
        for kind in Activation::ALL {
            let f = tier(case_of(kind));
            let slope = if kind == Activation::LeakyRelu {
                f.f64("slope")
            } else {
                0.0
            };
            let x = f.t("x");
            let y = activation::forward(kind, slope, x).unwrap();
            // The generic path's erf is candle's approximation: 1e-7 where the CPU's is exact.
            let tol = if path == wick_ops::KernelPath::Generic {
                1e-6
            } else {
                1e-12
            };
            assert_close(&format!("{kind:?} out ({path:?})"), &y, f.t("out"), tol);
            let saved = if kind.backward_reads_output() { &y } else { x };
            let dx = activation::backward(kind, slope, f.t("grad_out"), saved).unwrap();
            // PyTorch's hardsigmoid gradient is the f32 constant 1/6 in every dtype; wick's
            // is 1/6 in the tensor's dtype.
            let tol = if kind == Activation::Hardsigmoid {
                tol.max(5e-8)
            } else {
                tol
            };
            assert_close(
                &format!("{kind:?} grad ({path:?})"),
                &dx,
                f.t("grad_x"),
                tol,
            );
        }
    }
}

#[test]
fn activations_in_f32_round_the_f64_result() {
    for kind in Activation::ALL {
        let f = tier(case_of(kind));
        let slope = if kind == Activation::LeakyRelu {
            0.2
        } else {
            0.0
        };
        let x32 = f.t("x").to_dtype(DType::F32).unwrap();
        let y32 = activation::forward(kind, slope, &x32).unwrap();
        let y64 = activation::forward(kind, slope, &x32.to_dtype(DType::F64).unwrap()).unwrap();
        // Computed in f64 and rounded once, or in f32 (the piecewise-linear ones, as
        // PyTorch does; sigmoid and SiLU on a vectorised exp): within 4 f32 ulp of the
        // f64 result, relative to the largest value.
        let y32 = y32.to_dtype(DType::F64).unwrap();
        assert_close(&format!("{kind:?} f32"), &y32, &y64, 4.8e-7);
        let g32 = f.t("grad_out").to_dtype(DType::F32).unwrap();
        let g64 = g32.to_dtype(DType::F64).unwrap();
        let x64 = x32.to_dtype(DType::F64).unwrap();
        let (s32, s64) = if kind.backward_reads_output() {
            (y32.to_dtype(DType::F32).unwrap(), y64.clone())
        } else {
            (x32.clone(), x64)
        };
        let d32 = activation::backward(kind, slope, &g32, &s32).unwrap();
        let d64 = activation::backward(kind, slope, &g64, &s64).unwrap();
        let d32 = d32.to_dtype(DType::F64).unwrap();
        assert_close(&format!("{kind:?} f32 gradient"), &d32, &d64, 1e-6);
        // An output gradient of another dtype than the saved tensor is refused.
        assert_error_names(
            activation::backward(kind, slope, &g64, &s32),
            &[kind.backward_name(), "output gradient", "F64", "F32"],
        );
    }
}

#[test]
fn activation_gradients_match_finite_differences() {
    // Away from the kinks, where the derivative is defined.
    let x = (rand_tensor(7, &[3, 4, 5]) * 2.9).unwrap();
    let g = rand_tensor(8, &[3, 4, 5]);
    for kind in Activation::ALL {
        let slope = 0.3;
        let y = activation::forward(kind, slope, &x).unwrap();
        let saved = if kind.backward_reads_output() { &y } else { &x };
        let dx = activation::backward(kind, slope, &g, saved).unwrap();
        let numeric = numeric_grad(|t| activation::forward(kind, slope, t).unwrap(), &x, &g);
        assert_close(&format!("{kind:?}"), &dx, &numeric, FD_TOL);
    }
}

fn binary_op(name: &str) -> BinaryOp {
    match name {
        "mul" => BinaryOp::Mul,
        "sub" => BinaryOp::Sub,
        "div" => BinaryOp::Div,
        "add" => BinaryOp::Add,
        other => panic!("unknown op {other}"),
    }
}

/// A two-operand op against fixture `f`: its output `out` within 1e-14, and the gradient
/// of each operand (`grad(Lhs)`, `grad(Rhs)`) against the fixture's `names`, within `tol`.
fn check_two_operands(
    what: &str,
    f: &Fixture,
    out: &Tensor,
    grad: impl Fn(Operand) -> Tensor,
    (names, tol): ([&str; 2], f64),
) {
    assert_close(what, out, f.t("out"), 1e-14);
    for (side, name) in [Operand::Lhs, Operand::Rhs].into_iter().zip(names) {
        assert_close(&format!("{what} {name}"), &grad(side), f.t(name), tol);
    }
}

#[test]
fn broadcasting_arithmetic_matches_pytorch_with_gradients_summed_back() {
    for path in PATHS {
        let _on = path.enter();
        for op in ["mul", "sub", "div", "add"] {
            for shapes in ["same", "se", "layer_scale", "row"] {
                let f = tier(&format!("binary_{op}_{shapes}"));
                let (a, b, gy) = (f.t("a"), f.t("b"), f.t("grad_out"));
                let kind = binary_op(op);
                check_two_operands(
                    &format!("{op} {shapes} ({path:?})"),
                    &f,
                    &broadcast::forward(kind, a, b).unwrap(),
                    |side| broadcast::backward(kind, side, gy, a, b).unwrap(),
                    (["grad_a", "grad_b"], 1e-12),
                );
            }
        }
    }
}

#[test]
fn shapes_that_do_not_broadcast_are_errors_naming_both() {
    let a = Tensor::zeros((2, 3, 4), DType::F32, &candle_core::Device::Cpu).unwrap();
    let b = Tensor::zeros((2, 1, 5), DType::F32, &candle_core::Device::Cpu).unwrap();
    assert_error_names(
        broadcast::forward(BinaryOp::Mul, &a, &b),
        &["Mul", "[2, 3, 4]", "[2, 1, 5]"],
    );
}

#[test]
fn softmax_and_norms_match_pytorch() {
    for path in PATHS {
        let _on = path.enter();
        let f = tier("softmax_dim1");
        let y = norm::softmax(f.t("x"), 1).unwrap();
        assert_close("softmax", &y, f.t("out"), 1e-14);
        let dx = norm::softmax_backward(f.t("grad_out"), &y, 1).unwrap();
        assert_close("softmax grad", &dx, f.t("grad_x"), 1e-12);

        let f = tier("layer_norm");
        let (x, w, b, eps) = (f.t("x"), f.t("weight"), f.t("bias"), f.f64("eps"));
        let y = norm::layer_norm(x, Some(w), Some(b), eps).unwrap();
        assert_close("layer_norm", &y, f.t("out"), 1e-12);
        let g = norm::layer_norm_backward(f.t("grad_out"), x, Some(w), true, eps).unwrap();
        assert_norm_grads("layer_norm", g, &f);

        let f = tier("rms_norm");
        let (x, w, eps) = (f.t("x"), f.t("weight"), f.f64("eps"));
        let y = norm::rms_norm(x, Some(w), eps).unwrap();
        assert_close("rms_norm", &y, f.t("out"), 1e-12);
        let g = norm::rms_norm_backward(f.t("grad_out"), x, Some(w), eps).unwrap();
        assert_close("rms_norm grad x", &g.input, f.t("grad_x"), 1e-11);
        let weight = g.weight.expect("a weight gradient");
        assert_close("rms_norm grad w", &weight, f.t("grad_weight"), 1e-12);
        assert!(g.bias.is_none());

        // PyTorch's eps=None: float64's machine epsilon, which wick's default must be.
        let f = tier("rms_norm_default_eps");
        let eps = norm::rms_norm_default_eps(DType::F64).unwrap();
        assert_eq!(eps, f.f64("eps"));
        let x = f.t("x");
        assert_close(
            "rms_norm eps=None",
            &norm::rms_norm(x, None, eps).unwrap(),
            f.t("out"),
            1e-13,
        );
        let g = norm::rms_norm_backward(f.t("grad_out"), x, None, eps).unwrap();
        assert_close("rms_norm eps=None grad x", &g.input, f.t("grad_x"), 1e-12);
        assert!(g.weight.is_none() && g.bias.is_none());

        let f = tier("group_norm");
        let (x, w, b, eps) = (f.t("x"), f.t("weight"), f.t("bias"), f.f64("eps"));
        let groups = f.usize("groups");
        let y = norm::group_norm(x, groups, Some(w), Some(b), eps).unwrap();
        assert_close("group_norm", &y, f.t("out"), 1e-12);
        let g = norm::group_norm_backward(f.t("grad_out"), x, groups, Some(w), true, eps).unwrap();
        assert_norm_grads("group_norm", g, &f);
    }
}

/// A norm's input, weight and bias gradients against the fixture's.
fn assert_norm_grads(name: &str, g: norm::NormGrads, f: &Fixture) {
    assert_close(&format!("{name} grad x"), &g.input, f.t("grad_x"), 1e-11);
    let weight = g.weight.expect("a weight gradient");
    assert_close(
        &format!("{name} grad w"),
        &weight,
        f.t("grad_weight"),
        1e-12,
    );
    let bias = g.bias.expect("a bias gradient");
    assert_close(&format!("{name} grad b"), &bias, f.t("grad_bias"), 1e-12);
}

#[test]
fn group_norm_rejects_channels_that_do_not_split() {
    let x = Tensor::zeros((2, 6, 3, 3), DType::F32, &candle_core::Device::Cpu).unwrap();
    assert_error_names(
        norm::group_norm(&x, 4, None, None, 1e-5),
        &["group_norm", "6 channels", "4 groups"],
    );
}

#[test]
fn mse_and_bce_match_pytorch_for_input_and_target() {
    for (case, kind) in [
        ("mse_loss", ElementwiseLoss::Mse),
        ("bce_with_logits", ElementwiseLoss::BceWithLogits),
    ] {
        let f = tier(case);
        let (x, t, g) = (f.t("input"), f.t("target"), f.t("grad_out"));
        check_two_operands(
            case,
            &f,
            &regression_loss::forward(kind, x, t).unwrap(),
            |side| regression_loss::backward(kind, side, g, x, t).unwrap(),
            (["grad_input", "grad_target"], 1e-13),
        );
    }
}

#[test]
fn plane_broadcasts_on_the_cpu_match_the_generic_path_in_both_orders() {
    let shapes: [(&[usize], &[usize]); 5] = [
        (&[2, 3, 4, 5], &[3, 1, 1]),
        (&[2, 3, 4, 5], &[2, 3, 1, 1]),
        (&[2, 3, 4, 5], &[1, 3, 1, 1]),
        (&[2, 3, 4, 5], &[5]),
        (&[4, 6], &[4, 1]),
    ];
    for (i, (big, small)) in shapes.into_iter().enumerate() {
        let x = rand_tensor(40 + i as u64, big);
        let s = (rand_tensor(50 + i as u64, small) + 2.0).unwrap();
        for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div] {
            for (a, b) in [(&x, &s), (&s, &x)] {
                let y = broadcast::forward(op, a, b).unwrap();
                let gy = rand_tensor(60 + i as u64, y.dims());
                let grads = |on_generic: bool| {
                    let run = || {
                        (
                            broadcast::forward(op, a, b).unwrap(),
                            broadcast::backward(op, Operand::Lhs, &gy, a, b).unwrap(),
                            broadcast::backward(op, Operand::Rhs, &gy, a, b).unwrap(),
                        )
                    };
                    if on_generic {
                        wick_ops::KernelPath::Generic.scope(run)
                    } else {
                        run()
                    }
                };
                let (cpu, generic) = (grads(false), grads(true));
                let what = format!("{op:?} {:?} with {:?}", a.dims(), b.dims());
                assert_close(&format!("{what} forward"), &cpu.0, &generic.0, 1e-15);
                assert_close(&format!("{what} grad lhs"), &cpu.1, &generic.1, 1e-13);
                assert_close(&format!("{what} grad rhs"), &cpu.2, &generic.2, 1e-13);
            }
        }
    }
}

#[test]
fn upsampling_and_transposed_convolution_match_pytorch() {
    use wick_ops::conv::{transpose, Conv2dParams};
    use wick_ops::resample::{self, UpsampleMode};
    for path in PATHS {
        let _on = path.enter();
        for (case, mode) in [
            ("upsample_nearest", UpsampleMode::Nearest),
            ("upsample_bilinear", UpsampleMode::Bilinear),
        ] {
            let f = tier(case);
            let x = f.t("x");
            let out = [f.usize("out_h"), f.usize("out_w")];
            assert_close(
                case,
                &resample::forward(x, out, mode).unwrap(),
                f.t("out"),
                1e-14,
            );
            let input = [x.dims()[0], x.dims()[1], x.dims()[2], x.dims()[3]];
            let dx = resample::backward(f.t("grad_out"), input, mode).unwrap();
            assert_close(&format!("{case} grad"), &dx, f.t("grad_x"), 1e-14);
        }
        let f = tier("conv_transpose2d");
        let p =
            Conv2dParams::new(f.usize("stride"), f.usize("padding")).with_groups(f.usize("groups"));
        let op = f.usize("output_padding");
        let (x, w, b, gy) = (f.t("x"), f.t("weight"), f.t("bias"), f.t("grad_out"));
        let y = transpose::forward(x, w, Some(b), &p, [op, op]).unwrap();
        assert_close(
            &format!("conv_transpose2d ({path:?})"),
            &y,
            f.t("out"),
            1e-13,
        );
        let dx = transpose::backward_data(gy, w, &p).unwrap();
        assert_close("conv_transpose2d grad x", &dx, f.t("grad_x"), 1e-13);
        let dw = transpose::backward_filter(gy, x, w.dims(), &p).unwrap();
        assert_close("conv_transpose2d grad w", &dw, f.t("grad_weight"), 1e-13);
        let db = wick_ops::conv::conv2d_backward_bias(gy).unwrap();
        assert_close("conv_transpose2d grad b", &db, f.t("grad_bias"), 1e-13);
    }
}

#[test]
fn transposed_convolution_settings_are_checked() {
    use wick_ops::conv::{transpose, Conv2dParams};
    let p = Conv2dParams::new(2, 1);
    assert_error_names(
        transpose::output_shape(&[1, 4, 5, 5], &[4, 3, 3, 3], &p, [2, 2]),
        &["output padding 2", "stride 2"],
    );
    assert_error_names(
        transpose::output_shape(&[1, 5, 5, 5], &[4, 3, 3, 3], &p, [0, 0]),
        &["5 channels", "expects 4"],
    );
    assert_eq!(
        transpose::output_shape(&[1, 4, 5, 6], &[4, 3, 3, 3], &p, [1, 1]).unwrap(),
        [1, 3, 10, 12]
    );
}
