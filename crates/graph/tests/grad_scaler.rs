//! Dynamic loss scaling (PyTorch's `GradScaler`) in the graph: a scaled float32 step is
//! the unscaled step exactly (the scale is a power of two); a non-finite gradient skips
//! the updates and backs the scale off; good steps grow it after the interval; the scale
//! and its count are optimizer state; and under float16 autocast it is what keeps a
//! small gradient from flushing to zero.

use candle_core::{DType, Device, Tensor};
use wick_graph::nodes::optim::GradScaler;
use wick_graph::nodes::optim::Optimizer;
use wick_graph::{Executor, GraphBuilder, Mode, Precision};
use wick_ops::{AdamParams, SgdParams};

fn values(seed: u64, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (((i as u64 * 2654435761 + seed * 97) % 1000) as f32 / 1000.0 - 0.5) * 0.8)
        .collect()
}

/// `loss = loss_factor · sum(linear(x, w))`, SGD with lr 0.5, under `precision`, with
/// `scaler` if given.
fn step_graph(precision: Precision, scaler: Option<GradScaler>, loss_factor: f64) -> Executor {
    let sgd = Optimizer::Sgd(SgdParams {
        lr: 0.5,
        ..Default::default()
    });
    graph_with(precision, scaler, loss_factor, sgd)
}

fn graph_with(
    precision: Precision,
    scaler: Option<GradScaler>,
    loss_factor: f64,
    optimizer: Optimizer,
) -> Executor {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    b.set_precision(precision);
    if let Some(s) = scaler {
        b.set_grad_scaler(s).unwrap();
    }
    let x = b.input("x", &[16, 32], DType::F32).unwrap();
    let w = b.param("fc.weight", &[8, 32]).unwrap();
    let y = b.linear(x, w, None).unwrap();
    let y = b.mul_scalar(y, loss_factor).unwrap();
    let loss = b.sum(y, &[], false).unwrap();
    b.output(loss);
    let grads = b.backward(loss).unwrap();
    b.optimize(&grads, &optimizer.into()).unwrap();
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    let t = |v: Vec<f32>, s: &[usize]| Tensor::from_vec(v, s, &Device::Cpu).unwrap();
    exec.set("x", &t(values(1, 16 * 32), &[16, 32])).unwrap();
    exec.set("fc.weight", &t(values(2, 8 * 32), &[8, 32]))
        .unwrap();
    exec
}

fn weight(exec: &Executor) -> Vec<f32> {
    let t = exec.get("fc.weight").unwrap().unwrap();
    t.flatten_all().unwrap().to_vec1().unwrap()
}

fn scalar(exec: &Executor, name: &str) -> f64 {
    let t = exec.get(name).unwrap().unwrap();
    t.to_dtype(DType::F64).unwrap().to_scalar().unwrap()
}

#[test]
fn the_scaling_rules_are_pytorchs() {
    let s = GradScaler {
        growth_interval: 3,
        ..Default::default()
    };
    assert_eq!(s.next(65536.0, 0, true), (32768.0, 0));
    assert_eq!(s.next(65536.0, 1, false), (65536.0, 2));
    assert_eq!(s.next(65536.0, 2, false), (131072.0, 0));
    // Growth that would overflow keeps the scale (PyTorch keeps it finite).
    assert_eq!(s.next(f64::MAX, 2, false), (f64::MAX, 0));
    for bad in [
        GradScaler {
            init_scale: 0.0,
            ..s
        },
        GradScaler {
            growth_factor: 1.0,
            ..s
        },
        GradScaler {
            backoff_factor: 1.0,
            ..s
        },
        GradScaler {
            growth_interval: 0,
            ..s
        },
    ] {
        let err = GraphBuilder::new(Mode::Train, DType::F32)
            .set_grad_scaler(bad)
            .unwrap_err()
            .to_string();
        assert!(err.contains("grad_scaler"), "{err}");
    }
}

#[test]
fn a_scaled_float32_step_is_the_unscaled_step_exactly() {
    let mut plain = step_graph(Precision::F32, None, 1.0);
    let mut scaled = step_graph(Precision::F32, Some(GradScaler::default()), 1.0);
    let before = weight(&plain);
    for _ in 0..3 {
        plain.run().unwrap();
        scaled.run().unwrap();
    }
    assert_ne!(weight(&plain), before, "the steps updated the weight");
    assert_eq!(weight(&scaled), weight(&plain));
    assert_eq!(scalar(&scaled, "grad_scaler.scale"), 65536.0);
    assert_eq!(scalar(&scaled, "grad_scaler.growth_tracker"), 3.0);
    let state: Vec<String> = scaled
        .graph()
        .optimizer_state()
        .iter()
        .map(|v| scaled.graph().value(*v).name.clone())
        .collect();
    assert!(
        state.contains(&"grad_scaler.scale".to_string())
            && state.contains(&"grad_scaler.growth_tracker".to_string()),
        "checkpoints keep the scaler's state: {state:?}"
    );
}

