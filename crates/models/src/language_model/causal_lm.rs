//! What every causal language model does, whatever its architecture: the [`CausalLm`]
//! trait, whose one required method records the forward pass with a key/value cache, and
//! which gives the next-token loss and text generation on top of it.
//!
//! Generation runs the prompt once as one causal batch, then each new token as one step
//! of a graph that reads the keys and values the steps before it left (each layer's
//! `[1, key/value heads, P, head_dim]`), so a token costs O(P), not O(P²).

use std::collections::HashMap;

use candle_core::{DType, Device, IndexOp, Tensor};
use rand::{Rng, SeedableRng};
use wick_graph::{Executor, GraphBuilder, GraphError, Mode, ValueId};

use crate::error::{ModelError, Result};
use crate::nn::Layers;

/// One layer's keys and values `[N, key/value heads, positions, head_dim]`.
pub type KeyValue = (ValueId, ValueId);

/// The logits and the next-token loss of one batch.
#[derive(Debug, Clone, Copy)]
pub struct LanguageModelOutput {
    /// `[N, T, vocab]`.
    pub logits: ValueId,
    /// The mean cross-entropy of each position's logits against the next token.
    pub loss: ValueId,
}

/// A decoder-only language model recorded on [`Layers`] under its Hugging Face
/// parameter names.
pub trait CausalLm: Sized {
    /// The architecture's name in messages (`GPT-2`).
    fn family(&self) -> &'static str;

    /// Tokens in the vocabulary.
    fn vocab_size(&self) -> usize;

