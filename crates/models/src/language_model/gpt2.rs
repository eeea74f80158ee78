//! GPT-2 (Radford et al. 2019) as Hugging Face's `GPT2LMHeadModel` defines it, with its
//! parameter names (`transformer.h.0.attn.c_attn.weight`, ...), its `Conv1D` layout
//! (weights `[in, out]`, `y = x·W + b`), the language-model head tied to the token
//! embedding (`lm_head.weight` is `transformer.wte.weight`, absent from a checkpoint as in
//! Hugging Face's safetensors files), the tanh form of GELU (`gelu_new`), and its
//! initialisation. The size comes from a `config.json` of Hugging Face's format.
//!
//! # Examples
//!
//! ```
//! use candle_core::DType;
//! use wick_graph::{GraphBuilder, Mode};
//! use wick_models::gpt2::{Gpt2, Gpt2Config};
//! use wick_models::nn::Layers;
//! use wick_models::CausalLm;
//!
//! let config = Gpt2Config::from_json(r#"{"vocab_size": 256, "n_positions": 64, "n_embd": 32,
//!     "n_layer": 2, "n_head": 4}"#)?;
//! let mut b = GraphBuilder::new(Mode::Train, DType::F32);
//! let tokens = b.input("tokens", &[2, 17], DType::I64)?;
//! let mut nn = Layers::new(&mut b);
//! let out = Gpt2::new(config).next_token_loss(&mut nn, tokens)?;
//! assert_eq!(nn.builder().shape(out.logits), &[2, 16, 256]);
//! assert_eq!(nn.specs()[0].name, "transformer.wte.weight");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use wick_graph::ValueId;

use super::causal_lm::{self, CausalLm, KeyValue};
use super::config_json::{read_sizes, ConfigJson};
use crate::error::Result;
use crate::nn::{Init, Layers, TensorRole};

/// A GPT-2's size and dropout, Hugging Face's `GPT2Config` fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpt2Config {
    /// Tokens in the vocabulary (50257 for GPT-2's BPE; 256 for bytes).
    pub vocab_size: usize,
    /// The longest sequence (the position embedding's rows).
    pub n_positions: usize,
    /// The model width.
    pub n_embd: usize,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Attention heads (dividing `n_embd`).
    pub n_head: usize,
    /// The MLP's width (`n_inner`; Hugging Face's `null` is `4·n_embd`).
    pub n_inner: usize,
    /// The layer norms' epsilon.
    pub layer_norm_epsilon: f64,
    /// Dropout after the embeddings.
    pub embd_pdrop: f64,
    /// Dropout on the attention weights.
    pub attn_pdrop: f64,
    /// Dropout after each block's attention and MLP.
    pub resid_pdrop: f64,
}

impl Gpt2Config {
    /// GPT-2 small (124M): Hugging Face's `GPT2Config()` defaults.
    pub fn small() -> Self {
        Gpt2Config {
            vocab_size: 50257,
            n_positions: 1024,
            n_embd: 768,
            n_layer: 12,
            n_head: 12,
            n_inner: 4 * 768,
            layer_norm_epsilon: 1e-5,
            embd_pdrop: 0.1,
            attn_pdrop: 0.1,
            resid_pdrop: 0.1,
        }
    }

    /// The configuration in a `config.json` text: fields missing there take GPT-2
    /// small's values, as Hugging Face's `GPT2Config` does; an `activation_function` other
    /// than `gelu_new` is refused.
    pub fn from_json(text: &str) -> Result<Self> {
        let json = ConfigJson::parse("GPT-2", text)?;
        let mut c = Gpt2Config::small();
        read_sizes!(json, c; vocab_size, n_positions, n_embd, n_layer, n_head);
        c.n_inner = 4 * c.n_embd;
        json.size("n_inner", &mut c.n_inner)?;
        // Settings of GPT2LMHeadModel this implementation does not have: refused, not
        // silently ignored.
        json.require_flag("scale_attn_weights", true)?;
        json.require_flag("scale_attn_by_inverse_layer_idx", false)?;
        json.require_flag("tie_word_embeddings", true)?;
        json.require_flag("add_cross_attention", false)?;
        json.real("layer_norm_epsilon", &mut c.layer_norm_epsilon, false)?;
        json.real("embd_pdrop", &mut c.embd_pdrop, true)?;
        json.real("attn_pdrop", &mut c.attn_pdrop, true)?;
        json.real("resid_pdrop", &mut c.resid_pdrop, true)?;
        json.require_str("activation_function", "gelu_new")?;
        if !c.n_embd.is_multiple_of(c.n_head) {
            return Err(json.error(format!(
                "n_embd {} is not a multiple of n_head {}",
                c.n_embd, c.n_head
            )));
        }
        Ok(c)
    }

