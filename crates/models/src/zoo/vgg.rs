//! VGG-11 and VGG-16 with batch norm (Simonyan & Zisserman 2014) as torchvision defines
//! them (`vgg.py`): 3x3 convolutions with bias, batch norm and ReLU, 2x2 max pools, an
//! adaptive 7x7 average pool and a three-layer classifier with dropout.

use wick_graph::ValueId;
use wick_ops::Pool2dParams;

use crate::model::{Architecture, ModelConfig};
use crate::nn::{Conv, Init, Layers};

/// A layer of the feature extractor: a convolution to this many channels, or a max pool.
#[derive(Clone, Copy)]
enum Feature {
    Conv(usize),
    Pool,
}

use Feature::{Conv as C, Pool as M};

#[rustfmt::skip]
const VGG11: [Feature; 13] = [C(64), M, C(128), M, C(256), C(256), M, C(512), C(512), M, C(512), C(512), M];
#[rustfmt::skip]
const VGG16: [Feature; 18] = [C(64), C(64), M, C(128), C(128), M, C(256), C(256), C(256), M, C(512), C(512), C(512), M, C(512), C(512), C(512), M];

/// VGG (`deep`: VGG-16, else VGG-11) with batch norm: forward pass of `x`; returns the logits.
pub fn vgg_bn(
    nn: &mut Layers,
    x: ValueId,
    cfg: &ModelConfig,
    deep: bool,
) -> wick_graph::Result<ValueId> {
    let layers: &[Feature] = if deep { &VGG16 } else { &VGG11 };
    let (mut h, mut c, mut i) = (x, 3, 0);
    for f in layers {
        match *f {
            Feature::Conv(out) => {
                let conv = Conv::new(c, out, 3).padding(1).bias();
                h = nn.conv2d(&format!("features.{i}"), h, conv)?;
                h = nn.batch_norm(&format!("features.{}", i + 1), h, out)?;
                h = nn.scope(&format!("features.{}", i + 2), |nn| nn.builder().relu(h))?;
                (c, i) = (out, i + 3);
            }
            Feature::Pool => {
                let p = Pool2dParams::new(2, 2, 0);
                h = nn.scope(&format!("features.{i}"), |nn| nn.builder().max_pool2d(h, p))?;
                i += 1;
            }
        }
    }
    let h = nn.scope("avgpool", |nn| nn.builder().adaptive_avg_pool2d(h, 7, 7))?;
    let h = nn.builder().flatten(h)?;
    let init = Init::Normal(0.01);
    let h = nn.linear("classifier.0", h, 512 * 7 * 7, 4096, init)?;
    let h = nn.scope("classifier.1", |nn| nn.builder().relu(h))?;
    let h = nn.scope("classifier.2", |nn| nn.builder().dropout(h, cfg.dropout))?;
    let h = nn.linear("classifier.3", h, 4096, 4096, init)?;
    let h = nn.scope("classifier.4", |nn| nn.builder().relu(h))?;
    let h = nn.scope("classifier.5", |nn| nn.builder().dropout(h, cfg.dropout))?;
    nn.linear("classifier.6", h, 4096, cfg.num_classes, init)
}

/// `vgg11_bn`.
pub const VGG11_BN: Architecture =
    Architecture::new("vgg11_bn", |nn, x, c| vgg_bn(nn, x, c, false)).with_dropout(0.5);

/// `vgg16_bn`.
pub const VGG16_BN: Architecture =
    Architecture::new("vgg16_bn", |nn, x, c| vgg_bn(nn, x, c, true)).with_dropout(0.5);
