//! LLaMA (Touvron et al. 2023) as Hugging Face's `LlamaForCausalLM` defines it, with its
//! parameter names (`model.layers.0.self_attn.q_proj.weight`, ...): RMS norms before
//! attention and before the MLP, rotary position embeddings on the queries and keys,
//! grouped-query attention (`num_key_value_heads` key/value heads shared by the query
//! heads), the SwiGLU MLP `down(silu(gate(x)) · up(x))`, and a language-model head that
//! is its own weight or, with `tie_word_embeddings`, the token embedding. The size comes
//! from a `config.json` of Hugging Face's format; Llama 2 and TinyLlama checkpoints are
//! of this architecture.
//!
//! The rotary cos and sin tables (the default rotary embedding or Llama 3.1's scaled one:
//! [`rotary`](super::rotary)) are computed in float32 (in float64 for a float64 graph), as
//! transformers computes them, and enter the graph as constants.
//!
//! # Examples
//!
//! ```
//! use candle_core::DType;
//! use wick_graph::{GraphBuilder, Mode};
//! use wick_models::llama::{Llama, LlamaConfig};
//! use wick_models::nn::Layers;
//! use wick_models::CausalLm;
//!
//! let config = LlamaConfig::from_json(r#"{"vocab_size": 256, "hidden_size": 32,
//!     "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
//!     "num_key_value_heads": 2, "max_position_embeddings": 64}"#)?;
//! let mut b = GraphBuilder::new(Mode::Train, DType::F32);
//! let tokens = b.input("tokens", &[2, 17], DType::I64)?;
//! let mut nn = Layers::new(&mut b);
//! let out = Llama::new(config).next_token_loss(&mut nn, tokens)?;
//! assert_eq!(nn.builder().shape(out.logits), &[2, 16, 256]);
//! assert_eq!(nn.specs()[0].name, "model.embed_tokens.weight");
//! assert_eq!(nn.specs()[3].name, "model.layers.0.self_attn.k_proj.weight");
//! assert_eq!(nn.specs()[3].shape, [16, 32]); // 2 key/value heads of 8
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use wick_graph::ValueId;

use super::causal_lm::{self, CausalLm, KeyValue};
use super::config_json::{read_sizes, ConfigJson};
use super::rotary::{apply_rotary, RopeScaling, Rotary};
use crate::error::Result;
use crate::nn::{Init, Layers, TensorRole};

/// A LLaMA's size, Hugging Face's `LlamaConfig` fields.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// Tokens in the vocabulary.
    pub vocab_size: usize,
    /// The model width.
    pub hidden_size: usize,
    /// The MLP's width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (dividing `num_attention_heads`; Hugging Face's `null` is
    /// `num_attention_heads`, plain multi-head attention).
    pub num_key_value_heads: usize,
    /// Each head's width (Hugging Face's `null` is `hidden_size / num_attention_heads`).
    pub head_dim: usize,
    /// The longest sequence.
    pub max_position_embeddings: usize,
    /// The RMS norms' epsilon.
    pub rms_norm_eps: f64,
    /// The rotary embedding's base (`rope_theta`, or `rope_parameters.rope_theta`).
    pub rope_theta: f64,
    /// The rotary embedding's scaling (`rope_parameters`, or `rope_scaling` in files of
    /// transformers before 5).
    pub rope_scaling: RopeScaling,
    /// Whether the head is the token embedding.
    pub tie_word_embeddings: bool,
    /// Whether the attention's projections have biases.
    pub attention_bias: bool,
    /// Whether the MLP's projections have biases.
    pub mlp_bias: bool,
    /// Dropout on the attention weights.
    pub attention_dropout: f64,
    /// The standard deviation of the weights' normal initialisation.
    pub initializer_range: f64,
}

impl LlamaConfig {
    /// LLaMA 7B: Hugging Face's `LlamaConfig()` defaults.
    pub fn llama_7b() -> Self {
        LlamaConfig {
            vocab_size: 32000,
            hidden_size: 4096,
            intermediate_size: 11008,
            num_hidden_layers: 32,
            num_attention_heads: 32,
            num_key_value_heads: 32,
            head_dim: 128,
            max_position_embeddings: 2048,
            rms_norm_eps: 1e-6,
            rope_theta: 10000.0,
            rope_scaling: RopeScaling::Default,
            tie_word_embeddings: false,
            attention_bias: false,
            mlp_bias: false,
            attention_dropout: 0.0,
            initializer_range: 0.02,
        }
    }

