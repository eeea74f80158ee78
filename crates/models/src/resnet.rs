//! The ResNet family (He et al. 2015, torchvision's v1.5 layout: the stride of a
//! bottleneck sits on its 3x3 convolution), recorded on a [`GraphBuilder`].
//!
//! Parameter and state names are torchvision's `state_dict` names (`conv1.weight`,
//! `bn1.running_mean`, `layer1.0.downsample.0.weight`, `fc.bias`, ...), so checkpoints
//! move between PyTorch and wick unchanged.

use std::str::FromStr;

use candle_core::DType;
use wick_graph::{GraphBuilder, ValueId};
use wick_ops::{BatchNorm2dParams, Conv2dParams};

use crate::error::{ModelError, Result};
use crate::image::ImageSize;

/// Which ResNet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Depth {
    /// ResNet-18: basic blocks [2, 2, 2, 2].
    R18,
    /// ResNet-34: basic blocks [3, 4, 6, 3].
    R34,
    /// ResNet-50: bottleneck blocks [3, 4, 6, 3].
    R50,
    /// ResNet-101: bottleneck blocks [3, 4, 23, 3].
    R101,
    /// ResNet-152: bottleneck blocks [3, 8, 36, 3].
    R152,
}

impl Depth {
    /// Blocks per stage.
    pub fn blocks(self) -> [usize; 4] {
        match self {
            Depth::R18 => [2, 2, 2, 2],
            Depth::R34 | Depth::R50 => [3, 4, 6, 3],
            Depth::R101 => [3, 4, 23, 3],
            Depth::R152 => [3, 8, 36, 3],
        }
    }

    /// Whether the blocks are bottlenecks (1x1, 3x3, 1x1 with expansion 4).
    pub fn bottleneck(self) -> bool {
        matches!(self, Depth::R50 | Depth::R101 | Depth::R152)
    }

    fn expansion(self) -> usize {
        if self.bottleneck() {
            4
        } else {
            1
        }
    }

    /// The model's name (`resnet50`).
    pub fn name(self) -> &'static str {
        match self {
            Depth::R18 => "resnet18",
            Depth::R34 => "resnet34",
            Depth::R50 => "resnet50",
            Depth::R101 => "resnet101",
            Depth::R152 => "resnet152",
        }
    }
}

impl FromStr for Depth {
    type Err = ModelError;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "resnet18" => Depth::R18,
            "resnet34" => Depth::R34,
            "resnet50" => Depth::R50,
            "resnet101" => Depth::R101,
            "resnet152" => Depth::R152,
            _ => {
                return Err(ModelError::Config(format!(
                    "unknown model `{s}`: expected resnet18, resnet34, resnet50, resnet101 or resnet152"
                )))
            }
        })
    }
}

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

/// A ResNet configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResNetConfig {
    /// Which ResNet.
    pub depth: Depth,
    /// The stem.
    pub stem: Stem,
    /// Output classes.
    pub num_classes: usize,
}

pub use crate::nn::{TensorRole, TensorSpec};

impl ResNetConfig {
    /// A configuration; `num_classes` must be at least 1.
    pub fn new(depth: Depth, stem: Stem, num_classes: usize) -> Result<Self> {
        if num_classes == 0 {
            return Err(ModelError::Config("num_classes must be at least 1".into()));
        }
        Ok(ResNetConfig {
            depth,
            stem,
            num_classes,
        })
    }

    /// The default class count of a stem: 1000 for ImageNet, 10 for CIFAR.
    pub fn default_classes(stem: Stem) -> usize {
        match stem {
            Stem::ImageNet => 1000,
            Stem::Cifar => 10,
        }
    }

    /// Width of the final feature vector (512 or 2048).
    pub fn features(&self) -> usize {
        512 * self.depth.expansion()
    }

    /// Records the forward pass of `images` [N, 3, H, W] on `b` and returns the logits.
    /// Parameters and running statistics are created on the builder under their
    /// torchvision names. The op order is torchvision's (and SINGA's documented listing).
    pub fn forward(&self, b: &mut GraphBuilder, images: ValueId) -> Result<ValueId> {
        let mut rec = Recorder {
            b,
            specs: None,
            fc_fan_in: 0,
        };
        Ok(self.record(&mut rec, images)?)
    }

