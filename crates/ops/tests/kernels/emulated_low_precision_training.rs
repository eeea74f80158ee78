//! Issue #43: the bf16 and f16 variants of the CUDA kernels a 16-bit training step runs
//! past the element-wise ones, emulated, against wick's f32 CPU kernels on the widened
//! values. Each reads 16-bit values into float, keeps its intermediate values (row
//! log-sum-exps, ...) in float and rounds each output once, so each output is within one
//! unit in the last place of the type of the f32 kernel's (plus that kernel's own rounding
//! where terms cancel).

use candle_core::{DType, Device, Tensor};
use wick_ops::batchnorm::*;
use wick_ops::emulate;
use wick_ops::gpu::{batch_norm_workspace_bytes, Launch};
use wick_ops::DeviceKind;

use super::emulated::{cross_entropy_kernels, host, tensor, uniform, Buf};
use super::emulated_batchnorm::{train_emulated, Channels, Emulated};
use super::emulated_low_precision::Half;

/// Asserts each 16-bit value of `actual` is within one unit of `kind` (plus `slack`) of
/// the f32 value beside it, NaN where and only where it has NaN.
fn within_one_unit(kind: Half, what: &str, actual: &[u16], expected: &[f32], slack: f32) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    for (i, (&b, &w)) in actual.iter().zip(expected).enumerate() {
        let v = kind.value(b);
        let ok = (v.is_nan() && w.is_nan()) || v == w || (v - w).abs() <= kind.ulp(w) + slack;
        assert!(ok, "{kind:?} {what}: element {i} is {v:e}, f32 {w:e}");
    }
}

// ---- cross-entropy ----

cross_entropy_kernels!(
    cross_entropy_bf16,
    u16,
    wick_emu_cross_entropy_rows_bf16,
    wick_emu_cross_entropy_mean_bf16,
    wick_emu_cross_entropy_backward_bf16
);
cross_entropy_kernels!(
    cross_entropy_f16,
    u16,
    wick_emu_cross_entropy_rows_f16,
    wick_emu_cross_entropy_mean_f16,
    wick_emu_cross_entropy_backward_f16
);

#[test]
fn sixteen_bit_cross_entropy_keeps_its_rows_in_float() {
    for kind in [Half::Bf16, Half::F16] {
        let run = match kind {
            Half::Bf16 => cross_entropy_bf16,
            Half::F16 => cross_entropy_f16,
        };
        for (rows, classes) in [(1, 1), (3, 10), (2, 1000), (5, 1001), (300, 4)] {
            let logits: Vec<u16> = uniform(31, rows * classes, 6.0)
                .iter()
                .map(|&v| kind.round(v as f32))
                .collect();
            let wide: Vec<f32> = logits.iter().map(|&b| kind.value(b)).collect();
            let labels: Vec<u32> = (0..rows).map(|i| ((i * 7919) % classes) as u32).collect();
            let grad = kind.round(0.75);
            let (loss, dx) = run(&logits, &labels, classes, grad);
            let (lt, yt) = (tensor(&wide, &[rows, classes]), tensor(&labels, &[rows]));
            let want = wick_ops::cross_entropy(&lt, &yt)
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            let case = format!("{rows}x{classes}");
            within_one_unit(kind, &format!("loss {case}"), &[loss], &[want], 1e-6);
            let g = Tensor::new(kind.value(grad), &Device::Cpu).unwrap();
            let want = host::<f32>(&wick_ops::cross_entropy_backward(&g, &lt, &yt).unwrap());
            within_one_unit(kind, &format!("gradient {case}"), &dx, &want, 1e-9);
        }
    }
}

// ---- batch norm ----

/// A channel's values, or a tensor's, as `kind`'s bits: `uniform(seed) * scale + shift`.
fn half_values(kind: Half, seed: u64, n: usize, scale: f64, shift: f64) -> Vec<u16> {
    uniform(seed, n, scale)
        .iter()
        .map(|&v| kind.round((v + shift) as f32))
        .collect()
}

