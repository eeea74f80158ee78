//! The probe programs, redone with builder calls and the module layer only (no custom
//! op): a char-level GPT with a causal mask, a LLaMA-style decoder, a tiny ViT, an LSTM classifier unrolled over
//! time with shared weights, and a VAE. Each trains on a fixed batch with Adam until its
//! loss has fallen, under the profiler, whose table names the tensor ops it ran. (The GAN
//! with two optimizers is `crates/models/tests/modules.rs`; fine-tuning with a frozen
//! backbone is `examples/finetune.rs` and that file's frozen-ResNet test.)

mod gpt;
mod llama;
mod lstm;
mod vae;
mod vit;

use candle_core::{DType, Device, Tensor};
use wick::graph::nodes::optim::Optimizer;
use wick::graph::{Executor, GraphBuilder, Mode, ValueId};
use wick::models::nn::{self, Init, Layers, TensorSpec};
use wick::ops::tensor::nll::NllLoss;
use wick::ops::AdamParams;
use wick::profiler::{Profile, RecordLevel, Schedule, TimeProfiler};

/// A model's training step: the loss and the state spec its layers recorded.
pub struct Recorded {
    pub loss: ValueId,
    pub specs: Vec<TensorSpec>,
}

/// One probe's training run and what it must show: Adam at `lr` for `steps` steps, the
/// loss fallen to `loss_ratio` of its first value, and the profile timing each of `ops`.
pub struct Probe {
    pub name: &'static str,
    pub lr: f64,
    pub steps: usize,
    pub loss_ratio: f32,
    pub ops: &'static [&'static str],
}

impl Probe {
    /// Trains `record`'s model on the inputs `feed` gives, profiled, and asserts what the
    /// probe must show.
    pub fn check(
        &self,
        record: impl FnOnce(&mut GraphBuilder) -> wick::graph::Result<Recorded>,
        feed: &[(&str, Tensor)],
    ) {
        let (losses, profile) = train(record, feed, self.lr, self.steps);
        let (first, last) = (losses[0], losses[losses.len() - 1]);
        let what = self.name;
        eprintln!("{what}: loss {first} -> {last}");
        assert!(
            last.is_finite() && last < self.loss_ratio * first,
            "{what}: loss {first} -> {last}"
        );
        for op in self.ops {
            assert!(
                profile.ops.iter().any(|o| o.name == *op),
                "{what}: the profile has no {op}"
            );
        }
    }
}

/// Trains `record`'s model with Adam (lr `lr`) for `steps` steps on the inputs `feed`
/// gives, profiled; returns the losses and the profile.
fn train(
    record: impl FnOnce(&mut GraphBuilder) -> wick::graph::Result<Recorded>,
    feed: &[(&str, Tensor)],
    lr: f64,
    steps: usize,
) -> (Vec<f32>, Profile) {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let Recorded { loss, specs } = record(&mut b).unwrap();
    b.output(loss);
    let grads = b.backward(loss).unwrap();
    b.optimize(&grads, &Optimizer::Adam(AdamParams::adam(lr)).into())
        .unwrap();
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    for (name, t) in nn::initial_state(&specs, 0).unwrap() {
        exec.set(&name, &t).unwrap();
    }
    for (name, t) in feed {
        exec.set(name, t).unwrap();
    }
    exec.add_hook(TimeProfiler::with_schedule(
        Schedule::skip(1),
        RecordLevel::PerOp,
    ))
    .unwrap();
    let mut losses = Vec::new();
    for step in 0..steps {
        exec.set("step", &Tensor::new(step as i64, &Device::Cpu).unwrap())
            .unwrap();
        exec.run().unwrap();
        losses.push(exec.value(loss).unwrap().to_scalar::<f32>().unwrap());
    }
    let profile = exec.hook::<TimeProfiler>().unwrap().profile();
    (losses, profile)
}

/// A text's characters as tokens: the vocabulary's size, and `n` windows of `t` tokens
/// (window `i` from character `7·i`) with the next token after each position, `[n, t]`
/// each.
pub fn char_windows(text: &str, n: usize, t: usize) -> (usize, Tensor, Tensor) {
    let mut vocab: Vec<char> = text.chars().collect();
    vocab.sort_unstable();
    vocab.dedup();
    let ids: Vec<i64> = text
        .chars()
        .map(|c| vocab.iter().position(|v| *v == c).unwrap() as i64)
        .collect();
    let windows = |start: usize| -> Tensor {
        let v: Vec<i64> = (0..n)
            .flat_map(|i| ids[i * 7 + start..i * 7 + start + t].to_vec())
            .collect();
        Tensor::from_vec(v, (n, t), &Device::Cpu).unwrap()
    };
    (vocab.len(), windows(0), windows(1))
}

/// A char-level language model's end: `lm_head` over `x` `[N, T, dim]`, then each
/// position's cross-entropy against `targets` `[N, T]`.
pub fn language_model_loss(
    mut nn: Layers,
    x: ValueId,
    (dim, vocab): (usize, usize),
    targets: ValueId,
) -> wick::graph::Result<Recorded> {
    let logits = dense(&mut nn, "lm_head", x, dim, vocab)?;
    let b = nn.builder();
    let logits = b.permute(logits, &[0, 2, 1])?; // [N, vocab, T]
    let loss = b.cross_entropy_with(logits, targets, NllLoss::default())?;
    Ok(Recorded {
        loss,
        specs: nn.into_specs(),
    })
}

/// `x @ wᵀ + b` over the last dimension of a `[.., cin]` value, as layer `path`
/// (`nn.Linear` on a sequence: flattened rows through one linear).
pub fn dense(
    nn: &mut Layers,
    path: &str,
    x: ValueId,
    cin: usize,
    cout: usize,
) -> wick::graph::Result<ValueId> {
    let shape = nn.builder().shape(x).to_vec();
    let rows: usize = shape[..shape.len() - 1].iter().product();
    let flat = nn.builder().reshape(x, &[rows, cin])?;
    let y = nn.linear(path, flat, cin, cout, Init::LinearDefault)?;
    let mut out = shape;
    *out.last_mut().unwrap() = cout;
    nn.builder().reshape(y, &out)
}

/// A pre-norm transformer block: `x + attn(ln(x))`, then `x + mlp(ln(x))` (GELU).
pub fn block(
    nn: &mut Layers,
    path: &str,
    x: ValueId,
    dim: usize,
    heads: usize,
    mask: Option<ValueId>,
) -> wick::graph::Result<ValueId> {
    nn.scope(path, |nn| {
        let h = nn.layer_norm("ln_1", x, dim, 1e-5)?;
        let h = nn.multi_head_attention("attn", h, dim, heads, mask)?;
        let x = nn.builder().broadcast_add(x, h)?;
        let h = nn.layer_norm("ln_2", x, dim, 1e-5)?;
        let h = dense(nn, "mlp.0", h, dim, 4 * dim)?;
        let h = nn.builder().gelu(h)?;
        let h = dense(nn, "mlp.2", h, 4 * dim, dim)?;
        nn.builder().broadcast_add(x, h)
    })
}
