//! Issue #43: the float32 CUDA attention kernels with autocast's 16-bit products
//! (`products` 1 and 2 in `cuda/attention.cu`), emulated. Every product reads the bf16
//! (f16) values of its operands, the weights included, as wick's CPU kernel's GEMMs do:
//! - the output against a float64 model of the kernel's online softmax on those values
//!   (a weight is `exp(logit - running max)`, rounded before it multiplies `v`);
//! - the log-sum-exp and the three gradients against the CPU kernel with the same
//!   products (the backward's probabilities are `exp(logit - lse)` on both sides).
//!
//! Within 1e-5 of each tensor's largest value: float32's rounding, where the products'
//! 16-bit rounding would move them by about 1e-3. The same checks run on a GPU through
//! wick's dispatcher with `WICK_TEST_DEVICE=cuda` (scripts/gpu-check.sh).

use candle_core::Tensor;
use wick_ops::attention::*;
use wick_ops::bf16::Products;
use wick_ops::dropout::Draws;

use super::emulated::{host, uniform};
use super::emulated_attention::{cases, emulated_f32, Case};
use super::emulated_low_precision::Half;

/// `x` as a 16-bit product reads it.
fn operand(kind: Half, x: f64) -> f64 {
    kind.value(kind.round(x as f32)) as f64
}

/// The kernel's forward in float64: per query row, the keys in order with a running
/// maximum, each weight rounded to `kind` before it multiplies the rounded `v`.
fn forward_model(kind: Half, c: &Case, [q, k, v]: [&[f32]; 3], a: &Attention) -> Vec<f64> {
    let (l, s, e, ev) = c.dims;
    let draws = Draws::new(a.dropout_p, a.seed, 0);
    let keep = 1.0 / (1.0 - a.dropout_p);
    let r = |x: &[f32]| -> Vec<f64> { x.iter().map(|&x| operand(kind, x as f64)).collect() };
    let (q, k, v) = (r(q), r(k), r(v));
    let mut out = vec![0.0; c.heads * l * ev];
    for h in 0..c.heads {
        for i in 0..l {
            let (mut m, mut sum, mut acc) = (f64::NEG_INFINITY, 0.0, vec![0.0; ev]);
            let keys = if a.causal { (i + 1).min(s) } else { s };
            for j in 0..keys {
                let hidden = c.mask.as_ref().is_some_and(|mask| mask[i * s + j] == 0);
                if hidden {
                    continue;
                }
                let qi = &q[(h * l + i) * e..][..e];
                let kj = &k[(h * s + j) * e..][..e];
                let x = qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f64>() * a.scale;
                let new_m = m.max(x);
                let (alpha, p) = ((m - new_m).exp(), (x - new_m).exp());
                sum = sum * alpha + p;
                m = new_m;
                let index = ((h * l + i) * s + j) as u64;
                let f = if a.dropout_p == 0.0 {
                    1.0
                } else if draws.kept(index) {
                    keep
                } else {
                    0.0
                };
                let w = operand(kind, p * f);
                for (o, &vj) in acc.iter_mut().zip(&v[(h * s + j) * ev..][..ev]) {
                    *o = *o * alpha + w * vj;
                }
            }
            let norm = if sum == 0.0 { 0.0 } else { 1.0 / sum };
            for (o, x) in out[(h * l + i) * ev..][..ev].iter_mut().zip(acc) {
                *o = x * norm;
            }
        }
    }
    out
}

/// The largest difference, over `want`'s largest magnitude (NaN, which fails every
/// bound, where `got` has a NaN).
fn error(what: &str, got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let got: Vec<f64> = got.iter().map(|&x| f64::from(x)).collect();
    wick_ops::max_rel_diff_values(&got, want)
}

/// What the kernels gave (out, lse, dq, dk, dv) for case `c` on `[q, k, v, g]`, checked:
/// the output against [`forward_model`], the rest against the CPU kernel.
fn check(
    kind: Half,
    (n, c): (usize, &Case),
    inputs: [&[f32]; 4],
    a: &Attention,
    got: [Vec<f32>; 5],
) {
    let [q, k, v, _] = inputs;
    let [out, lse, dq, dk, dv] = got;
    let what = |part: &str| format!("{kind:?} case {n} {part}");
    let model = forward_model(kind, c, [q, k, v], a);
    let err = error(&what("out"), &out, &model);
    assert!(err < 1e-5, "{}: error {err:.2e}", what("out"));

    let (y, grads) = c.cpu_f32(inputs, (&out, &lse), a);
    let wide = |x: Vec<f32>| x.into_iter().map(f64::from).collect::<Vec<_>>();
    let lse_want = wide(host::<f32>(&y.lse));
    for (i, (&x, &w)) in lse.iter().zip(&lse_want).enumerate() {
        let ok = x as f64 == w || (x as f64 - w).abs() <= 1e-5 * w.abs().max(1.0);
        assert!(ok, "{} row {i}: {x:e}, CPU {w:e}", what("lse"));
    }
    for (part, got, want) in [
        ("dq", &dq, &grads.q),
        ("dk", &dk, &grads.k),
        ("dv", &dv, &grads.v),
    ] {
        let err = error(&what(part), got, &wide(host::<f32>(want)));
        assert!(err < 1e-5, "{}: error {err:.2e}", what(part));
    }
}

/// Every case in bf16 and f16 products, run by `run(case, [q, k, v, g], settings, code)`.
fn each_case(run: impl Fn(&Case, [&[f32]; 4], &Attention, i32) -> [Vec<f32>; 5]) {
    for (kind, products, code) in [
        (Half::Bf16, Products::Bf16, 1),
        (Half::F16, Products::F16, 2),
    ] {
        for (n, c) in cases().iter().enumerate() {
            let draw = |seed, len| -> Vec<f32> {
                uniform(seed, len, 2.0).iter().map(|&x| x as f32).collect()
            };
            let [q, k, v, g] = c.operands(100 * n as u64, draw);
            let a = Attention {
                products,
                ..c.attention()
            };
            let inputs = [&q[..], &k, &v, &g];
            check(kind, (n, c), inputs, &a, run(c, inputs, &a, code));
        }
    }
}

#[test]
fn float32_cuda_attention_with_16_bit_products_multiplies_16_bit_values() {
    each_case(emulated_f32);
}

/// The same on a GPU (`WICK_TEST_DEVICE=cuda`, scripts/gpu-check.sh): wick's attention
/// dispatcher on the device, so the settings it passes the kernels are checked too.
#[test]
fn float32_attention_with_16_bit_products_on_the_test_device() {
    let device = crate::common::device();
    if device.is_cpu() {
        eprintln!("skipped: needs WICK_TEST_DEVICE=cuda (the CPU kernel is checked above)");
        return;
    }
    each_case(|c, [q, k, v, g], a, _| {
        let (l, s, e, ev) = c.dims;
        let t = |x: &[f32], dims: &[usize]| Tensor::from_slice(x, dims, &device).unwrap();
        let (qt, kt) = (t(q, &[c.heads, l, e]), t(k, &[c.heads, s, e]));
        let (vt, gt) = (t(v, &[c.heads, s, ev]), t(g, &[c.heads, l, ev]));
        let mask = c.mask_tensor().map(|m| m.to_device(&device).unwrap());
        let y = scaled_dot_product_attention(&qt, &kt, &vt, mask.as_ref(), a, 0).unwrap();
        let grads =
            scaled_dot_product_attention_backward(&qt, &kt, &vt, &y, &gt, mask.as_ref(), a, 0)
                .unwrap();
        [&y.out, &y.lse, &grads.q, &grads.k, &grads.v].map(host::<f32>)
    });
}
