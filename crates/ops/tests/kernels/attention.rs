//! Fused attention: the tiled CPU kernel against candle's ops (the unfused path) over
//! shapes that cut the tiles unevenly, every mask kind and dropout; finite differences;
//! dropout's statistics; errors. PyTorch's own values are checked in wick-graph's
//! tensor-op fixtures.

use crate::common::*;
use candle_core::{DType, Device, Tensor};
use wick_ops::attention::*;
use wick_ops::compare::host_values;
use wick_ops::KernelPath;

fn settings(e: usize, causal: bool, dropout_p: f64) -> Attention {
    Attention {
        scale: 1.0 / (e as f64).sqrt(),
        causal,
        dropout_p,
        seed: 7,
        products: Default::default(),
    }
}

/// One case: q, k, v, an optional mask, the settings, an output gradient.
struct Case {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Option<Tensor>,
    a: Attention,
    g: Tensor,
}

/// `(L, S, E, Ev)`.
type Dims = (usize, usize, usize, usize);

fn case(
    seed: u64,
    lead: &[usize],
    (l, s, e, ev): Dims,
    mask: Option<Tensor>,
    a: Attention,
) -> Case {
    let dims = |rows, cols| {
        let mut d = lead.to_vec();
        d.extend([rows, cols]);
        d
    };
    let scale = |t: Tensor| (t * 2.0).unwrap();
    Case {
        q: scale(rand_tensor(seed, &dims(l, e))),
        k: scale(rand_tensor(seed + 1, &dims(s, e))),
        v: rand_tensor(seed + 2, &dims(s, ev)),
        mask,
        a,
        g: rand_tensor(seed + 3, &dims(l, ev)),
    }
}

fn run(c: &Case, dtype: DType) -> (AttentionOutput, AttentionGrads) {
    let cast = |t: &Tensor| t.to_dtype(dtype).unwrap();
    let (q, k, v, g) = (cast(&c.q), cast(&c.k), cast(&c.v), cast(&c.g));
    let mask = c.mask.as_ref().map(|m| {
        if m.dtype() == DType::U8 {
            m.clone()
        } else {
            cast(m)
        }
    });
    let y = scaled_dot_product_attention(&q, &k, &v, mask.as_ref(), &c.a, 3).unwrap();
    let grads =
        scaled_dot_product_attention_backward(&q, &k, &v, &y, &g, mask.as_ref(), &c.a, 3).unwrap();
    (y, grads)
}

/// A case with a [`bool_mask`] of `(seed, dims)`, no causal rule and no dropout.
fn masked(seed: u64, lead: &[usize], dims: Dims, mask: (u64, &[usize]), scale_dim: usize) -> Case {
    let m = Some(bool_mask(mask.0, mask.1));
    case(seed, lead, dims, m, settings(scale_dim, false, 0.0))
}

fn bool_mask(seed: u64, dims: &[usize]) -> Tensor {
    // About a quarter blocked, and row 0 of every slice fully blocked.
    let r = rand_tensor(seed, dims).ge(-0.5).unwrap();
    let cols = dims[dims.len() - 1];
    let mut v: Vec<u8> = r.flatten_all().unwrap().to_vec1().unwrap();
    let rows = dims[dims.len() - 2];
    for (i, x) in v.iter_mut().enumerate() {
        if (i / cols).is_multiple_of(rows) {
            *x = 0;
        }
    }
    Tensor::from_vec(v, dims, &Device::Cpu).unwrap()
}

