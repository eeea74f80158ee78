//! Any model wick-models can build: an [`Architecture`] from the registry
//! ([`crate::registry`]) with its classes and settings, as a [`ModelConfig`].

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use candle_core::{DType, Tensor};
use wick_graph::{GraphBuilder, Mode, ValueId};

use crate::error::{ModelError, Result};
use crate::image::ImageSize;
use crate::nn::{Layers, TensorRole, TensorSpec};

/// The first layers of the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stem {
    /// 7x7 stride-2 conv, batch norm, relu, 3x3 stride-2 padding-1 max pool (ImageNet).
    ImageNet,
    /// 3x3 stride-1 conv, batch norm, relu, no max pool (CIFAR-sized images).
    Cifar,
}

impl FromStr for Stem {
    type Err = ModelError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "imagenet" => Ok(Stem::ImageNet),
            "cifar" => Ok(Stem::Cifar),
            _ => Err(ModelError::Config(format!(
                "unknown stem `{s}`: expected imagenet or cifar"
            ))),
        }
    }
}

/// Records a model's forward pass of images `[N, 3, H, W]` and returns the logits,
/// creating every parameter and running statistic under its torchvision name.
pub type RecordFn = fn(&mut Layers, ValueId, &ModelConfig) -> wick_graph::Result<ValueId>;

/// Fresh weights as torchvision makes them for a model, from its state spec and a seed.
pub type InitFn = fn(&[TensorSpec], u64) -> Result<HashMap<String, Tensor>>;

/// One model of the registry: torchvision's builder name, how it is recorded, and the
/// settings its builder takes. A model family's file defines one per name and
/// [`crate::registry::MODELS`] lists them.
pub struct Architecture {
    /// torchvision's builder name (`resnet50`, `mobilenet_v2`).
    pub name: &'static str,
    /// Records the forward pass.
    pub record: RecordFn,
    /// torchvision's initialisation.
    pub init: InitFn,
    /// torchvision's default classifier dropout; `None` for a model without dropout.
    pub dropout: Option<f64>,
    /// torchvision's default stochastic depth (the last block's drop probability);
    /// `None` for a model without it.
    pub stochastic_depth: Option<f64>,
    /// Whether the model takes a [`Stem`] (the ResNets; the CIFAR stem suits 32x32 images).
    pub has_stem: bool,
    /// For a model whose parameters depend on the image size (a Vision Transformer's
    /// position embedding): its patch. It takes square images whose side is a multiple
    /// of the patch, and is built for one side ([`ModelConfig::image_size`]).
    pub patch: Option<usize>,
}

impl Architecture {
    /// A model `name` recorded by `record`, with the zoo's initialisation
    /// ([`nn::initial_state`](crate::nn::initial_state)), no dropout, no stochastic depth
    /// and no stem choice.
    pub const fn new(name: &'static str, record: RecordFn) -> Self {
        Architecture {
            name,
            record,
            init: crate::nn::initial_state,
            dropout: None,
            stochastic_depth: None,
            has_stem: false,
            patch: None,
        }
    }

    /// The same model with parameters that depend on the image size, in patches of
    /// `patch` pixels (a Vision Transformer).
    pub const fn with_patch(self, patch: usize) -> Self {
        Architecture {
            patch: Some(patch),
            ..self
        }
    }

    /// The same model with torchvision's default classifier dropout `p`.
    pub const fn with_dropout(self, p: f64) -> Self {
        Architecture {
            dropout: Some(p),
            ..self
        }
    }

    /// The same model with torchvision's default stochastic depth `p`.
    pub const fn with_stochastic_depth(self, p: f64) -> Self {
        Architecture {
            stochastic_depth: Some(p),
            ..self
        }
    }
}

impl fmt::Debug for Architecture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for Architecture {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

/// A model's configuration: its architecture, classes, stem and the probabilities of its
/// random layers (0 makes a training step deterministic).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelConfig {
    /// The architecture.
    pub arch: &'static Architecture,
    /// Output classes.
    pub num_classes: usize,
    /// The stem, for a model that takes one ([`Architecture::has_stem`]).
    pub stem: Stem,
    /// The classifier's dropout (0 for a model without dropout).
    pub dropout: f64,
    /// Stochastic depth: the last block's drop probability (0 for a model without it).
    pub stochastic_depth: f64,
    /// The side of the square images the model is built for, where its parameters
    /// depend on it ([`Architecture::patch`]; torchvision's `image_size`, 224 by default).
    /// Other models take any size and ignore it.
    pub image_size: usize,
}

/// torchvision's default `image_size`.
pub const DEFAULT_IMAGE_SIZE: usize = 224;

