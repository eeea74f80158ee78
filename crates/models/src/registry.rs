//! The model registry: every model wick-models builds, by torchvision's builder name.
//! A model family is one file in `zoo/` defining one [`Architecture`] per name; listing
//! them here is what registers them.

use crate::error::{ModelError, Result};
use crate::model::{Architecture, ModelConfig};
use crate::zoo::resnet::{self, Stem};
use crate::zoo::{convnext, densenet, efficientnet, mobilenet, vgg, vit};

/// Every registered model, in the order `--model` lists them.
pub const MODELS: &[&Architecture] = &[
    &resnet::RESNET18,
    &resnet::RESNET34,
    &resnet::RESNET50,
    &resnet::RESNET101,
    &resnet::RESNET152,
    &mobilenet::MOBILENET_V2,
    &mobilenet::MOBILENET_V3_SMALL,
    &mobilenet::MOBILENET_V3_LARGE,
    &efficientnet::EFFICIENTNET_B0,
    &densenet::DENSENET121,
    &convnext::CONVNEXT_TINY,
    &vgg::VGG11_BN,
    &vgg::VGG16_BN,
    &vit::VIT_TI_16,
    &vit::VIT_B_16,
    &vit::VIT_B_32,
    &vit::VIT_L_16,
];

/// Every registered name.
pub fn names() -> Vec<&'static str> {
    MODELS.iter().map(|a| a.name).collect()
}

/// The architecture registered as `name`.
pub fn architecture(name: &str) -> Result<&'static Architecture> {
    MODELS
        .iter()
        .copied()
        .find(|a| a.name == name)
        .ok_or_else(|| {
            ModelError::Config(format!(
                "unknown model `{name}`: expected one of {}",
                names().join(", ")
            ))
        })
}

impl ModelConfig {
    /// The model registered as `name` (torchvision's builder name: `resnet50`,
    /// `mobilenet_v2`, `convnext_tiny`, ...; [`names`] lists them) with `classes` classes
    /// (default: 1000, or 10 for a ResNet with the CIFAR stem) and, for a model that takes
    /// one, `stem` (the CIFAR stem on a model without a stem choice is an error).
    pub fn by_name(name: &str, stem: Stem, classes: Option<usize>) -> Result<Self> {
        let arch = architecture(name)?;
        let default = match stem {
            Stem::Cifar if arch.has_stem => 10,
            _ => 1000,
        };
        ModelConfig::new(arch, classes.unwrap_or(default))?.with_stem(stem)
    }
}