fn cases() -> Vec<(&'static str, Case)> {
    vec![
        (
            "plain, uneven tiles",
            case(
                1,
                &[2, 3],
                (70, 150, 16, 12),
                None,
                settings(16, false, 0.0),
            ),
        ),
        (
            "causal, L = S",
            case(5, &[1, 2], (130, 130, 8, 8), None, settings(8, true, 0.0)),
        ),
        (
            "causal, L < S",
            case(9, &[2], (40, 200, 8, 4), None, settings(8, true, 0.0)),
        ),
        (
            "causal, L > S",
            case(13, &[2], (150, 30, 8, 4), None, settings(8, true, 0.0)),
        ),
        (
            "bool mask [L, S] shared",
            masked(17, &[2, 2], (66, 140, 8, 8), (99, &[66, 140]), 8),
        ),
        (
            "bool mask [B, 1, L, S]",
            masked(21, &[2, 3], (10, 20, 4, 4), (98, &[2, 1, 10, 20]), 4),
        ),
        (
            "additive mask",
            case(
                25,
                &[3],
                (65, 129, 8, 8),
                Some((rand_tensor(97, &[65, 129]) * 3.0).unwrap()),
                settings(8, false, 0.0),
            ),
        ),
        (
            "dropout",
            case(29, &[2, 2], (70, 140, 8, 8), None, settings(8, false, 0.3)),
        ),
        (
            "causal dropout, custom scale",
            case(
                33,
                &[2],
                (70, 70, 8, 8),
                None,
                Attention {
                    scale: 0.7,
                    ..settings(8, true, 0.2)
                },
            ),
        ),
        (
            "no leading dims",
            case(37, &[], (9, 11, 5, 3), None, settings(5, false, 0.0)),
        ),
    ]
}

#[test]
fn tiled_kernel_matches_the_unfused_ops_in_f64_and_f32() {
    for (name, c) in cases() {
        let (want_y, want_g) = KernelPath::Generic.scope(|| run(&c, DType::F64));
        for (dtype, tol) in [(DType::F64, 1e-12), (DType::F32, 2e-5)] {
            let (y, g) = run(&c, dtype);
            let up = |t: &Tensor| t.to_dtype(DType::F64).unwrap();
            let what = |part: &str| format!("{name} {dtype:?} {part}");
            assert_close(&what("out"), &up(&y.out), &want_y.out, tol);
            // exp: a row that sees no key has lse −∞ on both sides.
            let exp = |t: &Tensor| up(t).exp().unwrap();
            assert_close(&what("exp(lse)"), &exp(&y.lse), &exp(&want_y.lse), tol);
            assert_close(&what("dq"), &up(&g.q), &want_g.q, tol);
            assert_close(&what("dk"), &up(&g.k), &want_g.k, tol);
            assert_close(&what("dv"), &up(&g.v), &want_g.v, tol);
        }
    }
}

#[test]
fn a_row_that_sees_no_key_gives_zeros_and_no_nan() {
    let (_, c) = cases()
        .into_iter()
        .find(|(n, _)| n.starts_with("bool mask [L, S]"))
        .unwrap();
    for path in PATHS {
        let (y, g) = path.scope(|| run(&c, DType::F64));
        let first_row = |t: &Tensor| host_values(&t.narrow(2, 0, 1).unwrap()).unwrap();
        let (row0, lse0) = (first_row(&y.out), first_row(&y.lse));
        assert!(row0.iter().all(|&x| x == 0.0), "{path:?}: {row0:?}");
        assert!(lse0.iter().all(|&x| x == f64::NEG_INFINITY), "{path:?}");
        for t in [&y.out, &g.q, &g.k, &g.v] {
            assert!(wick_ops::first_non_finite(t).unwrap().is_none(), "{path:?}");
        }
    }
}

#[test]
fn gradients_match_finite_differences() {
    let small = [
        (
            "causal",
            case(41, &[2], (5, 5, 3, 2), None, settings(3, true, 0.0)),
        ),
        ("mask", masked(45, &[1, 2], (4, 6, 3, 3), (96, &[4, 6]), 3)),
        (
            "dropout",
            case(49, &[2], (5, 7, 3, 2), None, settings(3, false, 0.4)),
        ),
    ];
    for (name, c) in small {
        let (_, g) = run(&c, DType::F64);
        let mask = c.mask.as_ref();
        let out = |q: &Tensor, k: &Tensor, v: &Tensor| {
            scaled_dot_product_attention(q, k, v, mask, &c.a, 3)
                .unwrap()
                .out
        };
        let fd_q = numeric_grad(|q| out(q, &c.k, &c.v), &c.q, &c.g);
        let fd_k = numeric_grad(|k| out(&c.q, k, &c.v), &c.k, &c.g);
        let fd_v = numeric_grad(|v| out(&c.q, &c.k, v), &c.v, &c.g);
        assert_close(&format!("{name} dq"), &g.q, &fd_q, FD_TOL);
        assert_close(&format!("{name} dk"), &g.k, &fd_k, FD_TOL);
        assert_close(&format!("{name} dv"), &g.v, &fd_v, FD_TOL);
    }
}

