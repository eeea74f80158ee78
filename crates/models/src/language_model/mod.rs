//! What every causal language model shares, whatever its architecture ([`Gpt2`],
//! [`Llama`]): the [`CausalLm`] trait, whose one required method records the forward pass
//! with a key/value cache, and which gives the next-token loss and text generation on top
//! of it. [`LanguageModel`] picks the architecture a Hugging Face `config.json` names.
//!
//! [`Gpt2`]: crate::gpt2::Gpt2
//! [`Llama`]: crate::llama::Llama

pub(crate) mod config_json;
mod generate;

pub use generate::Sampling;

use std::collections::HashMap;

use candle_core::{Device, Tensor};
use wick_graph::{GraphError, ValueId};

use crate::error::{ModelError, Result};
use crate::gpt2::{Gpt2, Gpt2Config};
use crate::llama::{Llama, LlamaConfig};
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
        generate::generate(self, weights, prompt, n, sampling, device)
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

/// A language model of any architecture wick has, as a `config.json` names it.
#[derive(Debug, Clone, PartialEq)]
pub enum LanguageModel {
    /// `"model_type": "gpt2"` (the default when the field is absent).
    Gpt2(Gpt2),
    /// `"model_type": "llama"`.
    Llama(Llama),
}

/// `$body` with `$m` bound to the model inside, whichever architecture it is.
macro_rules! each {
    ($self:expr, $m:ident => $body:expr) => {
        match $self {
            LanguageModel::Gpt2($m) => $body,
            LanguageModel::Llama($m) => $body,
        }
    };
}

impl LanguageModel {
    /// The model a Hugging Face `config.json` describes, by its `model_type`; an error
    /// naming any other type.
    pub fn from_json(text: &str) -> Result<Self> {
        let v: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| ModelError::Config(format!("config.json: {e}")))?;
        match v.get("model_type").and_then(|t| t.as_str()) {
            None | Some("gpt2") => Ok(LanguageModel::Gpt2(Gpt2::new(Gpt2Config::from_json(text)?))),
            Some("llama") => Ok(LanguageModel::Llama(Llama::new(LlamaConfig::from_json(
                text,
            )?))),
            Some(other) => Err(ModelError::Config(format!(
                "config.json: model_type `{other}` is not one wick has (gpt2, llama)"
            ))),
        }
    }

    /// Its configuration as a Hugging Face `config.json`.
    pub fn to_json(&self) -> String {
        each!(self, m => m.config.to_json())
    }

    /// Its size in words: `GPT-2 (4 layers, 128 wide, 4 heads, vocabulary 256)`.
    pub fn describe(&self) -> String {
        let (layers, width, heads) = match self {
            LanguageModel::Gpt2(m) => (m.config.n_layer, m.config.n_embd, m.config.n_head),
            LanguageModel::Llama(m) => (
                m.config.num_hidden_layers,
                m.config.hidden_size,
                m.config.num_attention_heads,
            ),
        };
        format!(
            "{} ({layers} layers, {width} wide, {heads} heads, vocabulary {})",
            self.family(),
            self.vocab_size()
        )
    }
}

impl CausalLm for LanguageModel {
    fn family(&self) -> &'static str {
        each!(self, m => m.family())
    }

    fn vocab_size(&self) -> usize {
        each!(self, m => m.vocab_size())
    }

    fn max_positions(&self) -> (&'static str, usize) {
        each!(self, m => m.max_positions())
    }

    fn without_dropout(&self) -> Self {
        match self {
            LanguageModel::Gpt2(m) => LanguageModel::Gpt2(m.without_dropout()),
            LanguageModel::Llama(m) => LanguageModel::Llama(m.without_dropout()),
        }
    }

    fn forward_cached(
        &self,
        nn: &mut Layers,
        tokens: ValueId,
        past: Option<&[KeyValue]>,
    ) -> wick_graph::Result<(ValueId, Vec<KeyValue>)> {
        each!(self, m => m.forward_cached(nn, tokens, past))
    }
}
