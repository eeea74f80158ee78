//! `GraphBuilder::constant`: a tensor fixed at recording time, placed by the executor,
//! read by every run, never fed, never updated, outside the state dict, and no gradient
//! flows into it.

use candle_core::{DType, Device, Tensor};
use wick_graph::{Executor, GraphBuilder, Mode, ValueKind};
use wick_ops::SgdParams;

/// `loss = sum((x·w) * table)` with `table` a constant; returns the executor, the loss
/// and the constant's id.
fn record(table: &Tensor) -> (Executor, wick_graph::ValueId, wick_graph::ValueId) {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let x = b.input("x", &[2, 3], DType::F32).unwrap();
    let w = b.param("w", &[3, 3]).unwrap();
    let c = b.constant("table", table).unwrap();
    let h = b.matmul(x, w).unwrap();
    let y = b.mul(h, c).unwrap();
    let loss = b.sum(y, &[0, 1], false).unwrap();
    b.output(loss);
    let grads = b.backward(loss).unwrap();
    assert!(grads.get(c).is_none(), "no gradient for a constant");
    let sgd = SgdParams {
        lr: 0.1,
        ..Default::default()
    };
    b.sgd(&grads, sgd).unwrap();
    (Executor::new(b.finish(), &Device::Cpu), loss, c)
}

#[test]
fn a_constant_is_read_by_every_run_and_never_set_updated_or_saved() {
    let cpu = Device::Cpu;
    let table = Tensor::new(&[[1f32, 2., 3.], [4., 5., 6.]], &cpu).unwrap();
    let (mut exec, loss, c) = record(&table);
    assert_eq!(exec.graph().value(c).kind, ValueKind::Constant);
    exec.set("w", &Tensor::ones((3, 3), DType::F32, &cpu).unwrap())
        .unwrap();
    exec.set("x", &Tensor::ones((2, 3), DType::F32, &cpu).unwrap())
        .unwrap();
    exec.run().unwrap();
    // x·w is 3 everywhere: the loss is 3·Σ table = 63.
    assert_eq!(exec.value(loss).unwrap().to_scalar::<f32>().unwrap(), 63.0);
    // The update used the constant: w's gradient is xᵀ·table, column sums 5, 7, 9.
    let w: Vec<Vec<f32>> = exec.get("w").unwrap().unwrap().to_vec2().unwrap();
    for (got, want) in w[0].iter().zip([0.5, 0.3, 0.1]) {
        assert!((got - want).abs() < 1e-6, "{:?}", w[0]);
    }
    exec.run().unwrap();
    let table_now: Vec<Vec<f32>> = exec.value(c).unwrap().to_vec2().unwrap();
    assert_eq!(table_now, table.to_vec2::<f32>().unwrap(), "unchanged");
    let e = exec.set("table", &table).unwrap_err().to_string();
    assert!(e.contains("`table` is a constant"), "{e}");
    let names: Vec<String> = exec
        .state_dict()
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["w"]);
    let plan = exec.graph().memory_plan();
    assert_eq!(plan.split.inputs, (6 + 6) * 4, "x and the table");
}

#[test]
fn a_constant_takes_a_unique_name() {
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    b.input("x", &[2], DType::F32).unwrap();
    let t = Tensor::zeros(2, DType::F32, &Device::Cpu).unwrap();
    let e = b.constant("x", &t).unwrap_err().to_string();
    assert!(e.contains("`x` already exists"), "{e}");
}
