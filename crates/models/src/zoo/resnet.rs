//! The ResNet family (He et al. 2015, torchvision's v1.5 layout: the stride of a
//! bottleneck sits on its 3x3 convolution), recorded on [`Layers`] like every model of the
//! registry: `resnet18`, `resnet34`, `resnet50`, `resnet101`, `resnet152`.
//!
//! Parameter and state names are torchvision's `state_dict` names (`conv1.weight`,
//! `bn1.running_mean`, `layer1.0.downsample.0.weight`, `fc.bias`, ...), so checkpoints
//! move between PyTorch and wick unchanged.

use std::collections::HashMap;
use std::str::FromStr;

use candle_core::{Device, Tensor};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal, Uniform};
use wick_graph::{Mode, ValueId};
use wick_ops::Pool2dParams;

use crate::error::{ModelError, Result};
use crate::image::ImageSize;
pub use crate::model::Stem;
use crate::model::{Architecture, ModelConfig};
use crate::nn::{Conv, Init, Layers};

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

    /// Output channels of a block per planes (4 for bottlenecks).
    pub fn expansion(self) -> usize {
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

/// A ResNet configuration: torchvision's `resnet18(num_classes=...)` with the stem added.
/// It converts into the registry's [`ModelConfig`].
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

    /// The registry's configuration of this ResNet.
    pub fn model(&self) -> ModelConfig {
        ModelConfig {
            arch: self.depth.architecture(),
            num_classes: self.num_classes,
            stem: self.stem,
            dropout: 0.0,
            stochastic_depth: 0.0,
            image_size: crate::model::DEFAULT_IMAGE_SIZE,
        }
    }

    /// [`ModelConfig::forward`] of this ResNet.
    pub fn forward(&self, b: &mut wick_graph::GraphBuilder, images: ValueId) -> Result<ValueId> {
        self.model().forward(b, images)
    }

    /// [`ModelConfig::state_spec`] of this ResNet.
    pub fn state_spec(&self) -> Result<Vec<TensorSpec>> {
        self.model().state_spec()
    }

    /// [`ModelConfig::smallest_image_size`] of this ResNet: in inference 1x1 (every conv
    /// and pool keeps at least one pixel); in training the last batch norm needs more than
    /// one value per channel, as PyTorch requires too.
    pub fn smallest_image_size(&self, mode: Mode, batch: usize) -> Option<ImageSize> {
        self.model().smallest_image_size(mode, batch)
    }
}

impl From<ResNetConfig> for ModelConfig {
    fn from(c: ResNetConfig) -> Self {
        c.model()
    }
}

impl From<&ResNetConfig> for ModelConfig {
    fn from(c: &ResNetConfig) -> Self {
        c.model()
    }
}

impl Depth {
    /// This depth's entry in the registry.
    pub fn architecture(self) -> &'static Architecture {
        match self {
            Depth::R18 => &RESNET18,
            Depth::R34 => &RESNET34,
            Depth::R50 => &RESNET50,
            Depth::R101 => &RESNET101,
            Depth::R152 => &RESNET152,
        }
    }
}

/// A ResNet of `depth` in the registry: torchvision's initialisation, no dropout, a stem.
const fn resnet(name: &'static str, record: crate::model::RecordFn) -> Architecture {
    Architecture {
        init: resnet_init,
        has_stem: true,
        ..Architecture::new(name, record)
    }
}

/// `resnet18`.
pub const RESNET18: Architecture = resnet("resnet18", |nn, x, c| record(nn, x, c, Depth::R18));
/// `resnet34`.
pub const RESNET34: Architecture = resnet("resnet34", |nn, x, c| record(nn, x, c, Depth::R34));
/// `resnet50`.
pub const RESNET50: Architecture = resnet("resnet50", |nn, x, c| record(nn, x, c, Depth::R50));
/// `resnet101`.
pub const RESNET101: Architecture = resnet("resnet101", |nn, x, c| record(nn, x, c, Depth::R101));
/// `resnet152`.
pub const RESNET152: Architecture = resnet("resnet152", |nn, x, c| record(nn, x, c, Depth::R152));

/// The stem: a 7x7 stride-2 conv, batch norm, ReLU and max pool (ImageNet), or a 3x3
/// stride-1 conv, batch norm and ReLU (CIFAR).
fn stem(nn: &mut Layers, images: ValueId, stem: Stem) -> wick_graph::Result<ValueId> {
    let (k, stride, pad) = match stem {
        Stem::ImageNet => (7, 2, 3),
        Stem::Cifar => (3, 1, 1),
    };
    let conv = Conv::new(3, 64, k).stride(stride).padding(pad);
    let h = nn.conv2d("conv1", images, conv.init(Init::KaimingNormalFanOut))?;
    let h = nn.batch_norm("bn1", h, 64)?;
    let h = nn.scope("relu", |nn| nn.builder().relu(h))?;
    match stem {
        Stem::ImageNet => nn.scope("maxpool", |nn| {
            nn.builder().max_pool2d(h, Pool2dParams::new(3, 2, 1))
        }),
        Stem::Cifar => Ok(h),
    }
}

