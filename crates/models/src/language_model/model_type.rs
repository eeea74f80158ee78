//! [`LanguageModel`]: the architecture a Hugging Face `config.json` names by its
//! `model_type`, as one value that is a [`CausalLm`].

use wick_graph::ValueId;

use super::causal_lm::{CausalLm, KeyValue};
use super::gpt2::{Gpt2, Gpt2Config};
use super::llama::{Llama, LlamaConfig};
use crate::error::{ModelError, Result};
use crate::nn::Layers;

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