    /// The configuration in a `config.json` text: fields missing there take
    /// [`llama_7b`](LlamaConfig::llama_7b)'s values, as Hugging Face's `LlamaConfig`
    /// does. An activation other than SiLU, and a rotary scaling other than the default
    /// and Llama 3.1's, are refused.
    pub fn from_json(text: &str) -> Result<Self> {
        let json = ConfigJson::parse("LLaMA", text)?;
        let mut c = LlamaConfig::llama_7b();
        read_sizes!(json, c; vocab_size, hidden_size, intermediate_size);
        read_sizes!(json, c; num_hidden_layers, num_attention_heads);
        c.num_key_value_heads = c.num_attention_heads;
        json.size("num_key_value_heads", &mut c.num_key_value_heads)?;
        c.head_dim = c.hidden_size / c.num_attention_heads;
        json.size("head_dim", &mut c.head_dim)?;
        json.size("max_position_embeddings", &mut c.max_position_embeddings)?;
        json.real("rms_norm_eps", &mut c.rms_norm_eps, false)?;
        json.real("rope_theta", &mut c.rope_theta, false)?;
        for key in ["rope_scaling", "rope_parameters"] {
            if let Some(rope) = json.object(key) {
                c.rope_scaling = RopeScaling::from_json(&rope, &mut c.rope_theta)?;
            }
        }
        json.flag("tie_word_embeddings", &mut c.tie_word_embeddings)?;
        json.flag("attention_bias", &mut c.attention_bias)?;
        json.flag("mlp_bias", &mut c.mlp_bias)?;
        json.real("attention_dropout", &mut c.attention_dropout, true)?;
        json.real("initializer_range", &mut c.initializer_range, false)?;
        json.require_str("hidden_act", "silu")?;
        c.check().map_err(|e| json.error(e))?;
        Ok(c)
    }

    /// What makes the configuration unusable, if anything: a zero size, query heads
    /// that the key/value heads do not divide, or an odd `head_dim`.
    pub fn check(&self) -> std::result::Result<(), String> {
        let sizes = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
            ("max_position_embeddings", self.max_position_embeddings),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, n)| *n == 0) {
            return Err(format!("`{name}` must be a positive integer, got 0"));
        }
        if !self
            .num_attention_heads
            .is_multiple_of(self.num_key_value_heads)
        {
            return Err(format!(
                "num_attention_heads {} is not a multiple of num_key_value_heads {}",
                self.num_attention_heads, self.num_key_value_heads
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(format!(
                "head_dim {} is odd: the rotary embedding rotates pairs",
                self.head_dim
            ));
        }
        Ok(())
    }

    /// The configuration in Hugging Face's format (the rotary base both as transformers
    /// 5 writes it, in `rope_parameters`, and as earlier versions read it).
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "model_type": "llama",
            "architectures": ["LlamaForCausalLM"],
            "hidden_act": "silu",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_parameters": self.rope_scaling.to_json(self.rope_theta),
            "rope_scaling": match self.rope_scaling {
                RopeScaling::Default => serde_json::Value::Null,
                scaling => scaling.to_json(self.rope_theta),
            },
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": self.attention_bias,
            "mlp_bias": self.mlp_bias,
            "attention_dropout": self.attention_dropout,
            "initializer_range": self.initializer_range,
        })
        .to_string()
    }

    /// The rotary embedding: `rope_theta`, its scaling and `head_dim`.
    pub fn rotary(&self) -> Rotary {
        Rotary {
            theta: self.rope_theta,
            scaling: self.rope_scaling,
            head_dim: self.head_dim,
        }
    }
}

/// A LLaMA language model.
#[derive(Debug, Clone, PartialEq)]
pub struct Llama {
    /// Its size.
    pub config: LlamaConfig,
}