    /// The configuration in Hugging Face's format.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "model_type": "gpt2",
            "architectures": ["GPT2LMHeadModel"],
            "activation_function": "gelu_new",
            "vocab_size": self.vocab_size,
            "n_positions": self.n_positions,
            "n_embd": self.n_embd,
            "n_layer": self.n_layer,
            "n_head": self.n_head,
            "n_inner": self.n_inner,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "embd_pdrop": self.embd_pdrop,
            "attn_pdrop": self.attn_pdrop,
            "resid_pdrop": self.resid_pdrop,
        })
        .to_string()
    }

    /// The same model without dropout (deterministic steps, evaluation).
    pub fn without_dropout(self) -> Self {
        Gpt2Config {
            embd_pdrop: 0.0,
            attn_pdrop: 0.0,
            resid_pdrop: 0.0,
            ..self
        }
    }
}

/// A GPT-2 language model.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpt2 {
    /// Its size and dropout.
    pub config: Gpt2Config,
}

impl Gpt2 {
    /// A model of `config`.
    pub fn new(config: Gpt2Config) -> Self {
        Gpt2 { config }
    }
}

impl CausalLm for Gpt2 {
    fn family(&self) -> &'static str {
        "GPT-2"
    }

    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    fn max_positions(&self) -> (&'static str, usize) {
        ("n_positions", self.config.n_positions)
    }

    fn without_dropout(&self) -> Self {
        Gpt2::new(self.config.clone().without_dropout())
    }

    /// `GPT2LMHeadModel`'s forward ([`CausalLm::forward_cached`]), parameters created
    /// under Hugging Face's names.
    fn forward_cached(
        &self,
        nn: &mut Layers,
        tokens: ValueId,
        past: Option<&[KeyValue]>,
    ) -> wick_graph::Result<(ValueId, Vec<KeyValue>)> {
        let c = &self.config;
        let [n, t, offset] = causal_lm::positions(self, nn, tokens, past, c.n_layer)?;
        let std = Init::Normal(0.02);
        let (h, wte, presents) = nn.scope("transformer", |nn| {
            // The token and position tables, `[rows, n_embd]` each.
            let mut table = |name: &str, rows: usize| {
                nn.param(name, &[rows, c.n_embd], TensorRole::FcWeight, std, c.n_embd)
            };
            let wte = table("wte.weight", c.vocab_size)?;
            let wpe = table("wpe.weight", c.n_positions)?;
            let b = nn.builder();
            let tok = b.embedding(tokens, wte, None)?;
            let pos = b.narrow(wpe, 0, offset, t)?;
            let mut h = b.broadcast_add(tok, pos)?;
            h = nn.scope("drop", |nn| nn.builder().dropout(h, c.embd_pdrop))?;
            let mut presents = Vec::with_capacity(c.n_layer);
            for i in 0..c.n_layer {
                let cached = past.map(|p| p[i]);
                let (y, kv) =
                    nn.scope(&format!("h.{i}"), |nn| self.block(nn, h, [n, t], cached))?;
                h = y;
                presents.push(kv);
            }
            Ok((
                nn.layer_norm("ln_f", h, c.n_embd, c.layer_norm_epsilon)?,
                wte,
                presents,
            ))
        })?;
        // The head is the token embedding, transposed in place by the linear node.
        let logits = nn.scope("lm_head", |nn| {
            let b = nn.builder();
            let rows = b.reshape(h, &[n * t, c.n_embd])?;
            let logits = b.linear(rows, wte, None)?;
            b.reshape(logits, &[n, t, c.vocab_size])
        })?;
        Ok((logits, presents))
    }
}

