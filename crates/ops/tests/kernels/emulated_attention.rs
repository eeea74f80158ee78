//! The emulated CUDA attention kernels (`cuda/attention.cu`) against wick's CPU kernel, in
//! f64: plain with vectors wider than a warp, causal, a shared boolean mask with a row
//! that sees no key, and dropout (the same counter draws on both sides).

use crate::emulated::{host, Buf};
use candle_core::{DType, Device, Tensor};
use wick_ops::attention::*;
use wick_ops::dropout::Draws;
use wick_ops::emulate;
use wick_ops::gpu::Launch;

pub(super) struct Case {
    pub heads: usize,
    /// L, S, E, Ev.
    pub dims: (usize, usize, usize, usize),
    pub causal: bool,
    pub dropout_p: f64,
    /// A `[L, S]` boolean mask shared by every head.
    pub mask: Option<Vec<u8>>,
}

impl Case {
    /// q, k, v and the output gradient, drawn from `seed` on by `draw(seed, len)`.
    pub fn operands<T>(&self, seed: u64, draw: impl Fn(u64, usize) -> Vec<T>) -> [Vec<T>; 4] {
        let (l, s, e, ev) = self.dims;
        let h = self.heads;
        [
            draw(seed, h * l * e),
            draw(seed + 1, h * s * e),
            draw(seed + 2, h * s * ev),
            draw(seed + 3, h * l * ev),
        ]
    }

    /// The attention settings of this case (scale 0.4, dropout seed 11).
    pub fn attention(&self) -> Attention {
        Attention {
            scale: 0.4,
            causal: self.causal,
            dropout_p: self.dropout_p,
            seed: 11,
            products: Default::default(),
        }
    }

    /// wick's f32 CPU kernel on `[q, k, v, g]`: its forward, and its gradients from the
    /// output and log-sum-exp the kernels saved (the output's rounding moves each row's
    /// dO . O, which the gradients subtract).
    pub fn cpu_f32(
        &self,
        [q, k, v, g]: [&[f32]; 4],
        (out, lse): (&[f32], &[f32]),
        a: &Attention,
    ) -> (AttentionOutput, AttentionGrads) {
        let (l, s, e, ev) = self.dims;
        let t = |x: &[f32], dims: &[usize]| Tensor::from_slice(x, dims, &Device::Cpu).unwrap();
        let (qt, kt) = (t(q, &[self.heads, l, e]), t(k, &[self.heads, s, e]));
        let (vt, gt) = (t(v, &[self.heads, s, ev]), t(g, &[self.heads, l, ev]));
        let mask = self.mask_tensor();
        let y = scaled_dot_product_attention(&qt, &kt, &vt, mask.as_ref(), a, 0).unwrap();
        let saved = AttentionOutput {
            out: t(out, &[self.heads, l, ev]),
            lse: t(lse, &[self.heads, l]),
        };
        let grads =
            scaled_dot_product_attention_backward(&qt, &kt, &vt, &saved, &gt, mask.as_ref(), a, 0)
                .unwrap();
        (y, grads)
    }

    /// The mask as a `[L, S]` tensor.
    pub fn mask_tensor(&self) -> Option<Tensor> {
        let (l, s, ..) = self.dims;
        let m = self.mask.as_ref()?;
        Some(Tensor::from_vec(m.clone(), (l, s), &Device::Cpu).unwrap())
    }
}

/// Plain with vectors wider than a warp, causal, a shared boolean mask with a row that
/// sees no key, and dropout.
pub(super) fn cases() -> Vec<Case> {
    let mut keep = vec![1u8; 9 * 13];
    for (i, x) in keep.iter_mut().enumerate() {
        if i % 5 == 0 || i / 13 == 3 {
            *x = 0; // row 3 sees no key
        }
    }
    let case = |heads, dims, causal, dropout_p, mask| Case {
        heads,
        dims,
        causal,
        dropout_p,
        mask,
    };
    vec![
        case(3, (9, 13, 40, 33), false, 0.0, None),
        case(2, (12, 12, 8, 8), true, 0.0, None),
        case(2, (9, 13, 8, 5), false, 0.0, Some(keep)),
        case(2, (10, 10, 8, 8), true, 0.3, None),
    ]
}

fn values(seed: u64, n: usize) -> Vec<f64> {
    crate::emulated::uniform(seed, n, 2.0)
}