impl Llama {
    /// A model of `config`.
    pub fn new(config: LlamaConfig) -> Self {
        Llama { config }
    }
}

impl CausalLm for Llama {
    fn family(&self) -> &'static str {
        "LLaMA"
    }

    fn vocab_size(&self) -> usize {
        self.config.vocab_size
    }

    fn max_positions(&self) -> (&'static str, usize) {
        (
            "max_position_embeddings",
            self.config.max_position_embeddings,
        )
    }

    fn without_dropout(&self) -> Self {
        Llama::new(LlamaConfig {
            attention_dropout: 0.0,
            ..self.config.clone()
        })
    }

    /// `LlamaForCausalLM`'s forward ([`CausalLm::forward_cached`]), parameters created
    /// under Hugging Face's names; the cache holds each layer's rotated keys and its
    /// values, `[N, num_key_value_heads, positions, head_dim]`.
    fn forward_cached(
        &self,
        nn: &mut Layers,
        tokens: ValueId,
        past: Option<&[KeyValue]>,
    ) -> wick_graph::Result<(ValueId, Vec<KeyValue>)> {
        let c = &self.config;
        c.check()
            .map_err(|e| wick_graph::GraphError::Usage(format!("LLaMA config: {e}")))?;
        let [n, t, offset] = causal_lm::positions(self, nn, tokens, past, c.num_hidden_layers)?;
        let (e, vocab) = (c.hidden_size, c.vocab_size);
        let init = Init::Normal(c.initializer_range);
        let (h, embed, presents) = nn.scope("model", |nn| {
            let embed = nn.param(
                "embed_tokens.weight",
                &[vocab, e],
                TensorRole::FcWeight,
                init,
                e,
            )?;
            let mut h = nn.builder().embedding(tokens, embed, None)?;
            let dtype = nn.builder().dtype(h);
            let (cos, sin) = c.rotary().tables(offset, t, dtype)?;
            let b = nn.builder();
            let rope = (
                b.constant("model.rotary_emb.cos", &cos)?,
                b.constant("model.rotary_emb.sin", &sin)?,
            );
            let mut presents = Vec::with_capacity(c.num_hidden_layers);
            for i in 0..c.num_hidden_layers {
                let cached = past.map(|p| p[i]);
                let at = LayerContext { n, t, rope, cached };
                let (y, kv) =
                    nn.scope(&format!("layers.{i}"), |nn| self.decoder_layer(nn, h, at))?;
                h = y;
                presents.push(kv);
            }
            let h = nn.rms_norm("norm", h, e, Some(c.rms_norm_eps))?;
            Ok((h, embed, presents))
        })?;
        let logits = nn.scope("lm_head", |nn| {
            let w = if c.tie_word_embeddings {
                embed
            } else {
                nn.param("weight", &[vocab, e], TensorRole::FcWeight, init, e)?
            };
            let b = nn.builder();
            let rows = b.reshape(h, &[n * t, e])?;
            let logits = b.linear(rows, w, None)?;
            b.reshape(logits, &[n, t, vocab])
        })?;
        Ok((logits, presents))
    }
}

impl Llama {
    /// One `LlamaDecoderLayer`: `x + self_attn(input_layernorm(x))`, then
    /// `+ mlp(post_attention_layernorm(·))`. Returns its output and the layer's keys
    /// and values.
    fn decoder_layer(
        &self,
        nn: &mut Layers,
        x: ValueId,
        at: LayerContext,
    ) -> wick_graph::Result<(ValueId, KeyValue)> {
        let c = &self.config;
        let (e, eps) = (c.hidden_size, Some(c.rms_norm_eps));
        let y = nn.rms_norm("input_layernorm", x, e, eps)?;
        let (y, kv) = nn.scope("self_attn", |nn| self.attention(nn, y, at))?;
        let x = nn.builder().add(x, y)?;
        let y = nn.rms_norm("post_attention_layernorm", x, e, eps)?;
        let y = nn.scope("mlp", |nn| {
            let (wide, bias) = (c.intermediate_size, c.mlp_bias);
            let gate = self.projection(nn, "gate_proj", y, [e, wide], bias)?;
            let up = self.projection(nn, "up_proj", y, [e, wide], bias)?;
            let b = nn.builder();
            let gate = b.silu(gate)?;
            let h = b.mul(gate, up)?;
            self.projection(nn, "down_proj", h, [wide, e], bias)
        })?;
        Ok((nn.builder().add(x, y)?, kv))
    }

