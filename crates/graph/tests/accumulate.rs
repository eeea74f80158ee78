//! Gradient accumulation in the graph: k micro-batches give the weights of one k-times
//! batch (SGD with momentum and weight decay; Adam with clipping), the updates run on
//! every k-th step only, and a run resumed mid-cycle continues bit for bit.

use candle_core::{DType, Device, Tensor};
use wick_graph::nodes::optim::{Optimizer, OptimizerConfig};
use wick_graph::state_dict::LoadMode;
use wick_graph::{Executor, GraphBuilder, Mode};
use wick_ops::{AdamParams, Kernel, SgdParams};

const K: usize = 3;
const MICRO: usize = 2;

/// A two-layer regression with a mean loss, over batches of `rows`.
fn regression(rows: usize, config: &OptimizerConfig, dtype: DType) -> Executor {
    let mut b = GraphBuilder::new(Mode::Train, dtype);
    let x = b.input("x", &[rows, 3], dtype).unwrap();
    let t = b.input("t", &[rows, 2], dtype).unwrap();
    let w1 = b.param("l1.weight", &[4, 3]).unwrap();
    let w2 = b.param("l2.weight", &[2, 4]).unwrap();
    let h = b.linear(x, w1, None).unwrap();
    let h = b.tanh(h).unwrap();
    let y = b.linear(h, w2, None).unwrap();
    let loss = b.mse_loss(y, t).unwrap();
    b.output(loss);
    let grads = b.backward(loss).unwrap();
    b.optimize(&grads, config).unwrap();
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    let cpu = Device::Cpu;
    let w1v: Vec<f64> = (0..12).map(|i| ((i * 5) % 7) as f64 / 7.0 - 0.4).collect();
    let w2v: Vec<f64> = (0..8).map(|i| ((i * 3) % 5) as f64 / 5.0 - 0.3).collect();
    exec.set(
        "l1.weight",
        &Tensor::from_vec(w1v, (4, 3), &cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap(),
    )
    .unwrap();
    exec.set(
        "l2.weight",
        &Tensor::from_vec(w2v, (2, 4), &cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap(),
    )
    .unwrap();
    exec
}

/// The whole batch of cycle `cycle` (K·MICRO rows), or its micro-batch `micro`.
fn batch(cycle: usize, micro: Option<usize>, dtype: DType) -> (Tensor, Tensor) {
    let rows = K * MICRO;
    let x: Vec<f64> = (0..rows * 3)
        .map(|i| ((i * 7 + cycle * 11) % 13) as f64 / 13.0 - 0.5)
        .collect();
    let t: Vec<f64> = (0..rows * 2)
        .map(|i| ((i * 3 + cycle) % 5) as f64 / 5.0)
        .collect();
    let cpu = Device::Cpu;
    let (x, t) = (
        Tensor::from_vec(x, (rows, 3), &cpu).unwrap(),
        Tensor::from_vec(t, (rows, 2), &cpu).unwrap(),
    );
    let (x, t) = match micro {
        Some(m) => (
            x.narrow(0, m * MICRO, MICRO).unwrap(),
            t.narrow(0, m * MICRO, MICRO).unwrap(),
        ),
        None => (x, t),
    };
    (x.to_dtype(dtype).unwrap(), t.to_dtype(dtype).unwrap())
}

fn run(exec: &mut Executor, step: usize, (x, t): (Tensor, Tensor)) {
    exec.set("x", &x).unwrap();
    exec.set("t", &t).unwrap();
    if exec.graph().find("step").is_some() {
        let step = Tensor::new(step as i64, &Device::Cpu).unwrap();
        exec.set("step", &step).unwrap();
    }
    exec.run().unwrap();
}

fn values(exec: &Executor, name: &str) -> Vec<f64> {
    wick_ops::compare::host_values(exec.get(name).unwrap().unwrap()).unwrap()
}

#[test]
fn k_micro_batches_give_the_weights_of_one_k_times_batch() {
    let sgd = Optimizer::Sgd(SgdParams {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 1e-2,
        ..Default::default()
    });
    let adam = Optimizer::Adam(AdamParams::adamw(0.05));
    for config in [
        OptimizerConfig::from(sgd),
        OptimizerConfig::from(adam).clip_grad_norm(0.5),
    ] {
        let mut whole = regression(K * MICRO, &config, DType::F64);
        let mut micro = regression(MICRO, &config.clone().accumulate(K), DType::F64);
        let updates = micro
            .graph()
            .nodes()
            .iter()
            .filter(|n| n.op.kernel() == Kernel::AccumulateMicroBatch)
            .count();
        assert_eq!(updates, 2, "one accumulator per parameter");
        for cycle in 0..2 {
            run(&mut whole, cycle, batch(cycle, None, DType::F64));
            let before = values(&micro, "l1.weight");
            for m in 0..K {
                run(&mut micro, cycle * K + m, batch(cycle, Some(m), DType::F64));
                let now = values(&micro, "l1.weight");
                assert_eq!(
                    now == before,
                    m < K - 1,
                    "updates only on the cycle's last micro-batch"
                );
            }
            for name in ["l1.weight", "l2.weight"] {
                let (a, b) = (values(&whole, name), values(&micro, name));
                let worst = wick_ops::max_abs_diff_values(&a, &b);
                assert!(
                    worst < 1e-12,
                    "{config:?} {name} after cycle {cycle}: {worst:.2e}"
                );
            }
        }
    }
}

#[test]
fn a_run_resumed_mid_cycle_continues_bit_for_bit() {
    let config = OptimizerConfig::from(Optimizer::Adam(AdamParams::adam(0.05))).accumulate(K);
    let mut a = regression(MICRO, &config, DType::F32);
    for step in 0..2 {
        run(&mut a, step, batch(0, Some(step), DType::F32));
    }
    let model = a.model_state_dict().unwrap();
    let optimizer = a.optimizer_state_dict().unwrap();
    assert!(optimizer.iter().any(|(n, _)| n == "l1.weight.grad_accum"));
    let mut b = regression(MICRO, &config, DType::F32);
    b.load_state_dict(model.iter().map(|(n, t)| (n, t)), LoadMode::Strict)
        .unwrap();
    b.load_optimizer_state_dict(optimizer.iter().map(|(n, t)| (n, t)))
        .unwrap();
    for step in 2..7 {
        let data = batch(step / K, Some(step % K), DType::F32);
        run(&mut a, step, data.clone());
        run(&mut b, step, data);
    }
    let bits = |e: &Executor| -> Vec<u32> {
        values(e, "l1.weight")
            .iter()
            .map(|v| (*v as f32).to_bits())
            .collect()
    };
    assert_eq!(bits(&a), bits(&b));
    // Without the accumulator the resumed run differs (the check can fail).
    let mut c = regression(MICRO, &config, DType::F32);
    c.load_state_dict(model.iter().map(|(n, t)| (n, t)), LoadMode::Strict)
        .unwrap();
    let without: Vec<_> = optimizer
        .iter()
        .filter(|(n, _)| !n.ends_with("grad_accum"))
        .collect();
    c.load_optimizer_state_dict(without.iter().map(|(n, t)| (n, t)))
        .unwrap();
    for step in 2..7 {
        run(&mut c, step, batch(step / K, Some(step % K), DType::F32));
    }
    assert_ne!(bits(&a), bits(&c));
}

#[test]
fn a_profiled_accumulating_run_times_the_deferred_updates_per_step() {
    use wick_profiler::{Profile, TimeProfiler};
    let config = OptimizerConfig::from(Optimizer::Adam(AdamParams::adam(0.05))).accumulate(K);
    let mut exec = regression(MICRO, &config, DType::F32);
    exec.add_hook(TimeProfiler::new(2, 0)).unwrap();
    for step in 0..2 * K {
        run(&mut exec, step, batch(step / K, Some(step % K), DType::F32));
    }
    let profile = exec.hook::<TimeProfiler>().unwrap().profile();
    let names: Vec<_> = profile.ops.iter().map(|o| o.name.as_str()).collect();
    assert!(
        names.contains(&"AccumulateMicroBatch") && names.contains(&"AdamUpdate"),
        "{names:?}"
    );
    // The profile's figures stay consistent (its JSON round-trips and validates).
    let back = Profile::from_json(&profile.to_json()).unwrap();
    back.validate().unwrap();
}