#[test]
fn an_overflowing_step_is_skipped_and_the_scale_backs_off_then_grows() {
    // 2^127 times the loss factor 8 overflows every gradient to infinity in float32.
    let scaler = GradScaler {
        init_scale: 2f64.powi(127),
        growth_interval: 2,
        ..Default::default()
    };
    let mut exec = step_graph(Precision::F32, Some(scaler), 8.0);
    let found = exec
        .graph()
        .grad_scaler()
        .unwrap()
        .found_non_finite
        .unwrap();
    let found_name = exec.graph().value(found).name.clone();
    let before = weight(&exec);
    let mut skipped = 0;
    for _ in 0..100 {
        exec.run().unwrap();
        if scalar(&exec, &found_name) == 0.0 {
            break;
        }
        assert_eq!(weight(&exec), before, "a skipped step leaves the weight");
        skipped += 1;
    }
    assert!((1..100).contains(&skipped), "skipped {skipped} steps");
    let after_skips = scalar(&exec, "grad_scaler.scale");
    assert_eq!(after_skips, 2f64.powi(127 - skipped));
    assert_ne!(weight(&exec), before, "the first finite step updates");
    // Two good steps in a row (the interval): the scale doubles.
    exec.run().unwrap();
    assert_eq!(scalar(&exec, "grad_scaler.scale"), 2.0 * after_skips);
    assert_eq!(scalar(&exec, "grad_scaler.growth_tracker"), 0.0);
}

#[test]
fn adam_counts_only_the_steps_it_took() {
    // PyTorch's scaler does not call `optimizer.step()` on a skipped step, so Adam's bias
    // correction counts the updates taken. The scaled run skips its first steps
    // (2^127 overflows), then its first and second updates are the plain run's.
    let adam = Optimizer::Adam(AdamParams::adam(0.01));
    let scaler = GradScaler {
        init_scale: 2f64.powi(127),
        ..Default::default()
    };
    let mut plain = graph_with(Precision::F32, None, 8.0, adam);
    let mut scaled = graph_with(Precision::F32, Some(scaler), 8.0, adam);
    let step = |e: &mut Executor, n: i64| {
        e.set("step", &Tensor::new(n, &Device::Cpu).unwrap())
            .unwrap();
        e.run().unwrap();
    };
    let before = weight(&scaled);
    let mut taken = 0;
    for n in 0..100 {
        step(&mut scaled, n);
        if weight(&scaled) != before {
            taken = n;
            break;
        }
    }
    assert!(taken > 0, "the first steps overflow and are skipped");
    assert_eq!(scalar(&scaled, "grad_scaler.updates"), 1.0);
    step(&mut plain, 0);
    assert_eq!(
        weight(&scaled),
        weight(&plain),
        "the first update is Adam's step 1"
    );
    step(&mut scaled, taken + 1);
    step(&mut plain, 1);
    assert_eq!(weight(&scaled), weight(&plain), "the second is its step 2");
    assert_eq!(scalar(&scaled, "grad_scaler.updates"), 2.0);
}

#[test]
fn under_f16_autocast_scaling_keeps_small_gradients_from_flushing_to_zero() {
    // The output gradient 1e-8 is below float16's smallest subnormal (6e-8): an f16
    // product reads it as 0. Scaled by 2^16 it is 6.6e-4, well inside float16's range.
    let factor = 1e-8;
    let mut f32_run = step_graph(Precision::F32, None, factor);
    let mut f16_plain = step_graph(Precision::F16Autocast, None, factor);
    let mut f16_scaled = step_graph(Precision::F16Autocast, Some(GradScaler::default()), factor);
    let before = weight(&f32_run);
    for e in [&mut f32_run, &mut f16_plain, &mut f16_scaled] {
        e.run().unwrap();
    }
    let update = |e: &Executor| -> Vec<f64> {
        weight(e)
            .iter()
            .zip(&before)
            .map(|(a, b)| (*a as f64) - (*b as f64))
            .collect()
    };
    let (exact, plain, scaled) = (update(&f32_run), update(&f16_plain), update(&f16_scaled));
    assert!(
        exact.iter().any(|u| *u != 0.0),
        "the f32 step moves the weight"
    );
    assert!(
        plain.iter().all(|u| *u == 0.0),
        "unscaled f16 gradients flush to zero"
    );
    let worst = wick_ops::max_abs_diff_values(&scaled, &exact);
    let largest = exact.iter().fold(0.0f64, |m, e| m.max(e.abs()));
    assert!(
        worst <= 2f64.powi(-9) * largest,
        "scaled f16 update off by {worst:e} of {largest:e}"
    );
}
