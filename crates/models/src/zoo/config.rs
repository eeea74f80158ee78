//! A zoo model's configuration: its architecture (torchvision's builder name), classes,
//! dropout and stochastic depth.

use std::str::FromStr;

use crate::error::{ModelError, Result};

/// A zoo architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ZooArch {
    /// MobileNetV2.
    MobileNetV2,
    /// MobileNetV3 small.
    MobileNetV3Small,
    /// MobileNetV3 large.
    MobileNetV3Large,
    /// EfficientNet-B0.
    EfficientNetB0,
    /// DenseNet-121.
    DenseNet121,
    /// ConvNeXt-Tiny.
    ConvNextTiny,
    /// VGG-11 with batch norm.
    Vgg11Bn,
    /// VGG-16 with batch norm.
    Vgg16Bn,
}

impl ZooArch {
    /// Every zoo architecture.
    pub const ALL: [ZooArch; 8] = [
        ZooArch::MobileNetV2,
        ZooArch::MobileNetV3Small,
        ZooArch::MobileNetV3Large,
        ZooArch::EfficientNetB0,
        ZooArch::DenseNet121,
        ZooArch::ConvNextTiny,
        ZooArch::Vgg11Bn,
        ZooArch::Vgg16Bn,
    ];

    /// torchvision's builder name (`mobilenet_v2`).
    pub fn name(self) -> &'static str {
        match self {
            ZooArch::MobileNetV2 => "mobilenet_v2",
            ZooArch::MobileNetV3Small => "mobilenet_v3_small",
            ZooArch::MobileNetV3Large => "mobilenet_v3_large",
            ZooArch::EfficientNetB0 => "efficientnet_b0",
            ZooArch::DenseNet121 => "densenet121",
            ZooArch::ConvNextTiny => "convnext_tiny",
            ZooArch::Vgg11Bn => "vgg11_bn",
            ZooArch::Vgg16Bn => "vgg16_bn",
        }
    }

    /// torchvision's default classifier dropout.
    pub fn default_dropout(self) -> f64 {
        match self {
            ZooArch::Vgg11Bn | ZooArch::Vgg16Bn => 0.5,
            ZooArch::DenseNet121 | ZooArch::ConvNextTiny => 0.0,
            _ => 0.2,
        }
    }

    /// torchvision's default stochastic depth (the last block's drop probability).
    pub fn default_stochastic_depth(self) -> f64 {
        match self {
            ZooArch::EfficientNetB0 => 0.2,
            ZooArch::ConvNextTiny => 0.1,
            _ => 0.0,
        }
    }
}

impl FromStr for ZooArch {
    type Err = ModelError;
    fn from_str(s: &str) -> Result<Self> {
        ZooArch::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = ZooArch::ALL.iter().map(|a| a.name()).collect();
                ModelError::Config(format!(
                    "unknown zoo model `{s}`: expected one of {}",
                    names.join(", ")
                ))
            })
    }
}

/// A zoo model: its architecture, classes, and the probabilities of its random layers
/// (0 makes a training step deterministic).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ZooConfig {
    /// The architecture.
    pub arch: ZooArch,
    /// Output classes.
    pub num_classes: usize,
    /// The classifier's dropout.
    pub dropout: f64,
    /// Stochastic depth (EfficientNet, ConvNeXt): the last block's drop probability.
    pub stochastic_depth: f64,
}

impl ZooConfig {
    /// `arch` with `num_classes` classes and torchvision's default dropout and stochastic depth.
    pub fn new(arch: ZooArch, num_classes: usize) -> Result<Self> {
        if num_classes == 0 {
            return Err(ModelError::Config("num_classes must be at least 1".into()));
        }
        Ok(ZooConfig {
            arch,
            num_classes,
            dropout: arch.default_dropout(),
            stochastic_depth: arch.default_stochastic_depth(),
        })
    }
}