    /// The smallest square images this model's `mode` graph accepts for batches of
    /// `batch` (every larger size is accepted too, square or not). Every conv and pool
    /// keeps at least one pixel for any size, so in inference it is 1x1; in training the
    /// last batch norm needs more than one value per channel (batch x height x width > 1
    /// after the last downsampling), as PyTorch requires too. `None` if no size up to
    /// 512x512 is accepted.
    pub fn smallest_image_size(&self, mode: wick_graph::Mode, batch: usize) -> Option<ImageSize> {
        (1..=512).map(ImageSize::square).find(|size| {
            let mut b = GraphBuilder::new(mode, DType::F32);
            b.input("images", &[batch, 3, size.height, size.width], DType::F32)
                .map_err(ModelError::from)
                .and_then(|images| self.forward(&mut b, images))
                .is_ok()
        })
    }

    /// The state dict's tensors in torchvision's order (without `num_batches_tracked`).
    pub fn state_spec(&self) -> Result<Vec<TensorSpec>> {
        let mut b = GraphBuilder::new(wick_graph::Mode::Eval, DType::F32);
        let mut specs = Vec::new();
        let mut rec = Recorder {
            b: &mut b,
            specs: Some(&mut specs),
            fc_fan_in: 0,
        };
        // Parameter shapes do not depend on the image size; 224 survives every stem.
        let images = rec.b.input("images", &[1, 3, 224, 224], DType::F32)?;
        self.record(&mut rec, images)?;
        Ok(specs)
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

    fn record(&self, r: &mut Recorder, images: ValueId) -> wick_graph::Result<ValueId> {
        let mut x = match self.stem {
            Stem::ImageNet => {
                let h = r.conv(images, "conv1", 3, 64, 7, 2, 3)?;
                let h = r.bn(h, "bn1", 64)?;
                let h = r.layer("relu", |b| b.relu(h))?;
                r.layer("maxpool", |b| {
                    b.max_pool2d(h, wick_ops::Pool2dParams::new(3, 2, 1))
                })?
            }
            Stem::Cifar => {
                let h = r.conv(images, "conv1", 3, 64, 3, 1, 1)?;
                let h = r.bn(h, "bn1", 64)?;
                r.layer("relu", |b| b.relu(h))?
            }
        };
        let mut inplanes = 64;
        let exp = self.depth.expansion();
        for (stage, &blocks) in self.depth.blocks().iter().enumerate() {
            let planes = 64 << stage;
            for block in 0..blocks {
                let stride = if stage > 0 && block == 0 { 2 } else { 1 };
                let p = format!("layer{}.{block}", stage + 1);
                let relu = format!("{p}.relu");
                let identity = x;
                let out = if self.depth.bottleneck() {
                    let h = r.conv(x, &format!("{p}.conv1"), inplanes, planes, 1, 1, 0)?;
                    let h = r.bn(h, &format!("{p}.bn1"), planes)?;
                    let h = r.layer(&relu, |b| b.relu(h))?;
                    let h = r.conv(h, &format!("{p}.conv2"), planes, planes, 3, stride, 1)?;
                    let h = r.bn(h, &format!("{p}.bn2"), planes)?;
                    let h = r.layer(&relu, |b| b.relu(h))?;
                    let h = r.conv(h, &format!("{p}.conv3"), planes, planes * exp, 1, 1, 0)?;
                    r.bn(h, &format!("{p}.bn3"), planes * exp)?
                } else {
                    let h = r.conv(x, &format!("{p}.conv1"), inplanes, planes, 3, stride, 1)?;
                    let h = r.bn(h, &format!("{p}.bn1"), planes)?;
                    let h = r.layer(&relu, |b| b.relu(h))?;
                    let h = r.conv(h, &format!("{p}.conv2"), planes, planes, 3, 1, 1)?;
                    r.bn(h, &format!("{p}.bn2"), planes)?
                };
                let shortcut = if stride != 1 || inplanes != planes * exp {
                    let h = r.conv(
                        identity,
                        &format!("{p}.downsample.0"),
                        inplanes,
                        planes * exp,
                        1,
                        stride,
                        0,
                    )?;
                    r.bn(h, &format!("{p}.downsample.1"), planes * exp)?
                } else {
                    identity
                };
                // The residual sum is the block's own op (torchvision's `out += identity`).
                let sum = r.layer(&p, |b| b.add(out, shortcut))?;
                x = r.layer(&relu, |b| b.relu(sum))?;
                inplanes = planes * exp;
            }
        }
        let h = r.layer("avgpool", |b| b.global_avg_pool(x))?;
        let h = r.layer("flatten", |b| b.flatten(h))?;
        let fc_w = r.param(
            "fc.weight",
            &[self.num_classes, inplanes],
            TensorRole::FcWeight,
        )?;
        let fc_b = r.param("fc.bias", &[self.num_classes], TensorRole::FcBias)?;
        r.layer("fc", |b| b.linear(h, fc_w, Some(fc_b)))
    }
}

/// Records layers on a builder and, optionally, the state-dict spec of what it creates.
struct Recorder<'a> {
    b: &'a mut GraphBuilder,
    specs: Option<&'a mut Vec<TensorSpec>>,
    /// The fan-in of the last fully connected weight noted (for its bias).
    fc_fan_in: usize,
}