impl ModelConfig {
    /// `arch` with `num_classes` classes, the ImageNet stem, and torchvision's default
    /// dropout and stochastic depth.
    pub fn new(arch: &'static Architecture, num_classes: usize) -> Result<Self> {
        if num_classes == 0 {
            return Err(ModelError::Config("num_classes must be at least 1".into()));
        }
        Ok(ModelConfig {
            arch,
            num_classes,
            stem: Stem::ImageNet,
            dropout: arch.dropout.unwrap_or(0.0),
            stochastic_depth: arch.stochastic_depth.unwrap_or(0.0),
            image_size: DEFAULT_IMAGE_SIZE,
        })
    }

    /// The same model built for square images of `side` pixels: for a model whose
    /// parameters depend on the size, a positive multiple of its patch; others take
    /// any size (the value is kept and ignored).
    pub fn with_image_size(self, side: usize) -> Result<Self> {
        if let Some(patch) = self.arch.patch {
            if side == 0 || !side.is_multiple_of(patch) {
                return Err(ModelError::Config(format!(
                    "{} takes square images whose side is a multiple of its patch {patch}, got {side}",
                    self.name()
                )));
            }
        }
        Ok(ModelConfig {
            image_size: side,
            ..self
        })
    }

    /// The configuration that runs images of `size`: for a model whose parameters
    /// depend on the size, built for it (it must be square); others unchanged.
    pub fn for_images(self, size: ImageSize) -> Result<Self> {
        if self.arch.patch.is_none() {
            return Ok(self);
        }
        if size.width != size.height {
            return Err(ModelError::Config(format!(
                "{} takes square images (torchvision's image_size), got {size} (width x height)",
                self.name()
            )));
        }
        self.with_image_size(size.width)
    }

    /// The same model with `stem`; an error for a model without a stem choice.
    pub fn with_stem(self, stem: Stem) -> Result<Self> {
        if stem != Stem::ImageNet && !self.arch.has_stem {
            return Err(ModelError::Config(format!(
                "{} has no stem choice: --stem applies to the ResNets",
                self.name()
            )));
        }
        Ok(ModelConfig { stem, ..self })
    }

    /// The same model with this classifier dropout, a probability in [0, 1); an error for
    /// a model without dropout.
    pub fn with_dropout(self, p: f64) -> Result<Self> {
        self.probability("dropout", self.arch.dropout, p)?;
        Ok(ModelConfig { dropout: p, ..self })
    }

    /// The same model with this stochastic depth, a probability in [0, 1); an error for
    /// a model without it.
    pub fn with_stochastic_depth(self, p: f64) -> Result<Self> {
        self.probability("stochastic depth", self.arch.stochastic_depth, p)?;
        Ok(ModelConfig {
            stochastic_depth: p,
            ..self
        })
    }

    fn probability(&self, what: &str, default: Option<f64>, p: f64) -> Result<()> {
        if default.is_none() {
            return Err(ModelError::Config(format!("{} has no {what}", self.name())));
        }
        if !(0.0..1.0).contains(&p) {
            return Err(ModelError::Config(format!(
                "{what} must be a probability in [0, 1), got {p}"
            )));
        }
        Ok(())
    }

    /// torchvision's name of the model.
    pub fn name(&self) -> &'static str {
        self.arch.name
    }

    /// Output classes.
    pub fn num_classes(&self) -> usize {
        self.num_classes
    }

    /// A one-line description (`resnet18 (Cifar stem, 10 classes)`).
    pub fn describe(&self) -> String {
        if self.arch.has_stem {
            format!(
                "{} ({:?} stem, {} classes)",
                self.name(),
                self.stem,
                self.num_classes
            )
        } else {
            format!("{} ({} classes)", self.name(), self.num_classes)
        }
    }

    /// Records the forward pass of `images` `[N, 3, H, W]` on `nn` and returns the logits.
    pub fn record(&self, nn: &mut Layers, images: ValueId) -> wick_graph::Result<ValueId> {
        (self.arch.record)(nn, images, self)
    }

    /// Records the forward pass of `images` `[N, 3, H, W]` on `b` and returns the logits,
    /// creating the parameters and running statistics under their torchvision names.
    pub fn forward(&self, b: &mut GraphBuilder, images: ValueId) -> Result<ValueId> {
        Ok(self.record(&mut Layers::new(b), images)?)
    }

    /// The state dict's tensors in torchvision's order (without `num_batches_tracked`).
    pub fn state_spec(&self) -> Result<Vec<TensorSpec>> {
        let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
        // Parameter shapes depend on the image size only where the model is built for one
        // (`image_size`); 224, the default, survives every other model.
        let side = self.image_size;
        let images = b.input("images", &[1, 3, side, side], DType::F32)?;
        let mut nn = Layers::new(&mut b);
        self.record(&mut nn, images)?;
        Ok(nn.into_specs())
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
    /// (every larger size too, square or not); `None` if no size up to 512x512 is accepted.
    pub fn smallest_image_size(&self, mode: Mode, batch: usize) -> Option<ImageSize> {
        if self.arch.patch.is_some() {
            // Built for one size: no size range to search.
            return None;
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
