//! Batch norm's CUDA kernels (crates/ops/cuda/batchnorm.cu), emulated on the CPU with the
//! launch wick computes, against wick's CPU kernels (f32) and the PyTorch fixture (f64).

use crate::common::Fixture;
use crate::emulated::{assert_near, f32s, host, tensor, uniform, Buf};
use candle_core::Tensor;
use wick_ops::batchnorm::*;
use wick_ops::emulate;
use wick_ops::gpu::{batch_norm_workspace_bytes, Launch};
use wick_ops::DeviceKind;

/// What the emulated training forward and backward give.
pub(crate) struct Emulated<T> {
    pub y: Vec<T>,
    pub mean: Vec<T>,
    pub inv_std: Vec<T>,
    pub running_mean: Vec<T>,
    pub running_var: Vec<T>,
    pub grad_x: Vec<T>,
    pub grad_weight: Vec<T>,
    pub grad_bias: Vec<T>,
}

/// Per-channel inputs: weight, bias, running mean, running variance.
pub(crate) struct Channels<T> {
    pub w: Vec<T>,
    pub b: Vec<T>,
    pub rm: Vec<T>,
    pub rv: Vec<T>,
}

/// The training kernels of one dtype through the emulator: `$t` the tensors' element type
/// (u16 for bf16 and f16 bits), `$a` the accumulator the partial moments are kept in,
/// `$dtype` the tensors' dtype (which sizes the workspace).
macro_rules! train_emulated {
    ($t:ty, $a:ty, $dtype:expr, $moments:ident, $forward:ident, $sums:ident, $backward:ident) => {
        |shape: [usize; 4],
         x: &[$t],
         ch: &Channels<$t>,
         g: &[$t],
         relu: bool,
         p: &BatchNorm2dParams|
         -> Emulated<$t> {
            let [n, c, h, w] = shape;
            let total = x.len();
            let launch = Launch::batch_norm("batch_norm", n, c, h * w).unwrap();
            let (ni, ci, hwi) = (n as i32, c as i32, (h * w) as i32);
            let xb = Buf::new("x", x);
            // The scratch as the executor lends it: sized by the memory plan's figure, one
            // buffer for the forward and then the backward. Its guard zones catch a
            // figure smaller than what the kernels write.
            let bytes = batch_norm_workspace_bytes(DeviceKind::Cuda, &shape, $dtype) as usize;
            let mut scratch =
                Buf::filled("workspace", bytes / std::mem::size_of::<$a>(), 0.0 as $a);
            emulate!($moments(launch, xb.ptr(), scratch.mut_ptr(), ni, ci, hwi)).unwrap();
            let (wb, bb, rmb, rvb) = (
                Buf::new("w", &ch.w),
                Buf::new("b", &ch.b),
                Buf::new("rm", &ch.rm),
                Buf::new("rv", &ch.rv),
            );
            let mut y = Buf::filled("y", total, 0.0 as $t);
            let zero = |name| Buf::filled(name, c, 0.0 as $t);
            let (mut mean, mut inv_std, mut rm_out, mut rv_out) = (
                zero("mean"),
                zero("inv_std"),
                zero("rm_out"),
                zero("rv_out"),
            );
            emulate!($forward(
                launch,
                xb.ptr(),
                y.mut_ptr(),
                scratch.ptr(),
                wb.ptr(),
                bb.ptr(),
                rmb.ptr(),
                rvb.ptr(),
                mean.mut_ptr(),
                inv_std.mut_ptr(),
                rm_out.mut_ptr(),
                rv_out.mut_ptr(),
                ni,
                ci,
                hwi,
                relu as i32,
                p.eps,
                p.momentum
            ))
            .unwrap();
            // Backward: the ReLU variant masks by the forward's output.
            let gb = Buf::new("g", g);
            let z = if relu { y.ptr() } else { std::ptr::null() };
            emulate!($sums(
                launch,
                gb.ptr(),
                z,
                xb.ptr(),
                mean.ptr(),
                scratch.mut_ptr(),
                ni,
                ci,
                hwi
            ))
            .unwrap();
            let mut gx = Buf::filled("grad_x", total, 0.0 as $t);
            let (mut gw, mut gbias) = (zero("grad_weight"), zero("grad_bias"));
            emulate!($backward(
                launch,
                gb.ptr(),
                z,
                xb.ptr(),
                wb.ptr(),
                mean.ptr(),
                inv_std.ptr(),
                scratch.ptr(),
                gx.mut_ptr(),
                gw.mut_ptr(),
                gbias.mut_ptr(),
                ni,
                ci,
                hwi
            ))
            .unwrap();
            scratch.values();
            Emulated {
                y: y.values(),
                mean: mean.values(),
                inv_std: inv_std.values(),
                running_mean: rm_out.values(),
                running_var: rv_out.values(),
                grad_x: gx.values(),
                grad_weight: gw.values(),
                grad_bias: gbias.values(),
            }
        }
    };
}

