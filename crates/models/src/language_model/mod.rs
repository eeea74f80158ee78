//! Language models: Hugging Face's GPT-2 ([`gpt2`]) and LLaMA ([`llama`]) with their
//! parameter names, read from a `config.json`; what every causal language model does
//! ([`CausalLm`]: the next-token loss, generation with a key/value cache); and
//! [`LanguageModel`], the architecture a config's `model_type` names.

pub mod causal_lm;
pub(crate) mod config_json;
pub mod gpt2;
pub mod llama;
pub mod model_type;
pub mod rotary;

pub use causal_lm::{CausalLm, KeyValue, LanguageModelOutput, Sampling};
pub use model_type::LanguageModel;
