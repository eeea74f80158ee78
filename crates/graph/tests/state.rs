//! The model's state apart from the optimizer's: a strict load of a training graph's model
//! state into an eval graph; Adam's moments and step counter restored into a fresh
//! executor continue the run bit for bit; a snapshot keeps its values while the weight
//! changes.

use candle_core::{DType, Device, Tensor};
use wick_graph::nodes::optim::Optimizer;
use wick_graph::state_dict::LoadMode;
use wick_graph::{Executor, GraphBuilder, Mode};
use wick_ops::AdamParams;

fn model(b: &mut GraphBuilder) -> wick_graph::ValueId {
    let x = b.input("x", &[4, 3], DType::F32).unwrap();
    let w = b.param("fc.weight", &[2, 3]).unwrap();
    let bias = b.param("fc.bias", &[2]).unwrap();
    b.linear(x, w, Some(bias)).unwrap()
}

fn training() -> Executor {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let y = model(&mut b);
    let t = b.input("t", &[4, 2], DType::F32).unwrap();
    let loss = b.mse_loss(y, t).unwrap();
    b.output(loss);
    let grads = b.backward(loss).unwrap();
    b.optimize(&grads, &Optimizer::Adam(AdamParams::adam(0.05)).into())
        .unwrap();
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    let cpu = Device::Cpu;
    let x: Vec<f32> = (0..12).map(|i| (i as f32 * 0.37).sin()).collect();
    exec.set("x", &Tensor::from_vec(x, (4, 3), &cpu).unwrap())
        .unwrap();
    exec.set("t", &Tensor::ones((4, 2), DType::F32, &cpu).unwrap())
        .unwrap();
    exec.set(
        "fc.weight",
        &Tensor::new(&[[0.1f32, -0.2, 0.3], [0.0, 0.5, -0.1]], &cpu).unwrap(),
    )
    .unwrap();
    exec.set("fc.bias", &Tensor::new(&[0.1f32, -0.1], &cpu).unwrap())
        .unwrap();
    exec
}

fn step(exec: &mut Executor, i: i64) {
    exec.set("step", &Tensor::new(i, &Device::Cpu).unwrap())
        .unwrap();
    exec.run().unwrap();
}

fn bits(exec: &Executor, name: &str) -> Vec<u32> {
    wick_ops::compare::f32_bits(exec.get(name).unwrap().unwrap()).unwrap()
}

#[test]
fn model_and_optimizer_state_are_apart_and_restore_a_run_exactly() {
    let mut a = training();
    for i in 0..3 {
        step(&mut a, i);
    }
    let model_state = a.model_state_dict().unwrap();
    let names: Vec<_> = model_state.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["fc.weight", "fc.bias"]);
    let optimizer_state = a.optimizer_state_dict().unwrap();
    let names: Vec<_> = optimizer_state.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "fc.weight.exp_avg",
            "fc.weight.exp_avg_sq",
            "fc.bias.exp_avg",
            "fc.bias.exp_avg_sq",
            "step"
        ]
    );
    // A strict load of the model's state into an eval graph.
    let mut eb = GraphBuilder::new(Mode::Eval, DType::F32);
    model(&mut eb);
    let mut eval = Executor::new(eb.finish(), &Device::Cpu);
    let report = eval
        .load_state_dict(model_state.iter().map(|(n, t)| (n, t)), LoadMode::Strict)
        .unwrap();
    assert_eq!(report.loaded.len(), 2);
    // A fresh executor with both states continues the run bit for bit.
    let mut b = training();
    b.load_state_dict(model_state.iter().map(|(n, t)| (n, t)), LoadMode::Strict)
        .unwrap();
    assert_eq!(
        b.load_optimizer_state_dict(optimizer_state.iter().map(|(n, t)| (n, t)))
            .unwrap(),
        5
    );
    let restored_step = b.get("step").unwrap().unwrap().to_scalar::<i64>().unwrap();
    assert_eq!(restored_step, 2);
    step(&mut a, 3);
    step(&mut b, restored_step + 1);
    assert_eq!(bits(&a, "fc.weight"), bits(&b, "fc.weight"));
    assert_eq!(
        bits(&a, "fc.weight.exp_avg_sq"),
        bits(&b, "fc.weight.exp_avg_sq")
    );
    // Without the optimizer's state the next step differs (the check can fail).
    let mut c = training();
    c.load_state_dict(model_state.iter().map(|(n, t)| (n, t)), LoadMode::Strict)
        .unwrap();
    step(&mut c, 3);
    assert_ne!(bits(&a, "fc.weight"), bits(&c, "fc.weight"));
    let err = c
        .load_optimizer_state_dict([(&"fc.weight".to_string(), &model_state[0].1)])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`fc.weight` is not this graph's optimizer state"),
        "{err}"
    );
}

#[test]
fn a_snapshot_keeps_its_values_while_the_weight_is_updated() {
    let mut a = training();
    step(&mut a, 0);
    let snapshot = a.snapshot("fc.weight").unwrap().unwrap();
    let before: Vec<f32> = snapshot.flatten_all().unwrap().to_vec1().unwrap();
    step(&mut a, 1);
    let after: Vec<f32> = snapshot.flatten_all().unwrap().to_vec1().unwrap();
    let live = a.get("fc.weight").unwrap().unwrap();
    let live: Vec<f32> = live.flatten_all().unwrap().to_vec1().unwrap();
    assert_eq!(before, after, "the snapshot is a copy");
    assert_ne!(before, live, "the weight moved");
}