#[test]
fn sixteen_bit_batch_norm_keeps_its_moments_in_float() {
    let p = BatchNorm2dParams::default();
    for kind in [Half::Bf16, Half::F16] {
        let run = match kind {
            Half::Bf16 => train_emulated!(
                u16,
                f32,
                DType::BF16,
                wick_emu_batch_norm_moments_bf16,
                wick_emu_batch_norm_train_forward_bf16,
                wick_emu_batch_norm_backward_sums_bf16,
                wick_emu_batch_norm_train_backward_bf16
            ),
            Half::F16 => train_emulated!(
                u16,
                f32,
                DType::F16,
                wick_emu_batch_norm_moments_f16,
                wick_emu_batch_norm_train_forward_f16,
                wick_emu_batch_norm_backward_sums_f16,
                wick_emu_batch_norm_train_backward_f16
            ),
        };
        // Several blocks per channel, a short last one, odd planes, batch 1.
        for shape in [
            [4, 3, 5, 5],
            [1, 1, 1, 5001],
            [32, 16, 9, 9],
            [3, 2, 33, 31],
        ] {
            let [_, c, ..] = shape;
            let total: usize = shape.iter().product();
            let x = half_values(kind, 1, total, 2.0, 0.5);
            let g = half_values(kind, 2, total, 1.0, 0.0);
            let ch = Channels {
                w: half_values(kind, 3, c, 1.0, 0.0),
                b: half_values(kind, 4, c, 1.0, 0.0),
                rm: half_values(kind, 5, c, 1.0, 0.0),
                rv: half_values(kind, 6, c, 0.5, 1.0),
            };
            let wide = |b: &[u16], shape: &[usize]| -> Tensor {
                tensor(
                    &b.iter().map(|&h| kind.value(h)).collect::<Vec<f32>>(),
                    shape,
                )
            };
            let (xt, gt) = (wide(&x, &shape), wide(&g, &shape));
            let [w, b, rm, rv] = [&ch.w, &ch.b, &ch.rm, &ch.rv].map(|v| wide(v, &[c]));
            for relu in [false, true] {
                let e: Emulated<u16> = run(shape, &x, &ch, &g, relu, &p);
                let train = if relu {
                    batch_norm_relu_train
                } else {
                    batch_norm_train
                };
                let cpu = train(&xt, &w, &b, &rm, &rv, &p).unwrap();
                let case = |part: &str| format!("{part} {shape:?} relu {relu}");
                // y is about unit scale: the f32 kernels' own rounding is far below a unit.
                within_one_unit(kind, &case("y"), &e.y, &host::<f32>(&cpu.y), 1e-5);
                for (part, got, f32s) in [
                    ("mean", &e.mean, &cpu.mean),
                    ("inv_std", &e.inv_std, &cpu.inv_std),
                    ("running_mean", &e.running_mean, &cpu.running_mean),
                    ("running_var", &e.running_var, &cpu.running_var),
                ] {
                    within_one_unit(kind, &case(part), got, &host::<f32>(f32s), 1e-6);
                }
                // The backward reads the saved statistics and (with ReLU) the output as the
                // kernels stored them: the f32 kernel is given the same values.
                let (mean, inv_std) = (wide(&e.mean, &[c]), wide(&e.inv_std, &[c]));
                let grads = if relu {
                    let z = wide(&e.y, &shape);
                    batch_norm_relu_train_backward(&gt, &z, &xt, &w, &mean, &inv_std)
                } else {
                    batch_norm_train_backward(&gt, &xt, &w, &mean, &inv_std)
                }
                .unwrap();
                let gx = host::<f32>(&grads.x);
                // The input gradient subtracts two means from g: slack relative to its scale.
                let scale = gx.iter().fold(0f32, |m, v| m.max(v.abs()));
                within_one_unit(kind, &case("grad_x"), &e.grad_x, &gx, 2e-5 * scale);
                let (gw, gb) = (host::<f32>(&grads.weight), host::<f32>(&grads.bias));
                let sums = 1e-4 * (total / c) as f32;
                within_one_unit(kind, &case("grad_weight"), &e.grad_weight, &gw, 1e-4 * sums);
                within_one_unit(kind, &case("grad_bias"), &e.grad_bias, &gb, 1e-4 * sums);
            }
        }
    }
}

#[test]
fn sixteen_bit_batch_norm_inference_rounds_once() {
    let p = BatchNorm2dParams::default();
    for kind in [Half::Bf16, Half::F16] {
        for shape in [[2, 3, 5, 7], [1, 64, 1, 1]] {
            let [_, c, h, w] = shape;
            let total: usize = shape.iter().product();
            let x = half_values(kind, 11, total, 2.0, 0.5);
            let chans = [
                (12, 1.0, 0.0),
                (13, 1.0, 0.0),
                (14, 1.0, 0.0),
                (15, 0.5, 1.0),
            ];
            let [wv, bv, rm, rv] =
                chans.map(|(seed, scale, shift)| half_values(kind, seed, c, scale, shift));
            let (xb, wb, bb) = (Buf::new("x", &x), Buf::new("w", &wv), Buf::new("b", &bv));
            let (rmb, rvb) = (Buf::new("rm", &rm), Buf::new("rv", &rv));
            let mut y = Buf::filled("y", total, 0u16);
            let (yp, n, ci, hw) = (y.mut_ptr(), total as i64, c as i32, (h * w) as i32);
            let each = Launch::elementwise(total);
            let (xp, wp, bp, mp, vp) = (xb.ptr(), wb.ptr(), bb.ptr(), rmb.ptr(), rvb.ptr());
            match kind {
                Half::Bf16 => emulate!(wick_emu_batch_norm_eval_forward_bf16(
                    each, xp, yp, wp, bp, mp, vp, n, ci, hw, p.eps
                )),
                Half::F16 => emulate!(wick_emu_batch_norm_eval_forward_f16(
                    each, xp, yp, wp, bp, mp, vp, n, ci, hw, p.eps
                )),
            }
            .unwrap();
            let wide = |b: &[u16], shape: &[usize]| -> Tensor {
                tensor(
                    &b.iter().map(|&h| kind.value(h)).collect::<Vec<f32>>(),
                    shape,
                )
            };
            let [wt, bt, mt, vt] = [&wv, &bv, &rm, &rv].map(|v| wide(v, &[c]));
            let cpu = batch_norm_eval(&wide(&x, &shape), &wt, &bt, &mt, &vt, &p).unwrap();
            within_one_unit(
                kind,
                &format!("eval {shape:?}"),
                &y.values(),
                &host::<f32>(&cpu),
                1e-5,
            );
        }
    }
}
