//! Misuse of the tensor ops: each error names the op, the layer and the shapes or values.

use crate::common::assert_mentions;
use candle_core::{DType, Device, Tensor};
use wick_graph::{Executor, GraphBuilder, Mode};

fn err<T: std::fmt::Debug>(r: wick_graph::Result<T>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn shape_and_dtype_errors_name_the_op_layer_and_shapes() {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let a = b.input("a", &[2, 3], DType::F32).unwrap();
    let c = b.input("c", &[4, 5], DType::F32).unwrap();
    let e = err(b.in_layer("attn", |b| b.matmul(a, c)));
    assert_mentions(&e, &["matmul", "attn", "[2, 3] @ [4, 5]"]);
    let e = err(b.sum(a, &[2], false));
    assert_mentions(&e, &["sum", "dimension 2", "-2 to 1"]);
    let e = err(b.narrow(a, 1, 2, 2));
    assert_mentions(&e, &["narrow", "past dimension 1 of size 3"]);
    let e = err(b.expand(a, &[2, 4]));
    assert_mentions(&e, &["expand", "only expand from 1"]);
    let idx = b.input("idx", &[3], DType::F32).unwrap();
    let e = err(b.index_select(a, 0, idx));
    assert_mentions(&e, &["index_select", "integer"]);
    let mask = b.input("mask", &[3], DType::F32).unwrap();
    let e = err(b.masked_fill(a, mask, 0.0));
    assert_mentions(&e, &["masked_fill", "u8"]);
    let e = err(b.pow(a, f64::NAN));
    assert_mentions(&e, &["pow", "finite"]);
    let labels = b.input("labels", &[3], DType::I64).unwrap();
    let e = err(b.cross_entropy_with(a, labels, Default::default()));
    assert_mentions(&e, &["nll_loss", "[2]", "[3]"]);
    let e = err(b.argmax(a, 0, false).and_then(|m| b.exp(m)));
    assert_mentions(&e, &["exp", "float"]);
}

#[test]
fn out_of_range_indices_and_targets_are_errors_naming_the_value() {
    let cpu = Device::Cpu;
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let w = b.param("emb.weight", &[4, 2]).unwrap();
    let idx = b.input("tokens", &[3], DType::I64).unwrap();
    let y = b.in_layer("emb", |b| b.embedding(idx, w, None)).unwrap();
    let logits = b.input("logits", &[3, 4], DType::F32).unwrap();
    let loss = b
        .cross_entropy_with(logits, idx, Default::default())
        .unwrap();
    b.output(y);
    b.output(loss);
    let mut exec = Executor::new(b.finish(), &cpu);
    exec.set(
        "emb.weight",
        &Tensor::zeros((4, 2), DType::F32, &cpu).unwrap(),
    )
    .unwrap();
    exec.set("logits", &Tensor::zeros((3, 4), DType::F32, &cpu).unwrap())
        .unwrap();
    exec.set("tokens", &Tensor::new(&[0i64, 7, 1], &cpu).unwrap())
        .unwrap();
    let e = exec.run().unwrap_err().to_string();
    assert_mentions(&e, &["embedding", "index 7", "emb"]);
}

#[test]
fn binary_cross_entropy_refuses_an_input_that_is_not_a_probability() {
    let cpu = Device::Cpu;
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let p = b.input("p", &[3], DType::F32).unwrap();
    let t = b.input("t", &[3], DType::F32).unwrap();
    let loss = b.binary_cross_entropy(p, t).unwrap();
    b.output(loss);
    let mut exec = Executor::new(b.finish(), &cpu);
    exec.set("p", &Tensor::new(&[0.5f32, 1.5, 0.1], &cpu).unwrap())
        .unwrap();
    exec.set("t", &Tensor::new(&[1f32, 0., 1.], &cpu).unwrap())
        .unwrap();
    let e = exec.run().unwrap_err().to_string();
    assert_mentions(&e, &["binary_cross_entropy", "element 1 is 1.5"]);
}

#[test]
fn detach_and_comparisons_carry_no_gradient() {
    let mut b = GraphBuilder::new(Mode::Train, DType::F64);
    let w = b.param("w", &[3]).unwrap();
    let d = b.detach(w).unwrap();
    let loss = b.sum(d, &[], false).unwrap();
    let e = err(b.backward(loss));
    assert!(e.contains("no parameter flows into"), "{e}");
}