#[test]
fn dropout_drops_its_share_and_keeps_the_expectation() {
    // v = 1: each output is the sum of the kept weights / (1 - p), 1 in expectation.
    let (l, s) = (256, 256);
    let q = Tensor::zeros((1, l, 4), DType::F64, &Device::Cpu).unwrap();
    let v = Tensor::ones((1, s, 1), DType::F64, &Device::Cpu).unwrap();
    let a = settings(4, false, 0.25);
    let y = scaled_dot_product_attention(&q, &q.narrow(1, 0, s).unwrap(), &v, None, &a, 0).unwrap();
    let out: Vec<f64> = y.out.flatten_all().unwrap().to_vec1().unwrap();
    let mean = out.iter().sum::<f64>() / out.len() as f64;
    assert!((mean - 1.0).abs() < 0.01, "mean {mean}");
    // Uniform weights 1/S: each output is (kept count)/(S (1 - p)); the kept share is 0.75.
    let kept = mean * 0.75;
    assert!((kept - 0.75).abs() < 0.01, "kept share {kept}");
    // Another step draws another mask; the same step the same one.
    let again =
        scaled_dot_product_attention(&q, &q.narrow(1, 0, s).unwrap(), &v, None, &a, 0).unwrap();
    let other =
        scaled_dot_product_attention(&q, &q.narrow(1, 0, s).unwrap(), &v, None, &a, 1).unwrap();
    assert_eq!(rel_err(&again.out, &y.out), 0.0);
    assert!(rel_err(&other.out, &y.out) > 0.0);
}

#[test]
fn bad_shapes_settings_and_masks_are_named() {
    let q = Tensor::zeros((2, 4, 8), DType::F32, &Device::Cpu).unwrap();
    let k5 = Tensor::zeros((2, 6, 5), DType::F32, &Device::Cpu).unwrap();
    let a = settings(8, false, 0.0);
    assert_error_names(
        scaled_dot_product_attention(&q, &k5, &k5, None, &a, 0),
        &[
            "scaled_dot_product_attention",
            "[2, 4, 8]",
            "[2, 6, 5]",
            "widths",
        ],
    );
    let k = Tensor::zeros((3, 6, 8), DType::F32, &Device::Cpu).unwrap();
    assert_error_names(
        scaled_dot_product_attention(&q, &k, &k, None, &a, 0),
        &["leading"],
    );
    let k = Tensor::zeros((2, 6, 8), DType::F32, &Device::Cpu).unwrap();
    let m = Tensor::zeros((4, 5), DType::U8, &Device::Cpu).unwrap();
    assert_error_names(
        scaled_dot_product_attention(&q, &k, &k, Some(&m), &a, 0),
        &["attn_mask [4, 5]", "[2, 4, 6]"],
    );
    let m = Tensor::zeros((4, 6), DType::F64, &Device::Cpu).unwrap();
    assert_error_names(
        scaled_dot_product_attention(&q, &k, &k, Some(&m), &a, 0),
        &["attn_mask", "F64"],
    );
    let m = Tensor::zeros((4, 6), DType::U8, &Device::Cpu).unwrap();
    let causal = settings(8, true, 0.0);
    assert_error_names(
        scaled_dot_product_attention(&q, &k, &k, Some(&m), &causal, 0),
        &["is_causal", "exclusive"],
    );
    let dropout = settings(8, false, 1.0);
    assert_error_names(
        scaled_dot_product_attention(&q, &k, &k, None, &dropout, 0),
        &["dropout_p", "[0, 1)"],
    );
    let k64 = k.to_dtype(DType::F64).unwrap();
    assert_error_names(
        scaled_dot_product_attention(&q, &k64, &k64, None, &a, 0),
        &["key", "F64"],
    );
}
