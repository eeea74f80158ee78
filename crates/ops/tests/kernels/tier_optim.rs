//! Adam and AdamW after global-norm clipping, three float32 steps against
//! `torch.optim.Adam`/`AdamW` (`foreach=False`) and `clip_grad_norm_` (fixtures/ops-tier).

use wick_ops::broadcast;
use wick_ops::optim::{adam, clip_factor, AdamParams};

use crate::common::*;

#[test]
fn adam_and_adamw_with_clipping_match_pytorch_over_three_steps() {
    for (case, decoupled) in [("adam_clipped", false), ("adamw_clipped", true)] {
        let f = Fixture::load_from("ops-tier", case);
        let p = AdamParams {
            lr: f.f64("lr"),
            beta1: f.f64("beta1"),
            beta2: f.f64("beta2"),
            eps: f.f64("eps"),
            weight_decay: f.f64("weight_decay"),
            decoupled,
        };
        let (mut param, mut q) = (f.t("p_before").clone(), f.t("q_before").clone());
        let (mut state_p, mut state_q) = (None, None);
        for step in 0..3u64 {
            let (gp, gq) = (
                f.t(&format!("grad_p_step{step}")),
                f.t(&format!("grad_q_step{step}")),
            );
            let (norm, coef) = clip_factor(&[gp, gq], f.f64("max_norm")).unwrap();
            let torch_norm = f.t(&format!("norm_step{step}")).to_scalar::<f32>().unwrap() as f64;
            assert!(
                (norm - torch_norm).abs() <= 1e-6 * torch_norm,
                "{case} step {step}: norm {norm} vs {torch_norm}"
            );
            assert!(coef < 1.0, "{case}: the fixture's gradients are clipped");
            let (gp, gq) = (
                broadcast::scale(gp, coef).unwrap(),
                broadcast::scale(gq, coef).unwrap(),
            );
            type Moments = Option<(candle_core::Tensor, candle_core::Tensor)>;
            let adam = |param: &candle_core::Tensor, grad, state: &Moments| {
                let (m, v) = (state.as_ref().map(|s| &s.0), state.as_ref().map(|s| &s.1));
                adam::adam_step(param, grad, m, v, step + 1, &p).unwrap()
            };
            let (np, mp, vp) = adam(&param, &gp, &state_p);
            let (nq, mq, vq) = adam(&q, &gq, &state_q);
            let after = step + 1;
            for (what, got, key, tol) in [
                ("p", &np, "p", 2e-6),
                ("q", &nq, "q", 2e-6),
                ("exp_avg", &mp, "p_exp_avg", 1e-6),
                ("exp_avg_sq", &vp, "p_exp_avg_sq", 1e-6),
            ] {
                let want = f.t(&format!("{key}_after_step{after}"));
                assert_close(&format!("{case} {what} step {after}"), got, want, tol);
            }
            (param, q) = (np, nq);
            state_p = Some((mp, vp));
            state_q = Some((mq, vq));
        }
    }
}

#[test]
fn adam_settings_are_checked_as_pytorch_does() {
    let bad = AdamParams {
        beta1: 1.0,
        ..AdamParams::adam(0.1)
    };
    assert_error_names(bad.validate(), &["adam", "betas"]);
    let t = rand_tensor(1, &[3]);
    assert_error_names(
        adam::adam_step(&t, &t, None, None, 0, &AdamParams::adam(0.1)),
        &["adam", "1-based"],
    );
    assert_error_names(clip_factor(&[&t], 0.0), &["clip_grad_norm", "max_norm"]);
}

/// The one-pass CPU update against candle's generic ops (`KernelPath::Generic`): Adam with
/// L2 decay, AdamW and plain Adam, from zero moments over three steps, in f32 and f64, on
/// a tensor longer than one parallel chunk (a partial last chunk) and a small one.
#[test]
fn cpu_adam_matches_the_generic_path_over_three_steps() {
    use candle_core::DType;
    use wick_ops::KernelPath;
    let settings = [
        AdamParams::adam(1e-2).with_weight_decay(0.01),
        AdamParams::adamw(1e-2),
        AdamParams::adam(3e-3),
    ];
    for p in settings {
        for dtype in [DType::F32, DType::F64] {
            for n in [70_001usize, 5] {
                let t = |seed| rand_tensor(seed, &[n]).to_dtype(dtype).unwrap();
                let (mut fast, mut generic) = ((t(1), None, None), (t(1), None, None));
                for step in 1..=3u64 {
                    let g = t(10 + step);
                    let run = |s: &(candle_core::Tensor, Option<_>, Option<_>)| {
                        let (w, m, v) =
                            adam::adam_step(&s.0, &g, s.1.as_ref(), s.2.as_ref(), step, &p)
                                .unwrap();
                        (w, Some(m), Some(v))
                    };
                    fast = run(&fast);
                    generic = KernelPath::Generic.scope(|| run(&generic));
                }
                let tol = if dtype == DType::F32 { 1e-6 } else { 1e-13 };
                let case = format!("{p:?} {dtype:?} n {n}");
                assert_close(&format!("{case} param"), &fast.0, &generic.0, tol);
                let (m, gm) = (fast.1.unwrap(), generic.1.unwrap());
                assert_close(&format!("{case} exp_avg"), &m, &gm, tol);
                let (v, gv) = (fast.2.unwrap(), generic.2.unwrap());
                assert_close(&format!("{case} exp_avg_sq"), &v, &gv, tol);
            }
        }
    }
}
