//! GPT-2 against Hugging Face's GPT2LMHeadModel (`fixtures/gpt2`, made by
//! `scripts/make_gpt2_fixture.py`): its config.json read as transformers wrote it, its
//! weights loaded by their names, and the logits, the loss and every parameter after one
//! AdamW step, in float64 and float32.

use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use wick_graph::nodes::optim::{Optimizer, OptimizerConfig};
use wick_graph::{Executor, GraphBuilder, Mode};
use wick_models::gpt2::{Gpt2, Gpt2Config, Sampling};
use wick_models::nn::Layers;
use wick_ops::AdamParams;

fn fixture() -> (
    Gpt2Config,
    std::collections::HashMap<String, Tensor>,
    std::collections::HashMap<String, String>,
) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/gpt2");
    let config =
        Gpt2Config::from_json(&std::fs::read_to_string(dir.join("tiny.config.json")).unwrap())
            .unwrap();
    let bytes = std::fs::read(dir.join("tiny.safetensors")).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let meta = header.metadata().clone().unwrap_or_default();
    let tensors = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).unwrap();
    (config, tensors, meta)
}

fn rel(a: &Tensor, b: &Tensor) -> f64 {
    wick_ops::max_rel_diff(&a.to_dtype(DType::F64).unwrap(), b).unwrap()
}

/// One AdamW step of the fixture's model in `dtype`; returns the worst relative errors of
/// the logits, the loss and the updates (each update against transformers' update).
fn run(dtype: DType) -> (f64, f64, f64, usize) {
    let (config, t, _) = fixture();
    assert_eq!(
        (
            config.n_embd,
            config.n_layer,
            config.n_head,
            config.vocab_size,
            config.n_inner
        ),
        (32, 2, 4, 50, 128)
    );
    let tokens = &t["tokens"];
    let mut b = GraphBuilder::new(Mode::Train, dtype);
    let input = b.input("tokens", tokens.dims(), DType::I64).unwrap();
    let mut nn = Layers::new(&mut b);
    let out = Gpt2::new(config).next_token_loss(&mut nn, input).unwrap();
    let specs = nn.into_specs();
    b.output(out.logits);
    b.output(out.loss);
    let grads = b.backward(out.loss).unwrap();
    let adamw = Optimizer::Adam(AdamParams {
        lr: 1e-2,
        ..AdamParams::adamw(1e-2)
    });
    b.optimize(&grads, &OptimizerConfig::from(adamw)).unwrap();
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    // Every parameter the model creates is in the checkpoint, under its Hugging Face name.
    assert_eq!(
        specs.len(),
        t.keys().filter(|k| k.starts_with("weights.")).count()
    );
    for s in &specs {
        let w = &t[&format!("weights.{}", s.name)];
        assert_eq!(w.dims(), s.shape.as_slice(), "{}", s.name);
        exec.set(&s.name, &w.to_dtype(dtype).unwrap()).unwrap();
    }
    exec.set("tokens", tokens).unwrap();
    exec.set("step", &Tensor::new(0i64, &Device::Cpu).unwrap())
        .unwrap();
    exec.run().unwrap();
    let logits = rel(exec.value(out.logits).unwrap(), &t["logits"]);
    let loss = rel(
        &exec.value(out.loss).unwrap().reshape(1).unwrap(),
        &t["loss"],
    );
    let mut update = 0f64;
    for s in &specs {
        let before = &t[&format!("weights.{}", s.name)];
        let ours = (exec
            .get(&s.name)
            .unwrap()
            .unwrap()
            .to_dtype(DType::F64)
            .unwrap()
            - before)
            .unwrap();
        let theirs = (&t[&format!("after.{}", s.name)] - before).unwrap();
        update = update.max(rel(&ours, &theirs));
    }
    (logits, loss, update, specs.len())
}

#[test]
fn gpt2_matches_transformers_logits_loss_and_one_adamw_step() {
    let (_, _, meta) = fixture();
    let torch = |k: &str| meta[k].parse::<f64>().unwrap();
    let (logits, loss, update, n) = run(DType::F64);
    println!(
        "float64: logits {logits:.2e}, loss {loss:.2e}, updates of {n} parameters {update:.2e}"
    );
    assert!(
        logits < 1e-12 && loss < 1e-12 && update < 1e-9,
        "float64: {logits:.2e} {loss:.2e} {update:.2e}"
    );
    let (logits, loss, update, _) = run(DType::F32);
    println!(
        "float32: logits {logits:.2e} (PyTorch f32 {:.2e}), loss {loss:.2e}, updates {update:.2e} (PyTorch f32 {:.2e})",
        torch("torch_f32_logits_err"),
        torch("torch_f32_update_err")
    );
    assert!(
        logits <= 4.0 * torch("torch_f32_logits_err").max(1e-7),
        "float32 logits {logits:.2e}"
    );
    assert!(loss <= 1e-6, "float32 loss {loss:.2e}");
    assert!(
        update <= 4.0 * torch("torch_f32_update_err").max(1e-6),
        "float32 updates {update:.2e}"
    );
}

#[test]
fn config_json_settings_gpt2_lacks_are_refused() {
    let bad = [
        (r#"{"n_embd": 30, "n_head": 4}"#, "multiple of n_head"),
        (r#"{"activation_function": "relu"}"#, "activation_function"),
        (r#"{"tie_word_embeddings": false}"#, "tie_word_embeddings"),
        (
            r#"{"scale_attn_by_inverse_layer_idx": true}"#,
            "scale_attn_by_inverse_layer_idx",
        ),
        (r#"{"attn_pdrop": 1.5}"#, "attn_pdrop"),
        (r#"{"n_layer": 0}"#, "n_layer"),
        ("{", "config.json"),
    ];
    for (text, needle) in bad {
        let e = Gpt2Config::from_json(text).unwrap_err().to_string();
        assert!(e.contains(needle), "{text}: {e}");
    }
    let round = Gpt2Config::from_json(&Gpt2Config::small().to_json()).unwrap();
    assert_eq!(round, Gpt2Config::small());
}

#[test]
fn greedy_generation_with_the_cache_is_transformers() {
    let (config, t, _) = fixture();
    let weights: std::collections::HashMap<String, Tensor> = t
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix("weights.")
                .map(|n| (n.to_string(), v.clone()))
        })
        .collect();
    let expected: Vec<i64> = t["generated"].to_vec1().unwrap();
    let prompt: Vec<u32> = expected[..3].iter().map(|&x| x as u32).collect();
    let model = Gpt2::new(config);
    let got = model
        .generate(&weights, &prompt, 8, Sampling::Greedy, &Device::Cpu)
        .unwrap();
    let expected: Vec<u32> = expected.iter().map(|&x| x as u32).collect();
    assert_eq!(got, expected);
    // Sampling is seeded: the same seed the same text, and within the vocabulary.
    let warm = Sampling::Temperature {
        temperature: 1.5,
        seed: 3,
    };
    let a = model
        .generate(&weights, &prompt, 8, warm, &Device::Cpu)
        .unwrap();
    let b = model
        .generate(&weights, &prompt, 8, warm, &Device::Cpu)
        .unwrap();
    assert_eq!(a, b);
    assert!(a.iter().all(|&x| x < 50));
    let e = model
        .generate(&weights, &prompt, 14, Sampling::Greedy, &Device::Cpu)
        .unwrap_err()
        .to_string();
    assert!(e.contains("n_positions = 16"), "{e}");
}