pub(crate) use train_emulated;

/// The f32 training kernels through the emulator.
macro_rules! train_emulated_f32 {
    () => {
        train_emulated!(
            f32,
            f32,
            candle_core::DType::F32,
            wick_emu_batch_norm_moments_f32,
            wick_emu_batch_norm_train_forward_f32,
            wick_emu_batch_norm_backward_sums_f32,
            wick_emu_batch_norm_train_backward_f32
        )
    };
}

#[test]
fn emulated_batch_norm_training_matches_the_cpu_kernels() {
    let run = train_emulated_f32!();
    let p = BatchNorm2dParams::default();
    // Two values per channel; 1x1 planes; 1000+ channels; several blocks per channel,
    // evenly (2592 values in 3 ranges) and with a last one short (5001 in 5 ranges of
    // 1001); odd plane sizes; batch 1.
    for shape in [
        [1, 1, 1, 2],
        [4, 3, 1, 1],
        [1, 1001, 1, 2],
        [1, 1, 1, 5001],
        [32, 16, 9, 9],
        [3, 2, 33, 31],
    ] {
        let [n, c, h, w] = shape;
        let total = n * c * h * w;
        let x = f32s(
            &uniform(1, total, 2.0)
                .iter()
                .map(|v| v + 0.5)
                .collect::<Vec<_>>(),
        );
        let g = f32s(&uniform(2, total, 1.0));
        let ch = Channels {
            w: f32s(&uniform(3, c, 1.0)),
            b: f32s(&uniform(4, c, 1.0)),
            rm: f32s(&uniform(5, c, 1.0)),
            rv: f32s(
                &uniform(6, c, 0.5)
                    .iter()
                    .map(|v| v + 1.0)
                    .collect::<Vec<_>>(),
            ),
        };
        let t = |v: &Vec<f32>| tensor(v, &[c]);
        let (xt, gt) = (tensor(&x, &shape), tensor(&g, &shape));
        for relu in [false, true] {
            let e = run(shape, &x, &ch, &g, relu, &p);
            let train = if relu {
                batch_norm_relu_train
            } else {
                batch_norm_train
            };
            let cpu = train(&xt, &t(&ch.w), &t(&ch.b), &t(&ch.rm), &t(&ch.rv), &p).unwrap();
            let what = |part: &str| format!("{part}, {shape:?}, relu {relu}");
            assert_near(&what("y"), &e.y, &host::<f32>(&cpu.y), 1e-5, 1e-5);
            assert_near(&what("mean"), &e.mean, &host::<f32>(&cpu.mean), 1e-5, 1e-6);
            assert_near(
                &what("inv_std"),
                &e.inv_std,
                &host::<f32>(&cpu.inv_std),
                1e-5,
                0.0,
            );
            assert_near(
                &what("running_mean"),
                &e.running_mean,
                &host::<f32>(&cpu.running_mean),
                1e-5,
                1e-6,
            );
            assert_near(
                &what("running_var"),
                &e.running_var,
                &host::<f32>(&cpu.running_var),
                1e-5,
                0.0,
            );
            let grads = if relu {
                batch_norm_relu_train_backward(&gt, &cpu.y, &xt, &t(&ch.w), &cpu.mean, &cpu.inv_std)
            } else {
                batch_norm_train_backward(&gt, &xt, &t(&ch.w), &cpu.mean, &cpu.inv_std)
            }
            .unwrap();
            // The input gradient subtracts two means from g: compare relative to its scale.
            let scale = host::<f32>(&grads.x)
                .iter()
                .fold(0f32, |m, v| m.max(v.abs()));
            assert_near(
                &what("grad_x"),
                &e.grad_x,
                &host::<f32>(&grads.x),
                0.0,
                2e-5 * f64::from(scale.max(1e-3)),
            );
            assert_near(
                &what("grad_weight"),
                &e.grad_weight,
                &host::<f32>(&grads.weight),
                1e-4,
                1e-4,
            );
            assert_near(
                &what("grad_bias"),
                &e.grad_bias,
                &host::<f32>(&grads.bias),
                1e-4,
                1e-4,
            );
        }
    }
}

