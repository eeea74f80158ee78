//! # wick-models: the ResNet family on wick's graph
//!
//! - [`ResNetConfig`]: resnet18/34/50/101/152 with the ImageNet or CIFAR stem and any
//!   number of classes, recorded on a [`wick_graph::GraphBuilder`] with torchvision's op
//!   order and `state_dict` names;
//! - [`init::torchvision_init`]: torchvision's initialisation;
//! - [`checkpoint`]: safetensors checkpoints that move to and from PyTorch;
//! - [`Session`]: a training or inference graph with its weights, as the examples use it,
//!   for images of any [`ImageSize`] the model accepts, square or not;
//! - [`data`]: synthetic images, CIFAR-10 binaries and batch files, prefetched on a thread.

pub mod checkpoint;
pub mod data;
pub mod error;
pub mod evaluate;
pub mod image;
pub mod init;
pub mod limits;
pub mod lr_schedule;
pub mod model;
pub mod nn;
pub mod resnet;
pub mod resume;
pub mod session;
pub mod zoo;

pub use checkpoint::{StateDict, ValueChecks};
pub use error::{ModelError, Result};
pub use image::ImageSize;
pub use init::WeightInit;
pub use lr_schedule::{LrSchedule, ScheduleUnit};
pub use model::ModelConfig;
pub use resnet::{Depth, ResNetConfig, Stem};
pub use session::{Session, TrainOptions};
pub use zoo::{ZooArch, ZooConfig};
