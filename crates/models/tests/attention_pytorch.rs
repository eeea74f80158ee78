//! `Layers::multi_head_attention` against `nn.MultiheadAttention(8, 2, batch_first=True)`
//! with a causal mask (fixtures/tensor-ops/mha_causal, float64): the output and the
//! gradients of the input and of the four parameters, under PyTorch's names.

use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use wick_graph::{Executor, GraphBuilder, Mode};
use wick_models::nn::Layers;

fn rel_err(a: &Tensor, b: &Tensor) -> f64 {
    let v = |t: &Tensor| -> Vec<f64> { t.flatten_all().unwrap().to_vec1().unwrap() };
    let (a, b) = (v(a), v(b));
    let scale = b.iter().fold(1e-300f64, |m, x| m.max(x.abs()));
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs() / scale)
        .fold(0.0, f64::max)
}

#[test]
fn multi_head_attention_matches_pytorch_with_its_names() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/tensor-ops/mha_causal.safetensors");
    let f = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
    let mut b = GraphBuilder::new(Mode::Train, DType::F64);
    let x = b.param("x", &[2, 5, 8]).unwrap();
    let mask = b.input("mask", &[5, 5], DType::U8).unwrap();
    let go = b.input("grad_out", &[2, 5, 8], DType::F64).unwrap();
    let mut nn = Layers::new(&mut b);
    let y = nn
        .multi_head_attention("attn", x, 8, 2, Some(mask))
        .unwrap();
    let names: Vec<_> = nn.specs().iter().map(|s| s.name.clone()).collect();
    assert_eq!(
        names,
        [
            "attn.in_proj_weight",
            "attn.in_proj_bias",
            "attn.out_proj.weight",
            "attn.out_proj.bias"
        ]
    );
    let prod = b.mul(y, go).unwrap();
    let loss = b.sum(prod, &[], false).unwrap();
    let grads = b.backward(loss).unwrap();
    b.output(y);
    let pairs: Vec<_> = grads.iter().collect();
    pairs.iter().for_each(|(_, g)| b.output(*g));
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    let fixture_name = |n: &str| {
        n.strip_prefix("attn.")
            .unwrap_or(n)
            .replace("out_proj.", "out_proj_")
            .replace('x', "input")
    };
    for name in [
        "x",
        "attn.in_proj_weight",
        "attn.in_proj_bias",
        "attn.out_proj.weight",
        "attn.out_proj.bias",
    ] {
        exec.set(name, &f[&fixture_name(name)]).unwrap();
    }
    exec.set("mask", &f["mask"]).unwrap();
    exec.set("grad_out", &f["grad_out"]).unwrap();
    exec.run().unwrap();
    let mut worst = rel_err(exec.get_id(y).unwrap().unwrap(), &f["out"]);
    for (p, g) in pairs {
        let name = exec.graph().value(p).name.clone();
        let expected = &f[&format!("grad_{}", fixture_name(&name))];
        worst = worst.max(rel_err(exec.get_id(g).unwrap().unwrap(), expected));
    }
    assert!(worst < 1e-12, "{worst:.2e} from PyTorch float64");
}
