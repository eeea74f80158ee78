//! The emulated CUDA kernels (f64) against the PyTorch op fixtures, as the CPU kernels are
//! checked: activations, ReLU, global average pooling, cross-entropy, and SGD with
//! momentum over the fixture's three steps (f32).

use crate::common::Fixture;
use crate::emulated::cross_entropy_emulated_f64;
use crate::emulated::{assert_near, call_backward, call_unary, host, Backward, Buf, Unary};
use candle_core::Device;
use wick_ops::activation::Activation;
use wick_ops::emulate;
use wick_ops::gpu::emulated::ffi;
use wick_ops::gpu::{ChunkTable, Launch, CHUNK_LEN};

type Forward64 = Unary<f64>;
type Backward64 = Backward<f64>;

fn v64(f: &Fixture, name: &str) -> Vec<f64> {
    host::<f64>(
        &f.t(name)
            .to_device(&Device::Cpu)
            .unwrap()
            .to_dtype(candle_core::DType::F64)
            .unwrap(),
    )
}

fn forward(k: Forward64, x: &[f64], slope: f64) -> Vec<f64> {
    call_unary(k, x, slope)
}

fn backward(k: Backward64, g: &[f64], saved: &[f64], slope: f64) -> Vec<f64> {
    call_backward(k, g, saved, slope)
}

fn kernels_of(kind: Activation) -> (&'static str, Forward64, Backward64) {
    match kind {
        Activation::Sigmoid => (
            "act_sigmoid",
            ffi::wick_emu_sigmoid_forward_f64,
            ffi::wick_emu_sigmoid_backward_f64,
        ),
        Activation::Tanh => (
            "act_tanh",
            ffi::wick_emu_tanh_forward_f64,
            ffi::wick_emu_tanh_backward_f64,
        ),
        Activation::Silu => (
            "act_silu",
            ffi::wick_emu_silu_forward_f64,
            ffi::wick_emu_silu_backward_f64,
        ),
        Activation::Gelu => (
            "act_gelu",
            ffi::wick_emu_gelu_forward_f64,
            ffi::wick_emu_gelu_backward_f64,
        ),
        Activation::GeluTanh => (
            "act_gelu_tanh",
            ffi::wick_emu_gelu_tanh_forward_f64,
            ffi::wick_emu_gelu_tanh_backward_f64,
        ),
        Activation::Relu6 => (
            "act_relu6",
            ffi::wick_emu_relu6_forward_f64,
            ffi::wick_emu_relu6_backward_f64,
        ),
        Activation::Hardswish => (
            "act_hardswish",
            ffi::wick_emu_hardswish_forward_f64,
            ffi::wick_emu_hardswish_backward_f64,
        ),
        Activation::Hardsigmoid => (
            "act_hardsigmoid",
            ffi::wick_emu_hardsigmoid_forward_f64,
            ffi::wick_emu_hardsigmoid_backward_f64,
        ),
        Activation::LeakyRelu => (
            "act_leaky_relu",
            ffi::wick_emu_leaky_relu_forward_f64,
            ffi::wick_emu_leaky_relu_backward_f64,
        ),
    }
}

#[test]
fn emulated_activations_match_the_pytorch_fixtures() {
    for kind in Activation::ALL {
        let (case, fwd, bwd) = kernels_of(kind);
        let f = Fixture::load_from("ops-tier", case);
        let slope = if kind == Activation::LeakyRelu {
            f.f64("slope")
        } else {
            0.0
        };
        let x = v64(&f, "x");
        let y = forward(fwd, &x, slope);
        assert_near(&format!("{kind:?} out"), &y, &v64(&f, "out"), 1e-12, 1e-14);
        let saved = if kind.backward_reads_output() { &y } else { &x };
        let dx = backward(bwd, &v64(&f, "grad_out"), saved, slope);
        // PyTorch's hardsigmoid gradient is the f32 constant 1/6 in every dtype.
        let tol = if kind == Activation::Hardsigmoid {
            5e-8
        } else {
            1e-12
        };
        assert_near(
            &format!("{kind:?} grad_x"),
            &dx,
            &v64(&f, "grad_x"),
            tol,
            1e-14,
        );
    }
    let f = Fixture::load("relu_with_zeros");
    let x = v64(&f, "x");
    assert_eq!(
        forward(ffi::wick_emu_relu_forward_f64, &x, 0.0),
        v64(&f, "out")
    );
    assert_eq!(
        backward(
            ffi::wick_emu_relu_backward_f64,
            &v64(&f, "grad_out"),
            &x,
            0.0
        ),
        v64(&f, "grad_x")
    );
}

