//! Issue #43: the bf16 and f16 attention kernels (`cuda/attention.cu`), emulated, against
//! wick's f32 CPU kernel on the widened values: the output and the three gradients within
//! one unit in the last place of the type (plus the f32 kernels' own rounding, relative to
//! each tensor's scale), and the log-sum-exp kept in f32 (`lse_dtype`) within f32
//! rounding. Plain with vectors wider than a warp, causal, a shared mask with a row that
//! sees no key, and dropout.

use candle_core::DType;
use wick_ops::attention::*;
use wick_ops::dropout::Draws;
use wick_ops::emulate;
use wick_ops::gpu::Launch;

use super::emulated::{host, uniform, Buf};
use super::emulated_attention::{cases, Case};
use super::emulated_low_precision::Half;

/// What the kernels give: out, dq, dk, dv as bits, and the f32 log-sum-exp.
struct Got {
    out: Vec<u16>,
    lse: Vec<f32>,
    dq: Vec<u16>,
    dk: Vec<u16>,
    dv: Vec<u16>,
}

/// Runs the four kernels of one type on the 16-bit `q`, `k`, `v` and output gradient `g`.
macro_rules! emulated_16 {
    ($name:ident, $forward:ident, $delta:ident, $grad_q:ident, $grad_kv:ident) => {
        fn $name(kind: Half, c: &Case, [q, k, v, g]: [&[u16]; 4], a: &Attention) -> Got {
            let (l, s, e, ev) = c.dims;
            let (queries, keys) = (c.heads * l, c.heads * s);
            let (bias, row, col) = match &c.mask {
                Some(m) => {
                    let hidden = kind.round(f32::NEG_INFINITY);
                    let add: Vec<u16> =
                        m.iter().map(|&x| if x != 0 { 0 } else { hidden }).collect();
                    (add, s as i64, 1i64)
                }
                None => (vec![0u16], 0, 0),
            };
            let (qb, kb, vb, gb) = (
                Buf::new("q", q),
                Buf::new("k", k),
                Buf::new("v", v),
                Buf::new("g", g),
            );
            let (bb, ob) = (
                Buf::new("bias", &bias),
                Buf::new("offsets", &vec![0i64; c.heads]),
            );
            let (base, threshold) = Draws::new(a.dropout_p, a.seed, 0).parts();
            let keep = if a.dropout_p > 0.0 {
                (1.0 / (1.0 - a.dropout_p)) as f32
            } else {
                0.0
            };
            let (h, li, si, ei, evi) = (c.heads as i32, l as i32, s as i32, e as i32, ev as i32);
            let (scale, causal) = (a.scale as f32, i32::from(a.causal));
            let (bp, op) = (bb.ptr(), ob.ptr());
            let (wq, wk) = (Launch::warp_per_row(queries), Launch::warp_per_row(keys));
            let mut out = Buf::filled("out", queries * ev, 0u16);
            let mut lse = Buf::filled("lse", queries, 0f32);
            let (qp, kp, vp, gp) = (qb.ptr(), kb.ptr(), vb.ptr(), gb.ptr());
            let (o, lo) = (out.mut_ptr(), lse.mut_ptr());
            emulate!($forward(
                wq, qp, kp, vp, o, lo, h, li, si, ei, evi, scale, causal, bp, op, row, col, base,
                threshold, keep, 0i32
            ))
            .unwrap();
            let mut delta = Buf::filled("delta", queries, 0f32);
            emulate!($delta(
                wq,
                gp,
                out.ptr(),
                delta.mut_ptr(),
                queries as i64,
                evi
            ))
            .unwrap();
            let mut dq = Buf::filled("dq", queries * e, 0u16);
            let (lp, dp, dqp) = (lse.ptr(), delta.ptr(), dq.mut_ptr());
            emulate!($grad_q(
                wq, qp, kp, vp, gp, lp, dp, dqp, h, li, si, ei, evi, scale, causal, bp, op, row,
                col, base, threshold, keep, 0i32
            ))
            .unwrap();
            let mut dk = Buf::filled("dk", keys * e, 0u16);
            let mut dv = Buf::filled("dv", keys * ev, 0u16);
            let (dkp, dvp) = (dk.mut_ptr(), dv.mut_ptr());
            emulate!($grad_kv(
                wk, qp, kp, vp, gp, lp, dp, dkp, dvp, h, li, si, ei, evi, scale, causal, bp, op,
                row, col, base, threshold, keep, 0i32
            ))
            .unwrap();
            delta.values();
            Got {
                out: out.values(),
                lse: lse.values(),
                dq: dq.values(),
                dk: dk.values(),
                dv: dv.values(),
            }
        }
    };
}
emulated_16!(
    emulated_bf16,
    wick_emu_attention_forward_bf16,
    wick_emu_attention_delta_bf16,
    wick_emu_attention_backward_q_bf16,
    wick_emu_attention_backward_kv_bf16
);
emulated_16!(
    emulated_f16,
    wick_emu_attention_forward_f16,
    wick_emu_attention_delta_f16,
    wick_emu_attention_backward_q_f16,
    wick_emu_attention_backward_kv_f16
);

/// Each 16-bit value within one unit of `kind` of the f32 value, plus `rel` of the f32
/// tensor's largest magnitude.
fn close(kind: Half, what: &str, got: &[u16], want: &[f32], rel: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want
        .iter()
        .filter(|x| x.is_finite())
        .fold(0f32, |m, x| m.max(x.abs()));
    for (i, (&b, &w)) in got.iter().zip(want).enumerate() {
        let v = kind.value(b);
        let ok = v == w || (v - w).abs() <= kind.ulp(w) + rel * scale;
        assert!(ok, "{kind:?} {what}: element {i} is {v:e}, f32 {w:e}");
    }
}

#[test]
fn sixteen_bit_attention_computes_in_float_and_keeps_its_log_sum_exp_in_f32() {
    assert_eq!(lse_dtype(DType::BF16), DType::F32);
    for kind in [Half::Bf16, Half::F16] {
        for (n, c) in cases().iter().enumerate() {
            let draw = |seed, len| -> Vec<u16> {
                let v = uniform(seed, len, 2.0);
                v.iter().map(|&x| kind.round(x as f32)).collect()
            };
            let [q, k, v, g] = c.operands(100 * n as u64, draw);
            let a = c.attention();
            let run = match kind {
                Half::Bf16 => emulated_bf16,
                Half::F16 => emulated_f16,
            };
            let got = run(kind, c, [&q, &k, &v, &g], &a);
            let wide = |x: &[u16]| -> Vec<f32> { x.iter().map(|&b| kind.value(b)).collect() };
            let [q, k, v, g, out] = [&q, &k, &v, &g, &got.out].map(|x| wide(x));
            let (y, grads) = c.cpu_f32([&q, &k, &v, &g], (&out, &got.lse), &a);
            let what = |part: &str| format!("case {n} {part}");
            close(kind, &what("out"), &got.out, &host::<f32>(&y.out), 1e-5);
            for (i, (&x, &w)) in got.lse.iter().zip(&host::<f32>(&y.lse)).enumerate() {
                let ok = x == w || (x - w).abs() <= 1e-5 * w.abs().max(1.0);
                assert!(ok, "{kind:?} {} row {i}: {x:e}, f32 {w:e}", what("lse"));
            }
            close(kind, &what("dq"), &got.dq, &host::<f32>(&grads.q), 1e-5);
            close(kind, &what("dk"), &got.dk, &host::<f32>(&grads.k), 1e-5);
            close(kind, &what("dv"), &got.dv, &host::<f32>(&grads.v), 1e-5);
        }
    }
}
