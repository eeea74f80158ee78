//! `Executor::set_shared`: a parameter no node writes is read from the caller's storage
//! (no copy), with the same results as `set`; a parameter an update writes, and an input,
//! are refused by name.

mod common;

use candle_core::{DType, Device, Tensor};
use common::*;
use wick_graph::{Executor, Mode};
use wick_ops::SgdParams;

fn weights(exec: &Executor, seed: u64) -> Vec<(String, Tensor)> {
    let mut fresh = Executor::new(exec.graph().clone(), &Device::Cpu);
    init(&mut fresh, DType::F32, seed);
    fresh.state_dict().unwrap()
}

#[test]
fn an_inference_graph_reads_shared_weights_without_copying_them() {
    let (graph, net, _) = build(Mode::Eval, DType::F32, 2, 8, 3);
    let (mut copied, mut shared) = (
        Executor::new(graph.clone(), &Device::Cpu),
        Executor::new(graph, &Device::Cpu),
    );
    for (name, t) in weights(&copied, 3) {
        copied.set(&name, &t).unwrap();
        shared.set_shared(&name, &t).unwrap();
        assert_ne!(
            copied.get(&name).unwrap().unwrap().id(),
            t.id(),
            "set copies"
        );
        assert_eq!(shared.get(&name).unwrap().unwrap().id(), t.id(), "{name}");
    }
    let images = Tensor::ones((2, 3, 8, 8), DType::F32, &Device::Cpu).unwrap();
    let logits = |exec: &mut Executor| -> Vec<f32> {
        exec.set("images", &images).unwrap();
        let labels = Tensor::new(&[0u32, 2], &Device::Cpu).unwrap();
        exec.set("labels", &labels).unwrap();
        exec.run().unwrap();
        let t = exec.get_id(net.logits).unwrap().unwrap();
        t.flatten_all().unwrap().to_vec1().unwrap()
    };
    assert_eq!(logits(&mut copied), logits(&mut shared));
}

#[test]
fn a_value_an_update_writes_and_an_input_are_refused_by_name() {
    let sgd = SgdParams {
        lr: 0.1,
        ..Default::default()
    };
    let mut exec = Executor::new(small_training_graph(DType::F32, 2, 8, 3, sgd), &Device::Cpu);
    let w = Tensor::zeros((6, 3, 3, 3), DType::F32, &Device::Cpu).unwrap();
    let err = exec.set_shared("stem.weight", &w).unwrap_err().to_string();
    assert_mentions(
        &err,
        &["set_shared", "stem.weight", "OP_ID", "SgdUpdate", "set it"],
    );
    let images = Tensor::ones((2, 3, 8, 8), DType::F32, &Device::Cpu).unwrap();
    let err = exec.set_shared("images", &images).unwrap_err().to_string();
    assert_mentions(&err, &["images", "not a parameter"]);
    let wrong = Tensor::zeros((6, 3, 5, 5), DType::F32, &Device::Cpu).unwrap();
    let (graph, _, _) = build(Mode::Eval, DType::F32, 2, 8, 3);
    let mut exec = Executor::new(graph, &Device::Cpu);
    let err = exec
        .set_shared("stem.weight", &wrong)
        .unwrap_err()
        .to_string();
    assert_mentions(&err, &["stem.weight", "[6, 3, 3, 3]", "[6, 3, 5, 5]"]);
}