impl Gpt2 {
    /// One `GPT2Block`: `x + attn(ln_1(x))`, then `+ mlp(ln_2(·))`; with the layer's
    /// cached keys and values in front of its own. Returns the block's output and its
    /// keys and values.
    fn block(
        &self,
        nn: &mut Layers,
        x: ValueId,
        [n, t]: [usize; 2],
        cached: Option<KeyValue>,
    ) -> wick_graph::Result<(ValueId, KeyValue)> {
        let c = &self.config;
        let (e, heads) = (c.n_embd, c.n_head);
        let eps = c.layer_norm_epsilon;
        let y = nn.layer_norm("ln_1", x, e, eps)?;
        let (y, kv) = nn.scope("attn", |nn| {
            let qkv = self.conv1d(nn, "c_attn", y, e, 3 * e, false)?;
            let b = nn.builder();
            let parts = b.chunk(qkv, 3, -1)?;
            let mut split = |v| -> wick_graph::Result<ValueId> {
                let v = b.reshape(v, &[n, t, heads, e / heads])?;
                b.permute(v, &[0, 2, 1, 3])
            };
            let (q, mut k, mut v) = (split(parts[0])?, split(parts[1])?, split(parts[2])?);
            if let Some((past_k, past_v)) = cached {
                k = b.concat(&[past_k, k], 2)?;
                v = b.concat(&[past_v, v], 2)?;
            }
            // A cached step's one query sees every key; the first step is causal.
            let causal = cached.is_none();
            let y = b.scaled_dot_product_attention(q, k, v, None, c.attn_pdrop, causal, None)?;
            let y = b.permute(y, &[0, 2, 1, 3])?;
            let y = b.reshape(y, &[n, t, e])?;
            let y = self.conv1d(nn, "c_proj", y, e, e, true)?;
            let y = nn.scope("resid_dropout", |nn| nn.builder().dropout(y, c.resid_pdrop))?;
            Ok((y, (k, v)))
        })?;
        let x = nn.builder().add(x, y)?;
        let y = nn.layer_norm("ln_2", x, e, eps)?;
        let y = nn.scope("mlp", |nn| {
            let y = self.conv1d(nn, "c_fc", y, e, c.n_inner, false)?;
            let y = nn.scope("act", |nn| nn.builder().gelu_tanh(y))?;
            let y = self.conv1d(nn, "c_proj", y, c.n_inner, e, true)?;
            nn.scope("dropout", |nn| nn.builder().dropout(y, c.resid_pdrop))
        })?;
        Ok((nn.builder().add(x, y)?, kv))
    }

    /// Hugging Face's `Conv1D(out, in)` as layer `path`: weight `[in, out]`, `y = x·W + b`
    /// over the last dimension, one GEMM over the flattened rows. Its weight is
    /// `N(0, 0.02²)`; a residual projection's (`c_proj`) `N(0, (0.02/√(2·n_layer))²)`.
    fn conv1d(
        &self,
        nn: &mut Layers,
        path: &str,
        x: ValueId,
        cin: usize,
        cout: usize,
        residual: bool,
    ) -> wick_graph::Result<ValueId> {
        let std = if residual {
            0.02 / (2.0 * self.config.n_layer as f64).sqrt()
        } else {
            0.02
        };
        nn.scope(path, |nn| {
            let w = nn.param(
                "weight",
                &[cin, cout],
                TensorRole::FcWeight,
                Init::Normal(std),
                cin,
            )?;
            let bias = nn.param(
                "bias",
                &[cout],
                TensorRole::FcBias,
                Init::Constant(0.0),
                cin,
            )?;
            let b = nn.builder();
            let y = b.matmul(x, w)?;
            b.broadcast_add(y, bias)
        })
    }
}
