//! The torchvision CNN zoo beyond ResNet, one file per family, by torchvision's model
//! names and `state_dict` layout: mobilenet_v2, mobilenet_v3_small/large,
//! efficientnet_b0, densenet121, convnext_tiny, vgg11_bn and vgg16_bn.

pub mod blocks;
mod config;
pub mod convnext;
pub mod densenet;
pub mod efficientnet;
pub mod mobilenet;
pub mod vgg;

pub use config::{ZooArch, ZooConfig};

use wick_graph::ValueId;

use crate::nn::Layers;

impl ZooConfig {
    /// Records the forward pass of `images` `[N, 3, H, W]` and returns the logits.
    pub fn record(&self, nn: &mut Layers, images: ValueId) -> wick_graph::Result<ValueId> {
        match self.arch {
            ZooArch::MobileNetV2 => mobilenet::mobilenet_v2(nn, images, self),
            ZooArch::MobileNetV3Small => mobilenet::mobilenet_v3(nn, images, self, false),
            ZooArch::MobileNetV3Large => mobilenet::mobilenet_v3(nn, images, self, true),
            ZooArch::EfficientNetB0 => efficientnet::efficientnet_b0(nn, images, self),
            ZooArch::DenseNet121 => densenet::densenet121(nn, images, self),
            ZooArch::ConvNextTiny => convnext::convnext_tiny(nn, images, self),
            ZooArch::Vgg11Bn => vgg::vgg_bn(nn, images, self, false),
            ZooArch::Vgg16Bn => vgg::vgg_bn(nn, images, self, true),
        }
    }
}
