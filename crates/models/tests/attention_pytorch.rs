//! `Layers::multi_head_attention` against `nn.MultiheadAttention(8, 2, batch_first=True)`
//! with a causal mask (fixtures/tensor-ops/mha_causal, float64): the output and the
//! gradients of the input and of the four parameters, under PyTorch's names.

use std::path::PathBuf;

use candle_core::{DType, Device};
use wick_graph::{GraphBuilder, Mode};
use wick_models::nn::Layers;

mod common;
use common::VjpCheck;

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
    let mut check = VjpCheck::new(b, y, go);
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
        check.exec.set(name, &f[&fixture_name(name)]).unwrap();
    }
    check.exec.set("mask", &f["mask"]).unwrap();
    check.exec.set("grad_out", &f["grad_out"]).unwrap();
    let worst = check.worst_error(&f, fixture_name);
    assert!(worst < 1e-12, "{worst:.2e} from PyTorch float64");
}
