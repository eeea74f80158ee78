//! Any model wick-models can build: a ResNet or a zoo model, by torchvision's name.

use candle_core::DType;
use wick_graph::{GraphBuilder, Mode, ValueId};

use crate::error::{ModelError, Result};
use crate::image::ImageSize;
use crate::nn::{Layers, TensorRole, TensorSpec};
use crate::resnet::{Depth, ResNetConfig, Stem};
use crate::zoo::{ZooArch, ZooConfig};

/// A model's configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ModelConfig {
    /// resnet18 ... resnet152.
    ResNet(ResNetConfig),
    /// The torchvision CNN zoo beyond ResNet.
    Zoo(ZooConfig),
}

impl From<ResNetConfig> for ModelConfig {
    fn from(c: ResNetConfig) -> Self {
        ModelConfig::ResNet(c)
    }
}

impl From<ZooConfig> for ModelConfig {
    fn from(c: ZooConfig) -> Self {
        ModelConfig::Zoo(c)
    }
}

impl ModelConfig {
    /// The model named `name` (torchvision's builder name: `resnet50`, `mobilenet_v2`,
    /// `convnext_tiny`, ...) with `classes` classes (default: 1000, or 10 for a ResNet
    /// with the CIFAR stem). `stem` applies to ResNets only.
    pub fn by_name(name: &str, stem: Stem, classes: Option<usize>) -> Result<Self> {
        if let Ok(depth) = name.parse::<Depth>() {
            let classes = classes.unwrap_or(ResNetConfig::default_classes(stem));
            return Ok(ResNetConfig::new(depth, stem, classes)?.into());
        }
        let arch: ZooArch = name.parse().map_err(|_| {
            let zoo: Vec<_> = ZooArch::ALL.iter().map(|a| a.name()).collect();
            ModelError::Config(format!(
                "unknown model `{name}`: expected resnet18, resnet34, resnet50, resnet101, resnet152, {}",
                zoo.join(", ")
            ))
        })?;
        Ok(ZooConfig::new(arch, classes.unwrap_or(1000))?.into())
    }

    /// torchvision's name of the model.
    pub fn name(&self) -> &'static str {
        match self {
            ModelConfig::ResNet(c) => c.depth.name(),
            ModelConfig::Zoo(c) => c.arch.name(),
        }
    }

    /// Output classes.
    pub fn num_classes(&self) -> usize {
        match self {
            ModelConfig::ResNet(c) => c.num_classes,
            ModelConfig::Zoo(c) => c.num_classes,
        }
    }

    /// A one-line description (`resnet18 (Cifar stem, 10 classes)`).
    pub fn describe(&self) -> String {
        match self {
            ModelConfig::ResNet(c) => format!(
                "{} ({:?} stem, {} classes)",
                c.depth.name(),
                c.stem,
                c.num_classes
            ),
            ModelConfig::Zoo(c) => format!("{} ({} classes)", c.arch.name(), c.num_classes),
        }
    }

    /// The ResNet configuration, if this is a ResNet.
    pub fn resnet(&self) -> Option<&ResNetConfig> {
        match self {
            ModelConfig::ResNet(c) => Some(c),
            ModelConfig::Zoo(_) => None,
        }
    }

    /// Records the forward pass of `images` `[N, 3, H, W]` on `b` and returns the logits,
    /// creating the parameters and running statistics under their torchvision names.
    pub fn forward(&self, b: &mut GraphBuilder, images: ValueId) -> Result<ValueId> {
        match self {
            ModelConfig::ResNet(c) => c.forward(b, images),
            ModelConfig::Zoo(c) => Ok(c.record(&mut Layers::new(b), images)?),
        }
    }

    /// The state dict's tensors in torchvision's order (without `num_batches_tracked`).
    pub fn state_spec(&self) -> Result<Vec<TensorSpec>> {
        match self {
            ModelConfig::ResNet(c) => c.state_spec(),
            ModelConfig::Zoo(c) => {
                let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
                // Parameter shapes do not depend on the image size.
                let images = b.input("images", &[1, 3, 224, 224], DType::F32)?;
                let mut nn = Layers::new(&mut b);
                c.record(&mut nn, images)?;
                Ok(nn.into_specs())
            }
        }
    }

    /// The names of the batch-norm layers (each has a `num_batches_tracked` in a checkpoint).
    pub fn batch_norm_names(&self) -> Result<Vec<String>> {
        Ok(self
            .state_spec()?
            .into_iter()
            .filter(|s| s.role == TensorRole::RunningMean)
            .map(|s| s.name.trim_end_matches(".running_mean").to_string())
            .collect())
    }

    /// The smallest square images the model's `mode` graph accepts for batches of `batch`
    /// (every larger size too); `None` if no size up to 512x512 is accepted.
    pub fn smallest_image_size(&self, mode: Mode, batch: usize) -> Option<ImageSize> {
        if let ModelConfig::ResNet(c) = self {
            return c.smallest_image_size(mode, batch);
        }
        let accepts = |side: usize| {
            let size = ImageSize::square(side);
            let mut b = GraphBuilder::new(mode, DType::F32);
            b.input("images", &[batch, 3, size.height, size.width], DType::F32)
                .map_err(ModelError::from)
                .and_then(|images| self.forward(&mut b, images))
                .is_ok()
        };
        // Acceptance is monotone in the side: bisect.
        if !accepts(512) {
            return None;
        }
        let (mut lo, mut hi) = (0, 512);
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if accepts(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(ImageSize::square(hi))
    }
}
