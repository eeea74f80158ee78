//! SGD: the PyTorch fixture's three steps, and nesterov/dampening against hand computation.

use crate::common::*;
use candle_core::{Device, Tensor};
use wick_ops::{sgd_step, SgdParams};

/// The fixture's SGD settings.
fn fixture_params(f: &Fixture) -> SgdParams {
    SgdParams {
        lr: f.f64("lr"),
        momentum: f.f64("momentum"),
        weight_decay: f.f64("weight_decay"),
        dampening: f.f64("dampening"),
        nesterov: f.bool("nesterov"),
    }
}

#[test]
fn three_sgd_steps_match_pytorch_fixture() {
    let f = Fixture::load("sgd_momentum");
    let p = fixture_params(&f);
    let mut param = f.t("param_before").clone();
    let mut buf: Option<Tensor> = None;
    for step in 0..f.usize("steps") {
        let (new_p, new_buf) =
            sgd_step(&param, f.t(&format!("grad_step{step}")), buf.as_ref(), &p).unwrap();
        assert_close(
            &format!("param step {}", step + 1),
            &new_p,
            f.t(&format!("param_after_step{}", step + 1)),
            1e-6,
        );
        let nb = new_buf.expect("momentum buffer");
        assert_close(
            &format!("buf step {}", step + 1),
            &nb,
            f.t(&format!("momentum_buf_after_step{}", step + 1)),
            1e-6,
        );
        param = new_p;
        buf = Some(nb);
    }
}

#[test]
fn nesterov_and_dampening_follow_pytorch_formulas() {
    let dev = Device::Cpu;
    let p0 = Tensor::new(&[1.0f64, -2.0], &dev).unwrap();
    let g = Tensor::new(&[0.5f64, 0.25], &dev).unwrap();
    let buf = Tensor::new(&[0.1f64, 0.2], &dev).unwrap();
    let nest = SgdParams {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 0.01,
        dampening: 0.0,
        nesterov: true,
    };
    let (p1, b1) = sgd_step(&p0, &g, Some(&buf), &nest).unwrap();
    // d = g + wd*p; b = 0.9*buf + d; step = d + 0.9*b
    let d = [0.5 + 0.01, 0.25 - 0.02];
    let b = [0.9 * 0.1 + d[0], 0.9 * 0.2 + d[1]];
    let expect_p = [
        1.0 - 0.1 * (d[0] + 0.9 * b[0]),
        -2.0 - 0.1 * (d[1] + 0.9 * b[1]),
    ];
    assert_close(
        "nesterov p",
        &p1,
        &Tensor::new(&expect_p, &dev).unwrap(),
        1e-14,
    );
    assert_close(
        "nesterov buf",
        &b1.unwrap(),
        &Tensor::new(&b, &dev).unwrap(),
        1e-14,
    );

    let damp = SgdParams {
        lr: 0.5,
        momentum: 0.5,
        weight_decay: 0.0,
        dampening: 0.5,
        nesterov: false,
    };
    let (p2, b2) = sgd_step(&p0, &g, Some(&buf), &damp).unwrap();
    let b = [0.5 * 0.1 + 0.5 * 0.5, 0.5 * 0.2 + 0.5 * 0.25];
    assert_close(
        "damp buf",
        &b2.unwrap(),
        &Tensor::new(&b, &dev).unwrap(),
        1e-14,
    );
    assert_close(
        "damp p",
        &p2,
        &Tensor::new(&[1.0 - 0.5 * b[0], -2.0 - 0.5 * b[1]], &dev).unwrap(),
        1e-14,
    );

    let plain = SgdParams {
        lr: 0.1,
        ..Default::default()
    };
    let (p3, b3) = sgd_step(&p0, &g, None, &plain).unwrap();
    assert!(b3.is_none());
    assert_close(
        "plain",
        &p3,
        &Tensor::new(&[0.95f64, -2.025], &dev).unwrap(),
        1e-14,
    );
}

#[test]
fn invalid_settings_and_shapes_are_errors() {
    let dev = Device::Cpu;
    let p = Tensor::new(&[1.0f64, 2.0], &dev).unwrap();
    let g = Tensor::new(&[1.0f64, 2.0, 3.0], &dev).unwrap();
    assert_error_names(
        sgd_step(&p, &g, None, &SgdParams::default()),
        &["sgd", "[3]", "[2]"],
    );
    let bad = SgdParams {
        nesterov: true,
        ..Default::default()
    };
    assert!(sgd_step(&p, &p, None, &bad)
        .unwrap_err()
        .to_string()
        .contains("nesterov"));
}

#[test]
fn in_place_steps_match_pytorch_fixture_and_the_out_of_place_kernel() {
    let f = Fixture::load("sgd_momentum");
    let p = SgdParams {
        dampening: 0.0,
        nesterov: false,
        ..fixture_params(&f)
    };
    let param = f.t("param_before").copy().unwrap();
    let mut buf: Option<Tensor> = None;
    for step in 0..3 {
        let (same, b) = wick_ops::optim::sgd_step_in_place(
            &param,
            f.t(&format!("grad_step{step}")),
            buf.as_ref(),
            &p,
        )
        .unwrap();
        assert_close(
            &format!("in-place param step {}", step + 1),
            &param,
            f.t(&format!("param_after_step{}", step + 1)),
            1e-6,
        );
        assert_close("returned param", &same, &param, 0.0);
        let b = b.unwrap();
        assert_close(
            &format!("in-place buf step {}", step + 1),
            &b,
            f.t(&format!("momentum_buf_after_step{}", step + 1)),
            1e-6,
        );
        buf = Some(b);
    }
    // Every setting, in place against out of place, over a few steps, on a tensor that
    // spans several blocks of the blocked momentum update and a partial one.
    let dev = Device::Cpu;
    let shape = [3, 200_000];
    for p in [
        SgdParams {
            lr: 0.1,
            momentum: 0.9,
            weight_decay: 0.01,
            dampening: 0.0,
            nesterov: true,
        },
        SgdParams {
            lr: 0.5,
            momentum: 0.5,
            weight_decay: 0.0,
            dampening: 0.3,
            nesterov: false,
        },
        SgdParams {
            lr: 0.2,
            momentum: 0.0,
            weight_decay: 0.1,
            dampening: 0.0,
            nesterov: false,
        },
    ] {
        let start = rand_tensor(1, &shape);
        let (mut a, mut abuf) = (start.clone(), None::<Tensor>);
        let b = start.copy().unwrap();
        let mut bbuf = None::<Tensor>;
        for step in 0..3 {
            let g = rand_tensor(10 + step, &shape);
            let (na, nb) = sgd_step(&a, &g, abuf.as_ref(), &p).unwrap();
            a = na;
            abuf = nb;
            let (_, nb) = wick_ops::optim::sgd_step_in_place(&b, &g, bbuf.as_ref(), &p).unwrap();
            bbuf = nb;
            assert_close(&format!("{p:?} step {step}"), &b, &a, 1e-14);
        }
        assert_eq!(abuf.is_some(), bbuf.is_some());
        let _ = &dev;
    }
}