impl Recorder<'_> {
    fn note(&mut self, name: &str, shape: &[usize], role: TensorRole) {
        use crate::nn::Init;
        let fan_in = shape.iter().skip(1).product();
        let (init, fan_in) = match role {
            TensorRole::ConvWeight => (Init::KaimingNormalFanOut, fan_in),
            TensorRole::FcWeight => (Init::LinearDefault, fan_in),
            // The bias's bound comes from the layer's fan-in, noted with it.
            TensorRole::FcBias => (Init::LinearDefault, self.fc_fan_in),
            TensorRole::BnWeight | TensorRole::RunningVar => (Init::Constant(1.0), 0),
            _ => (Init::Constant(0.0), 0),
        };
        if role == TensorRole::FcWeight {
            self.fc_fan_in = fan_in;
        }
        if let Some(s) = self.specs.as_mut() {
            s.push(TensorSpec {
                name: name.to_string(),
                shape: shape.to_vec(),
                role,
                init,
                fan_in,
            });
        }
    }

    fn param(
        &mut self,
        name: &str,
        shape: &[usize],
        role: TensorRole,
    ) -> wick_graph::Result<ValueId> {
        self.note(name, shape, role);
        self.b.param(name, shape)
    }

    #[allow(clippy::too_many_arguments)]
    fn conv(
        &mut self,
        x: ValueId,
        name: &str,
        cin: usize,
        cout: usize,
        k: usize,
        stride: usize,
        pad: usize,
    ) -> wick_graph::Result<ValueId> {
        let w = self.param(
            &format!("{name}.weight"),
            &[cout, cin, k, k],
            TensorRole::ConvWeight,
        )?;
        let p = Conv2dParams::new(stride, pad);
        self.b.in_layer(name, |b| b.conv2d(x, w, None, p))
    }

    /// `op` recorded as layer `name` (a torchvision module path).
    fn layer(
        &mut self,
        name: &str,
        op: impl FnOnce(&mut GraphBuilder) -> wick_graph::Result<ValueId>,
    ) -> wick_graph::Result<ValueId> {
        self.b.in_layer(name, op)
    }

    fn bn(&mut self, x: ValueId, name: &str, c: usize) -> wick_graph::Result<ValueId> {
        let w = self.param(&format!("{name}.weight"), &[c], TensorRole::BnWeight)?;
        let bias = self.param(&format!("{name}.bias"), &[c], TensorRole::BnBias)?;
        self.note(
            &format!("{name}.running_mean"),
            &[c],
            TensorRole::RunningMean,
        );
        let rm = self.b.state(&format!("{name}.running_mean"), &[c])?;
        self.note(&format!("{name}.running_var"), &[c], TensorRole::RunningVar);
        let rv = self.b.state(&format!("{name}.running_var"), &[c])?;
        self.b.in_layer(name, |b| {
            b.batch_norm(x, w, bias, rm, rv, BatchNorm2dParams::default())
        })
    }
}
