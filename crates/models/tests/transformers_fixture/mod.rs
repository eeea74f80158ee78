//! What the language models' checks against Hugging Face's transformers share: reading a
//! fixture (`fixtures/<family>`, made by `scripts/make_<family>_fixture.py`), one AdamW
//! step of its model against transformers' in float64 and float32, and greedy and seeded
//! generation against transformers' `generate`.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use wick_graph::nodes::optim::{Optimizer, OptimizerConfig};
use wick_graph::{Executor, GraphBuilder, Mode};
use wick_models::nn::Layers;
use wick_models::{CausalLm, Sampling};
use wick_ops::AdamParams;

/// A fixture: its config.json text, its tensors and its metadata.
pub struct Fixture {
    pub config: String,
    pub tensors: HashMap<String, Tensor>,
    pub meta: HashMap<String, String>,
}

impl Fixture {
    /// `fixtures/<name>/tiny.*`.
    pub fn read(name: &str) -> Fixture {
        Fixture::read_stem(name, "tiny")
    }

    /// `fixtures/<name>/<stem>.*`.
    pub fn read_stem(name: &str, stem: &str) -> Fixture {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../fixtures")
            .join(name);
        let config = std::fs::read_to_string(dir.join(format!("{stem}.config.json"))).unwrap();
        let bytes = std::fs::read(dir.join(format!("{stem}.safetensors"))).unwrap();
        let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
        let meta = header.metadata().clone().unwrap_or_default();
        let tensors = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).unwrap();
        Fixture {
            config,
            tensors,
            meta,
        }
    }

    /// A metadata figure.
    pub fn figure(&self, key: &str) -> f64 {
        self.meta[key].parse().unwrap()
    }

    /// The weights by their Hugging Face names.
    pub fn weights(&self) -> HashMap<String, Tensor> {
        self.tensors
            .iter()
            .filter_map(|(k, v)| {
                k.strip_prefix("weights.")
                    .map(|n| (n.to_string(), v.clone()))
            })
            .collect()
    }
}

fn rel(a: &Tensor, b: &Tensor) -> f64 {
    wick_ops::max_rel_diff(&a.to_dtype(DType::F64).unwrap(), b).unwrap()
}

/// The worst relative errors of one AdamW step against transformers'.
#[derive(Debug, Clone, Copy)]
pub struct StepErrors {
    pub logits: f64,
    pub loss: f64,
    /// Each update (after − before) against transformers' update, the worst.
    pub update: f64,
    pub parameters: usize,
}

/// One AdamW step (lr 1e-2, weight decay 0.01) of `model` in `dtype` on the fixture's
/// tokens, every parameter loaded by its name from the fixture.
pub fn adamw_step<M: CausalLm>(model: &M, f: &Fixture, dtype: DType) -> StepErrors {
    let t = &f.tensors;
    let tokens = &t["tokens"];
    let mut b = GraphBuilder::new(Mode::Train, dtype);
    let input = b.input("tokens", tokens.dims(), DType::I64).unwrap();
    let mut nn = Layers::new(&mut b);
    let out = model.next_token_loss(&mut nn, input).unwrap();
    let specs = nn.into_specs();
    b.output(out.logits);
    b.output(out.loss);
    let grads = b.backward(out.loss).unwrap();
    let adamw = Optimizer::Adam(AdamParams::adamw(1e-2));
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
        let after = exec.get(&s.name).unwrap().unwrap();
        let ours = (after.to_dtype(DType::F64).unwrap() - before).unwrap();
        let theirs = (&t[&format!("after.{}", s.name)] - before).unwrap();
        update = update.max(rel(&ours, &theirs));
    }
    StepErrors {
        logits,
        loss,
        update,
        parameters: specs.len(),
    }
}

/// The step in float64 within `f64_bound` of transformers' float64 logits and loss (and
/// 1e-9 on the updates), and in float32 within 4x PyTorch's own float32 error.
pub fn check_adamw_step<M: CausalLm>(model: &M, f: &Fixture, f64_bound: f64) {
    let e = adamw_step(model, f, DType::F64);
    println!(
        "float64: logits {:.2e}, loss {:.2e}, updates of {} parameters {:.2e}",
        e.logits, e.loss, e.parameters, e.update
    );
    assert!(
        e.logits < f64_bound && e.loss < f64_bound && e.update < 1e-9,
        "float64: {e:?}"
    );
    let e = adamw_step(model, f, DType::F32);
    let (logits, update) = (
        f.figure("torch_f32_logits_err"),
        f.figure("torch_f32_update_err"),
    );
    println!(
        "float32: logits {:.2e} (PyTorch f32 {logits:.2e}), loss {:.2e}, updates {:.2e} (PyTorch f32 {update:.2e})",
        e.logits, e.loss, e.update
    );
    assert!(
        e.logits <= 4.0 * logits.max(1e-7),
        "float32 logits {:.2e}",
        e.logits
    );
    assert!(e.loss <= 1e-6, "float32 loss {:.2e}", e.loss);
    assert!(
        e.update <= 4.0 * update.max(1e-6),
        "float32 updates {:.2e}",
        e.update
    );
}

/// Greedy generation of 8 tokens after the fixture's 3-token prompt is transformers';
/// seeded sampling repeats itself and stays in the vocabulary; a request past the
/// positions is refused, naming the config field `too_long` expects.
pub fn check_generation<M: CausalLm>(model: &M, f: &Fixture, too_long: (usize, &str)) {
    let weights = f.weights();
    let expected: Vec<u32> = f.tensors["generated"]
        .to_vec1::<i64>()
        .unwrap()
        .iter()
        .map(|&x| x as u32)
        .collect();
    let prompt = &expected[..3];
    let cpu = Device::Cpu;
    let got = model
        .generate(&weights, prompt, 8, Sampling::Greedy, &cpu)
        .unwrap();
    assert_eq!(got, expected);
    let warm = Sampling::Temperature {
        temperature: 1.5,
        seed: 3,
    };
    let a = model.generate(&weights, prompt, 8, warm, &cpu).unwrap();
    let b = model.generate(&weights, prompt, 8, warm, &cpu).unwrap();
    assert_eq!(a, b);
    assert!(a.iter().all(|&x| (x as usize) < model.vocab_size()));
    let e = model
        .generate(&weights, prompt, too_long.0, Sampling::Greedy, &cpu)
        .unwrap_err()
        .to_string();
    assert!(e.contains(too_long.1), "{e}");
}