/// A conv (Kaiming-normal, fan out, no bias) and its batch norm: `conv{i}` and `bn{i}`,
/// or the shortcut's `downsample.0` and `downsample.1`.
fn conv_bn(
    nn: &mut Layers,
    x: ValueId,
    (conv, bn): (&str, &str),
    (cin, cout, k): (usize, usize, usize),
    stride: usize,
) -> wick_graph::Result<ValueId> {
    let c = Conv::new(cin, cout, k).stride(stride).padding(k / 2);
    let h = nn.conv2d(conv, x, c.init(Init::KaimingNormalFanOut))?;
    nn.batch_norm(bn, h, cout)
}

/// One residual block (basic or bottleneck) inside its layer scope (`layer1.0`): the
/// branch, the shortcut, the residual add (the block's own op, torchvision's
/// `out += identity`) and the last ReLU.
fn block(
    nn: &mut Layers,
    x: ValueId,
    depth: Depth,
    (inplanes, planes): (usize, usize),
    stride: usize,
) -> wick_graph::Result<ValueId> {
    let relu = |nn: &mut Layers, h| nn.scope("relu", |nn| nn.builder().relu(h));
    let out_planes = planes * depth.expansion();
    let out = if depth.bottleneck() {
        let h = conv_bn(nn, x, ("conv1", "bn1"), (inplanes, planes, 1), 1)?;
        let h = relu(nn, h)?;
        let h = conv_bn(nn, h, ("conv2", "bn2"), (planes, planes, 3), stride)?;
        let h = relu(nn, h)?;
        conv_bn(nn, h, ("conv3", "bn3"), (planes, out_planes, 1), 1)?
    } else {
        let h = conv_bn(nn, x, ("conv1", "bn1"), (inplanes, planes, 3), stride)?;
        let h = relu(nn, h)?;
        conv_bn(nn, h, ("conv2", "bn2"), (planes, planes, 3), 1)?
    };
    let shortcut = if stride != 1 || inplanes != out_planes {
        let names = ("downsample.0", "downsample.1");
        conv_bn(nn, x, names, (inplanes, out_planes, 1), stride)?
    } else {
        x
    };
    let sum = nn.builder().add(out, shortcut)?;
    relu(nn, sum)
}

/// Records a ResNet of `depth` for `config` (its stem and classes) with torchvision's
/// op order (SINGA's documented listing) and `state_dict` names (`conv1.weight`,
/// `layer1.0.downsample.0.weight`, `fc.bias`, ...).
fn record(
    nn: &mut Layers,
    images: ValueId,
    config: &ModelConfig,
    depth: Depth,
) -> wick_graph::Result<ValueId> {
    let mut x = stem(nn, images, config.stem)?;
    let mut inplanes = 64;
    for (stage, &blocks) in depth.blocks().iter().enumerate() {
        let planes = 64 << stage;
        for i in 0..blocks {
            let stride = if stage > 0 && i == 0 { 2 } else { 1 };
            let path = format!("layer{}.{i}", stage + 1);
            x = nn.scope(&path, |nn| block(nn, x, depth, (inplanes, planes), stride))?;
            inplanes = planes * depth.expansion();
        }
    }
    let h = nn.scope("avgpool", |nn| nn.builder().global_avg_pool(x))?;
    let h = nn.scope("flatten", |nn| nn.builder().flatten(h))?;
    nn.linear("fc", h, inplanes, config.num_classes, Init::LinearDefault)
}

/// A ResNet's weights as torchvision makes them, drawn in state-dict order from one
/// generator: Kaiming-normal convolutions (fan out, relu gain), batch-norm weight 1 and
/// bias 0, running mean 0 and variance 1, and `nn.Linear`'s default (uniform within
/// ±1/sqrt(fan_in) for weight and bias). f32, on the CPU.
pub fn resnet_init(specs: &[TensorSpec], seed: u64) -> Result<HashMap<String, Tensor>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = HashMap::new();
    for spec in specs.iter().cloned() {
        let n: usize = spec.shape.iter().product();
        let data: Vec<f32> = match spec.role {
            TensorRole::ConvWeight => {
                let fan_out = spec.shape[0] * spec.shape[2] * spec.shape[3];
                let normal = Normal::new(0.0, (2.0 / fan_out as f32).sqrt())
                    .map_err(|e| ModelError::Config(format!("{}: {e}", spec.name)))?;
                (0..n).map(|_| normal.sample(&mut rng)).collect()
            }
            TensorRole::FcWeight | TensorRole::FcBias => {
                let fan_in = spec.fan_in as f32;
                let bound = 1.0 / fan_in.sqrt();
                let uniform = Uniform::new(-bound, bound)
                    .map_err(|e| ModelError::Config(format!("{}: {e}", spec.name)))?;
                (0..n).map(|_| uniform.sample(&mut rng)).collect()
            }
            TensorRole::BnWeight | TensorRole::RunningVar => vec![1.0; n],
            // A ResNet has no convolution biases or layer scales.
            TensorRole::BnBias
            | TensorRole::RunningMean
            | TensorRole::ConvBias
            | TensorRole::LayerScale => {
                vec![0.0; n]
            }
        };
        out.insert(spec.name, Tensor::from_vec(data, spec.shape, &Device::Cpu)?);
    }
    Ok(out)
}