/// Runs the four kernels of one float type with the kernels' `products` (0: as they are;
/// 1, 2: bf16, f16 values); returns out, lse, dq, dk, dv.
macro_rules! emulated_float {
    ($name:ident, $t:ty, $forward:ident, $delta:ident, $grad_q:ident, $grad_kv:ident) => {
        pub(super) fn $name(
            c: &Case,
            [q, k, v, g]: [&[$t]; 4],
            a: &Attention,
            products: i32,
        ) -> [Vec<$t>; 5] {
            let (l, s, e, ev) = c.dims;
            let (queries, keys) = (c.heads * l, c.heads * s);
            let (bias, offsets, row, col) = match &c.mask {
                Some(m) => {
                    let add: Vec<$t> = m
                        .iter()
                        .map(|&x| if x != 0 { 0.0 } else { <$t>::NEG_INFINITY })
                        .collect();
                    (add, vec![0i64; c.heads], s as i64, 1i64)
                }
                None => (vec![0.0], vec![0i64; c.heads], 0, 0),
            };
            let (qb, kb, vb, gb) = (
                Buf::new("q", q),
                Buf::new("k", k),
                Buf::new("v", v),
                Buf::new("g", g),
            );
            let (bb, ob) = (Buf::new("bias", &bias), Buf::new("offsets", &offsets));
            let (base, threshold) = Draws::new(a.dropout_p, a.seed, 0).parts();
            let keep = if a.dropout_p > 0.0 {
                1.0 / (1.0 - a.dropout_p)
            } else {
                0.0
            } as $t;
            let (h, li, si, ei, evi) = (c.heads as i32, l as i32, s as i32, e as i32, ev as i32);
            let (scale, causal) = (a.scale as $t, i32::from(a.causal));
            let mut out = Buf::filled("out", queries * ev, 0 as $t);
            let mut lse = Buf::filled("lse", queries, 0 as $t);
            let (q, k, v) = (qb.ptr(), kb.ptr(), vb.ptr());
            // Every kernel but the delta takes the same settings after its buffers.
            let (bp, op) = (bb.ptr(), ob.ptr());
            let (wq, wk) = (Launch::warp_per_row(queries), Launch::warp_per_row(keys));
            let (o, lo) = (out.mut_ptr(), lse.mut_ptr());
            emulate!($forward(
                wq, q, k, v, o, lo, h, li, si, ei, evi, scale, causal, bp, op, row, col, base,
                threshold, keep, products
            ))
            .unwrap();
            let mut delta = Buf::filled("delta", queries, 0 as $t);
            let (rows, g) = (queries as i64, gb.ptr());
            emulate!($delta(wq, g, out.ptr(), delta.mut_ptr(), rows, evi)).unwrap();
            let mut dq = Buf::filled("dq", queries * e, 0 as $t);
            let (lse_p, delta_p) = (lse.ptr(), delta.ptr());
            let dqp = dq.mut_ptr();
            emulate!($grad_q(
                wq, q, k, v, g, lse_p, delta_p, dqp, h, li, si, ei, evi, scale, causal, bp, op,
                row, col, base, threshold, keep, products
            ))
            .unwrap();
            let mut dk = Buf::filled("dk", keys * e, 0 as $t);
            let mut dv = Buf::filled("dv", keys * ev, 0 as $t);
            let (dk_p, dv_p) = (dk.mut_ptr(), dv.mut_ptr());
            emulate!($grad_kv(
                wk, q, k, v, g, lse_p, delta_p, dk_p, dv_p, h, li, si, ei, evi, scale, causal, bp,
                op, row, col, base, threshold, keep, products
            ))
            .unwrap();
            [
                out.values(),
                lse.values(),
                dq.values(),
                dk.values(),
                dv.values(),
            ]
        }
    };
}
emulated_float!(
    emulated_f64,
    f64,
    wick_emu_attention_forward_f64,
    wick_emu_attention_delta_f64,
    wick_emu_attention_backward_q_f64,
    wick_emu_attention_backward_kv_f64
);
emulated_float!(
    emulated_f32,
    f32,
    wick_emu_attention_forward_f32,
    wick_emu_attention_delta_f32,
    wick_emu_attention_backward_q_f32,
    wick_emu_attention_backward_kv_f32
);

fn max_rel(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b
        .iter()
        .filter(|x| x.is_finite())
        .fold(1e-300f64, |m, x| m.max(x.abs()));
    // Equal values (masked -inf included) differ by 0; a NaN on either side makes the
    // result NaN, which fails every bound.
    a.iter()
        .zip(b)
        .map(|(x, y)| if x == y { 0.0 } else { (x - y).abs() / scale })
        .fold(0.0, wick_ops::compare::nan_max)
}

#[test]
fn emulated_attention_matches_the_cpu_kernel() {
    for (n, c) in cases().iter().enumerate() {
        let (l, s, e, ev) = c.dims;
        let [q, k, v, g] = c.operands(100 * n as u64, values);
        let a = c.attention();
        let got = emulated_f64(c, [&q, &k, &v, &g], &a, 0);
        let t = |x: &[f64], rows, cols| {
            Tensor::from_vec(x.to_vec(), (c.heads, rows, cols), &Device::Cpu).unwrap()
        };
        let mask = c.mask_tensor();
        let (qt, kt, vt, gt) = (t(&q, l, e), t(&k, s, e), t(&v, s, ev), t(&g, l, ev));
        let y = scaled_dot_product_attention(&qt, &kt, &vt, mask.as_ref(), &a, 0).unwrap();
        let grads =
            scaled_dot_product_attention_backward(&qt, &kt, &vt, &y, &gt, mask.as_ref(), &a, 0)
                .unwrap();
        let want = [&y.out, &y.lse, &grads.q, &grads.k, &grads.v]
            .map(|x| host::<f64>(&x.to_dtype(DType::F64).unwrap()));
        for (name, (got, want)) in ["out", "lse", "dq", "dk", "dv"]
            .iter()
            .zip(got.iter().zip(&want))
        {
            let err = max_rel(got, want);
            assert!(err < 1e-12, "case {n} {name}: {err:.2e}");
        }
    }
}
