//! # wick-models: torchvision's and Hugging Face's models on wick's graph
//!
//! - [`registry`]: every model by torchvision's builder name (`resnet50`, `mobilenet_v2`,
//!   ...), each an [`Architecture`] defined in its family's file in [`zoo`] and recorded
//!   on [`nn::Layers`] with torchvision's op order and `state_dict` names;
//!   [`ModelConfig::by_name`] gives one with its classes and settings;
//! - [`ResNetConfig`]: resnet18/34/50/101/152 with the ImageNet or CIFAR stem, typed;
//! - [`init::torchvision_init`]: torchvision's initialisation;
//! - [`checkpoint`]: safetensors checkpoints that move to and from PyTorch;
//! - [`Session`]: a training or inference graph with its weights, as the examples use it,
//!   for images of any [`ImageSize`] the model accepts, square or not;
//! - [`resume`]: training checkpoints that resume exactly, for a [`Session`] or any
//!   [`resume::Checkpointable`] run; [`optimizer_state`]: an executor's optimizer state by name;
//! - [`data`]: synthetic images, CIFAR-10 binaries and batch files, prefetched on a thread;
//!   text corpora and tokenizers;
//! - [`gpt2`] and [`llama`]: Hugging Face's `GPT2LMHeadModel` and `LlamaForCausalLM` with
//!   their parameter names, read from a `config.json`; [`CausalLm`] gives each the
//!   next-token loss and generation with a key/value cache, and [`LanguageModel`] picks
//!   one by the config's `model_type`.

pub mod checkpoint;
pub mod data;
pub mod error;
pub mod evaluate;
pub mod image;
pub mod init;
pub mod language_model;
pub mod limits;
pub mod lr_schedule;
pub mod model;
pub mod nn;
pub mod optimizer_state;
pub mod registry;
pub mod resume;
pub mod session;
pub mod zoo;

pub use checkpoint::{StateDict, ValueChecks};
pub use error::{ModelError, Result};
pub use image::ImageSize;
pub use init::WeightInit;
pub use language_model::{gpt2, llama, CausalLm, LanguageModel, Sampling};
pub use lr_schedule::{LrSchedule, ScheduleUnit};
pub use model::{Architecture, ModelConfig};
pub use session::{Session, TrainOptions};
pub use zoo::resnet::{self, Depth, ResNetConfig, Stem};