#[test]
fn emulated_batch_norm_f64_matches_the_pytorch_fixture() {
    let run = train_emulated!(
        f64,
        f64,
        candle_core::DType::F64,
        wick_emu_batch_norm_moments_f64,
        wick_emu_batch_norm_train_forward_f64,
        wick_emu_batch_norm_backward_sums_f64,
        wick_emu_batch_norm_train_backward_f64
    );
    let f = Fixture::load("batchnorm_train");
    let p = BatchNorm2dParams {
        eps: f.f64("eps"),
        momentum: f.f64("momentum"),
    };
    let shape: [usize; 4] = f.t("x").dims().try_into().unwrap();
    let v = |name: &str| host::<f64>(&f.t(name).to_device(&candle_core::Device::Cpu).unwrap());
    let ch = Channels {
        w: v("weight"),
        b: v("bias"),
        rm: v("running_mean"),
        rv: v("running_var"),
    };
    let e = run(shape, &v("x"), &ch, &v("grad_out"), false, &p);
    assert_near("out", &e.y, &v("out"), 1e-9, 1e-12);
    assert_near(
        "running_mean",
        &e.running_mean,
        &v("running_mean_after"),
        1e-9,
        1e-12,
    );
    assert_near(
        "running_var",
        &e.running_var,
        &v("running_var_after"),
        1e-9,
        1e-12,
    );
    assert_near("grad_x", &e.grad_x, &v("grad_x"), 1e-8, 1e-11);
    assert_near(
        "grad_weight",
        &e.grad_weight,
        &v("grad_weight"),
        1e-9,
        1e-12,
    );
    assert_near("grad_bias", &e.grad_bias, &v("grad_bias"), 1e-9, 1e-12);
}

/// Statistics in float that a sum of squares would lose: values 1e4 + N(0, 1)-like, whose
/// variance is 1e-8 of the mean's square. The moments kernel (shifted sums per thread,
/// Chan's merge across threads and blocks) keeps the variance to 1e-4 of the f64 value.
#[test]
fn emulated_batch_norm_statistics_are_sound_in_float() {
    let run = train_emulated_f32!();
    let shape = [8, 2, 40, 40];
    let total: usize = shape.iter().product();
    let x64: Vec<f64> = uniform(9, total, 1.7).iter().map(|v| 1e4 + v).collect();
    let x = f32s(&x64);
    let ch = Channels {
        w: vec![1.0; 2],
        b: vec![0.0; 2],
        rm: vec![0.0; 2],
        rv: vec![1.0; 2],
    };
    let e = run(
        shape,
        &x,
        &ch,
        &vec![0.0; total],
        false,
        &BatchNorm2dParams::default(),
    );
    // The f64 variance of the f32 inputs, per channel.
    let hw = 40 * 40;
    for c in 0..2 {
        let values: Vec<f64> = (0..8)
            .flat_map(|n| {
                x[(n * 2 + c) * hw..(n * 2 + c + 1) * hw]
                    .iter()
                    .map(|&v| v as f64)
            })
            .collect();
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / values.len() as f64;
        let emulated_var = 1.0 / (e.inv_std[c] as f64).powi(2) - 1e-5;
        assert!(
            ((emulated_var - var) / var).abs() < 1e-4,
            "channel {c}: variance {emulated_var} against f64 {var}"
        );
        assert!(((e.mean[c] as f64 - mean) / mean).abs() < 1e-7);
    }
}

#[test]
fn emulated_batch_norm_inference_matches_the_cpu_kernel() {
    let p = BatchNorm2dParams::default();
    for shape in [[1, 1, 1, 1], [2, 1001, 1, 1], [3, 5, 17, 13]] {
        let [_, c, h, w] = shape;
        let total: usize = shape.iter().product();
        let x = f32s(&uniform(1, total, 2.0));
        let (wv, bv, rm) = (
            f32s(&uniform(2, c, 1.0)),
            f32s(&uniform(3, c, 1.0)),
            f32s(&uniform(4, c, 1.0)),
        );
        let rv = f32s(
            &uniform(5, c, 0.5)
                .iter()
                .map(|v| v + 1.0)
                .collect::<Vec<_>>(),
        );
        let (xb, wb, bb, rmb, rvb) = (
            Buf::new("x", &x),
            Buf::new("w", &wv),
            Buf::new("b", &bv),
            Buf::new("rm", &rm),
            Buf::new("rv", &rv),
        );
        let mut y = Buf::filled("y", total, 0f32);
        emulate!(wick_emu_batch_norm_eval_forward_f32(
            Launch::elementwise(total),
            xb.ptr(),
            y.mut_ptr(),
            wb.ptr(),
            bb.ptr(),
            rmb.ptr(),
            rvb.ptr(),
            total as i64,
            c as i32,
            (h * w) as i32,
            p.eps
        ))
        .unwrap();
        let t = |v: &Vec<f32>| tensor(v, &[c]);
        let cpu =
            batch_norm_eval(&tensor(&x, &shape), &t(&wv), &t(&bv), &t(&rm), &t(&rv), &p).unwrap();
        assert_near(
            &format!("{shape:?}"),
            &y.values(),
            &host::<f32>(&cpu),
            1e-5,
            1e-6,
        );
    }
    let _: Option<Tensor> = None;
}