    /// `LlamaAttention`: rotary positions on q and k, the cached keys and values in front
    /// of the new ones, each key/value head repeated for its group of query heads, and
    /// causal attention (a cached step's one query sees every key).
    fn attention(
        &self,
        nn: &mut Layers,
        x: ValueId,
        at: LayerContext,
    ) -> wick_graph::Result<(ValueId, KeyValue)> {
        let LayerContext { n, t, rope, cached } = at;
        let c = &self.config;
        let (e, d, bias) = (c.hidden_size, c.head_dim, c.attention_bias);
        let (heads, kv_heads) = (c.num_attention_heads, c.num_key_value_heads);
        let split = |nn: &mut Layers, name: &str, heads: usize| {
            let p = self.projection(nn, name, x, [e, heads * d], bias)?;
            let b = nn.builder();
            let p = b.reshape(p, &[n, t, heads, d])?;
            b.permute(p, &[0, 2, 1, 3]) // [N, heads, T, d]
        };
        let q = split(nn, "q_proj", heads)?;
        let k = split(nn, "k_proj", kv_heads)?;
        let mut v = split(nn, "v_proj", kv_heads)?;
        let b = nn.builder();
        let q = apply_rotary(b, q, rope)?;
        let mut k = apply_rotary(b, k, rope)?;
        if let Some((past_k, past_v)) = cached {
            k = b.concat(&[past_k, k], 2)?;
            v = b.concat(&[past_v, v], 2)?;
        }
        let group = heads / kv_heads;
        let (k_all, v_all) = (repeat_heads(b, k, group)?, repeat_heads(b, v, group)?);
        let causal = cached.is_none();
        let p = c.attention_dropout;
        let y = b.scaled_dot_product_attention(q, k_all, v_all, None, p, causal, None)?;
        let y = b.permute(y, &[0, 2, 1, 3])?;
        let y = b.reshape(y, &[n, t, heads * d])?;
        let y = self.projection(nn, "o_proj", y, [heads * d, e], bias)?;
        Ok((y, (k, v)))
    }

    /// `nn.Linear(cin, cout, bias)` as layer `path`, initialised as transformers does:
    /// weight `N(0, initializer_range²)`, bias zeros.
    fn projection(
        &self,
        nn: &mut Layers,
        path: &str,
        x: ValueId,
        [cin, cout]: [usize; 2],
        bias: bool,
    ) -> wick_graph::Result<ValueId> {
        let init = Init::Normal(self.config.initializer_range);
        let bias_init = bias.then_some(Init::Constant(0.0));
        nn.linear_with(path, x, cin, cout, init, bias_init)
    }
}

/// What a decoder layer reads besides its input: the batch `[n, t]`, the rotary tables
/// `(cos, sin)` and the layer's cached keys and values.
#[derive(Debug, Clone, Copy)]
struct LayerContext {
    n: usize,
    t: usize,
    rope: (ValueId, ValueId),
    cached: Option<KeyValue>,
}

/// Each of `x`'s heads `[N, kv_heads, T, d]` repeated `group` times in place,
/// `[N, kv_heads·group, T, d]`: transformers' `repeat_kv`.
fn repeat_heads(
    b: &mut wick_graph::GraphBuilder,
    x: ValueId,
    group: usize,
) -> wick_graph::Result<ValueId> {
    if group == 1 {
        return Ok(x);
    }
    let shape = b.shape(x).to_vec();
    let [n, kv_heads, t, d] = shape[..] else {
        return Err(wick_graph::GraphError::Usage(format!(
            "LLaMA: keys and values are [N, heads, T, head_dim], got {shape:?}"
        )));
    };
    let x = b.unsqueeze(x, 2)?;
    let sizes = [n, kv_heads, group, t, d].map(|s| s as isize);
    let x = b.expand(x, &sizes)?;
    b.reshape(x, &[n, kv_heads * group, t, d])
}