    /// The longest sequence, with the name of its `config.json` field
    /// (`n_positions`, `max_position_embeddings`).
    fn max_positions(&self) -> (&'static str, usize);

    /// The same model without dropout (deterministic steps, evaluation, generation).
    fn without_dropout(&self) -> Self;

    /// The logits `[N, T, vocab]` of tokens `[N, T]` (`i64`), with a key/value cache:
    /// `past` holds each layer's keys and values of the `P` tokens before these (then
    /// `tokens` is one token per sequence, at position `P`); without it the tokens start
    /// at position 0 under the causal rule. Also returns each layer's keys and values of
    /// all `P + T` positions, the next step's `past`.
    fn forward_cached(
        &self,
        nn: &mut Layers,
        tokens: ValueId,
        past: Option<&[KeyValue]>,
    ) -> wick_graph::Result<(ValueId, Vec<KeyValue>)>;

    /// The logits `[N, T, vocab]` of tokens `[N, T]` (`i64`) from position 0.
    fn forward(&self, nn: &mut Layers, tokens: ValueId) -> wick_graph::Result<ValueId> {
        Ok(self.forward_cached(nn, tokens, None)?.0)
    }

    /// The logits of `tokens[:, :-1]` and their mean cross-entropy against
    /// `tokens[:, 1:]`, for a batch `[N, T + 1]` of sequences.
    fn next_token_loss(
        &self,
        nn: &mut Layers,
        tokens: ValueId,
    ) -> wick_graph::Result<LanguageModelOutput> {
        let shape = nn.builder().shape(tokens).to_vec();
        let family = self.family();
        let [n, t1] = shape[..] else {
            return Err(GraphError::Usage(format!(
                "{family} takes tokens [N, T + 1], got {shape:?}"
            )));
        };
        if t1 < 2 {
            return Err(GraphError::Usage(format!(
                "{family}'s next-token loss needs at least 2 tokens per sequence, got {t1}"
            )));
        }
        let b = nn.builder();
        let inputs = b.narrow(tokens, 1, 0, t1 - 1)?;
        let targets = b.narrow(tokens, 1, 1, t1 - 1)?;
        let logits = self.forward(nn, inputs)?;
        let loss = nn.scope("loss", |nn| {
            let b = nn.builder();
            let rows = b.reshape(logits, &[n * (t1 - 1), self.vocab_size()])?;
            let targets = b.reshape(targets, &[n * (t1 - 1)])?;
            b.cross_entropy(rows, targets)
        })?;
        Ok(LanguageModelOutput { logits, loss })
    }

    /// `prompt` followed by `n` generated tokens, from `weights` (by Hugging Face's
    /// names, any float dtype; run in f32 on `device`), with a key/value cache: the
    /// prompt runs once, then each token is one step that reads the keys and values
    /// before it. The prompt and the new tokens must fit in the model's positions.
    fn generate(
        &self,
        weights: &HashMap<String, Tensor>,
        prompt: &[u32],
        n: usize,
        sampling: Sampling,
        device: &Device,
    ) -> Result<Vec<u32>> {
        check_request(self, prompt, n, sampling)?;
        let model = self.without_dropout();
        let seed = match sampling {
            Sampling::Temperature { seed, .. } => seed,
            Sampling::Greedy => 0,
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut out = prompt.to_vec();
        let mut step_input = prompt.to_vec();
        let mut cache: Option<Vec<CachedLayer>> = None;
        for _ in 0..n {
            let (logits, presents) =
                decode_step(&model, weights, &step_input, cache.as_deref(), device)?;
            let token = choose(&logits, sampling, &mut rng);
            out.push(token);
            step_input = vec![token];
            cache = Some(presents);
        }
        Ok(out)
    }
}

/// `[N, T, P]` for tokens `[N, T]` after `past`'s `P` positions: an error unless the
/// tokens are `[N, T]`, a cache comes with one token per sequence and `layers` layers'
/// keys and values, and positions `P..P + T` are within the model's.
pub(crate) fn positions<M: CausalLm>(
    model: &M,
    nn: &mut Layers,
    tokens: ValueId,
    past: Option<&[KeyValue]>,
    layers: usize,
) -> wick_graph::Result<[usize; 3]> {
    let family = model.family();
    let shape = nn.builder().shape(tokens).to_vec();
    let [n, t] = shape[..] else {
        return Err(GraphError::Usage(format!(
            "{family} takes tokens [N, T], got {shape:?}"
        )));
    };
    let offset = match past {
        None => 0,
        Some(p) if p.len() == layers && t == 1 => nn.builder().shape(p[0].0)[2],
        Some(p) => {
            return Err(GraphError::Usage(format!(
                "{family} with a cache takes one token per sequence and {layers} layers' keys and values, got {t} tokens and {} layers",
                p.len()
            )))
        }
    };
    let (field, max) = model.max_positions();
    if t == 0 || offset + t > max {
        return Err(GraphError::Usage(format!(
            "{family}: positions {offset}..{} are past {field} = {max}",
            offset + t
        )));
    }
    Ok([n, t, offset])
}

/// One layer's cached keys and values `[1, key/value heads, positions, head_dim]`.
type CachedLayer = (Tensor, Tensor);

/// How the next token is chosen from the logits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// The most likely token.
    Greedy,
    /// A draw from `softmax(logits / temperature)`, seeded.
    Temperature {
        /// Above 0: below 1 sharpens the distribution, above 1 flattens it.
        temperature: f64,
        /// The draws' seed.
        seed: u64,
    },
}

/// The token `sampling` chooses from one row of logits.
fn choose(logits: &[f32], sampling: Sampling, rng: &mut rand::rngs::StdRng) -> u32 {
    let argmax = || {
        let mut best = 0;
        for (i, &x) in logits.iter().enumerate() {
            if x > logits[best] {
                best = i;
            }
        }
        best as u32
    };
    match sampling {
        Sampling::Greedy => argmax(),
        Sampling::Temperature { temperature, .. } => {
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let weights: Vec<f64> = logits
                .iter()
                .map(|&x| ((x as f64 - max) / temperature).exp())
                .collect();
            let total: f64 = weights.iter().sum();
            let mut u = rng.random::<f64>() * total;
            for (i, w) in weights.iter().enumerate() {
                u -= w;
                if u <= 0.0 {
                    return i as u32;
                }
            }
            argmax()
        }
    }
}

/// An error unless the prompt is in the vocabulary, it and `n` more tokens fit in the
/// model's positions, and the temperature is positive.
fn check_request<M: CausalLm>(
    model: &M,
    prompt: &[u32],
    n: usize,
    sampling: Sampling,
) -> Result<()> {
    let (positions_field, positions) = model.max_positions();
    if prompt.is_empty() || prompt.len() + n > positions {
        return Err(ModelError::Config(format!(
            "generate: a prompt of {} tokens and {n} new ones must fit in {positions_field} = {positions} (and the prompt must not be empty)",
            prompt.len(),
        )));
    }
    let vocab = model.vocab_size();
    if let Some(t) = prompt.iter().find(|&&t| t as usize >= vocab) {
        return Err(ModelError::Config(format!(
            "generate: prompt token {t} is past the vocabulary of {vocab}"
        )));
    }
    if let Sampling::Temperature { temperature, .. } = sampling {
        if !(temperature.is_finite() && temperature > 0.0) {
            return Err(ModelError::Config(format!(
                "generate: the temperature must be above 0, got {temperature}"
            )));
        }
    }
    Ok(())
}

/// One step: the logits of the last of `tokens` (after the cached positions), and
/// every layer's keys and values up to it.
fn decode_step<M: CausalLm>(
    model: &M,
    weights: &HashMap<String, Tensor>,
    tokens: &[u32],
    cache: Option<&[CachedLayer]>,
    device: &Device,
) -> Result<(Vec<f32>, Vec<CachedLayer>)> {
    let past_name = |i: usize, part: &str| format!("past.{i}.{part}");
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let len = tokens.len();
    let input = b.input("tokens", &[1, len], DType::I64)?;
    let past = match cache {
        None => None,
        Some(layers) => {
            let mut ids = Vec::with_capacity(layers.len());
            for (i, (k, v)) in layers.iter().enumerate() {
                let k = b.input(&past_name(i, "key"), k.dims(), DType::F32)?;
                let v = b.input(&past_name(i, "value"), v.dims(), DType::F32)?;
                ids.push((k, v));
            }
            Some(ids)
        }
    };
    let mut nn = Layers::new(&mut b);
    let (logits, presents) = model.forward_cached(&mut nn, input, past.as_deref())?;
    let specs = nn.into_specs();
    b.output(logits);
    for (k, v) in &presents {
        b.output(*k);
        b.output(*v);
    }
    let mut exec = Executor::new(b.finish(), device);
    for s in &specs {
        let w = weights.get(&s.name).ok_or_else(|| {
            ModelError::State(format!("generate: the weights have no `{}`", s.name))
        })?;
        // Nothing in this graph updates a weight: no per-token copy of the model.
        exec.set_shared(&s.name, &w.to_dtype(DType::F32)?.to_device(device)?)?;
    }
    let ids: Vec<i64> = tokens.iter().map(|&t| t as i64).collect();
    exec.set("tokens", &Tensor::from_vec(ids, (1, len), device)?)?;
    for (i, (k, v)) in cache.unwrap_or_default().iter().enumerate() {
        exec.set(&past_name(i, "key"), k)?;
        exec.set(&past_name(i, "value"), v)?;
    }
    exec.run()?;
    let kept = |v| {
        exec.get_id(v)?
            .cloned()
            .ok_or_else(|| ModelError::State("generate: an output was not kept".into()))
    };
    let row = kept(logits)?
        .i((0, len - 1))?
        .to_dtype(DType::F32)?
        .to_vec1()?;
    let presents = presents
        .iter()
        .map(|&(k, v)| Ok((kept(k)?, kept(v)?)))
        .collect::<Result<_>>()?;
    Ok((row, presents))
}