#[test]
fn emulated_global_avg_pool_and_cross_entropy_match_the_pytorch_fixtures() {
    let f = Fixture::load("adaptive_avgpool_1x1");
    let dims = f.t("x").dims().to_vec();
    let (planes, hw) = (dims[0] * dims[1], dims[2] * dims[3]);
    let x = v64(&f, "x");
    let (xb, mut y) = (Buf::new("x", &x), Buf::filled("y", planes, 0f64));
    emulate!(wick_emu_global_avg_pool_forward_f64(
        Launch::global_avg_pool(planes),
        xb.ptr(),
        y.mut_ptr(),
        planes as i64,
        hw as i32
    ))
    .unwrap();
    assert_near("pool out", &y.values(), &v64(&f, "out"), 1e-14, 0.0);
    let (gb, mut dx) = (
        Buf::new("g", &v64(&f, "grad_out")),
        Buf::filled("dx", x.len(), 0f64),
    );
    emulate!(wick_emu_global_avg_pool_backward_f64(
        Launch::elementwise(x.len()),
        gb.ptr(),
        dx.mut_ptr(),
        x.len() as i64,
        hw as i32
    ))
    .unwrap();
    assert_near("pool grad_x", &dx.values(), &v64(&f, "grad_x"), 1e-14, 0.0);

    let f = Fixture::load("cross_entropy");
    let (_, classes) = f.t("logits").dims2().unwrap();
    let labels: Vec<u32> = v64(&f, "labels").iter().map(|&l| l as u32).collect();
    let logits = v64(&f, "logits");
    let grad = v64(&f, "grad_out")[0];
    let (loss, dx) = cross_entropy_emulated_f64(&logits, &labels, classes, grad);
    assert_near("loss", &[loss], &v64(&f, "out"), 1e-12, 0.0);
    assert_near("grad_logits", &dx, &v64(&f, "grad_logits"), 1e-12, 1e-15);
}

#[test]
fn emulated_sgd_matches_the_pytorch_fixture_over_three_steps() {
    let f = Fixture::load("sgd_momentum");
    let v32 = |name: &str| host::<f32>(&f.t(name).to_device(&Device::Cpu).unwrap());
    let param = v32("param_before");
    let n = param.len();
    let table = ChunkTable::new("sgd", &[n], CHUNK_LEN).unwrap();
    let (mut p, mut b) = (Buf::new("param", &param), Buf::filled("momentum", n, 0f32));
    for step in 0..3 {
        let g = Buf::new("grad", &v32(&format!("grad_step{step}")));
        let (pp, gp, bp) = ([p.mut_ptr()], [g.ptr()], [b.mut_ptr()]);
        let mut flags = Buf::filled("non_finite", 1, 0u32);
        emulate!(wick_emu_sgd_multi_tensor_f32(
            Launch::multi_tensor(&table),
            pp.as_ptr(),
            gp.as_ptr(),
            bp.as_ptr(),
            table.sizes.as_ptr(),
            table.tensor.as_ptr(),
            table.start.as_ptr(),
            table.chunks(),
            table.chunk_len,
            f.f64("lr") as f32,
            f.f64("momentum") as f32,
            f.f64("dampening") as f32,
            f.f64("weight_decay") as f32,
            0,
            (step == 0) as i32,
            flags.mut_ptr()
        ))
        .unwrap();
        assert_eq!(flags.values(), [0]);
        let after = step + 1;
        assert_near(
            &format!("param after step {after}"),
            &p.values(),
            &v32(&format!("param_after_step{after}")),
            1e-6,
            1e-7,
        );
        assert_near(
            &format!("buffer after step {after}"),
            &b.values(),
            &v32(&format!("momentum_buf_after_step{after}")),
            1e-6,
            1e-7,
        );
    }
}
