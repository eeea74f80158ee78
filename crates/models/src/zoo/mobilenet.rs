//! MobileNetV2 (Sandler et al. 2018) and MobileNetV3 small and large (Howard et al.
//! 2019), as torchvision defines them (`mobilenetv2.py`, `mobilenetv3.py`): module paths,
//! op order, initialisation.

use wick_graph::ValueId;
use wick_ops::BatchNorm2dParams;

use super::blocks::{conv_norm_act, make_divisible, squeeze_excitation, Act};
use crate::model::{Architecture, ModelConfig};
use crate::nn::{Conv, Init, Layers};

/// MobileNetV2's inverted residual settings: expansion t, channels c, repeats n, stride s.
const V2_SETTING: [(usize, usize, usize, usize); 7] = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
];

/// MobileNetV2's forward pass of `x`; returns the logits.
pub fn mobilenet_v2(nn: &mut Layers, x: ValueId, cfg: &ModelConfig) -> wick_graph::Result<ValueId> {
    let mut cin = 32;
    let mut h = conv_norm_act(
        nn,
        "features.0",
        x,
        Conv::new(3, cin, 3).stride(2),
        Act::Relu6,
    )?;
    let mut index = 1;
    for (t, c, n, s) in V2_SETTING {
        for i in 0..n {
            let stride = if i == 0 { s } else { 1 };
            let path = format!("features.{index}");
            h = nn.scope(&path, |nn| inverted_residual_v2(nn, h, cin, c, stride, t))?;
            cin = c;
            index += 1;
        }
    }
    let last = 1280;
    h = conv_norm_act(
        nn,
        &format!("features.{index}"),
        h,
        Conv::new(cin, last, 1),
        Act::Relu6,
    )?;
    classifier_head(nn, h, last, cfg.dropout, cfg.num_classes, "classifier.1")
}

/// One `InvertedResidual` of MobileNetV2 (inside its layer): 1x1 expansion (unless t = 1),
/// 3x3 depthwise, 1x1 projection; the input added when the shape is kept.
fn inverted_residual_v2(
    nn: &mut Layers,
    x: ValueId,
    cin: usize,
    cout: usize,
    stride: usize,
    t: usize,
) -> wick_graph::Result<ValueId> {
    let hidden = cin * t;
    let mut h = x;
    let mut k = 0;
    if t != 1 {
        h = conv_norm_act(nn, "conv.0", h, Conv::new(cin, hidden, 1), Act::Relu6)?;
        k = 1;
    }
    let dw = Conv::new(hidden, hidden, 3).stride(stride).groups(hidden);
    h = conv_norm_act(nn, &format!("conv.{k}"), h, dw, Act::Relu6)?;
    h = nn.conv2d(&format!("conv.{}", k + 1), h, Conv::new(hidden, cout, 1))?;
    h = nn.batch_norm(&format!("conv.{}", k + 2), h, cout)?;
    if stride == 1 && cin == cout {
        h = nn.builder().add(x, h)?;
    }
    Ok(h)
}

/// Global average, flatten, dropout and the final linear layer (`N(0, 0.01)` weights).
fn classifier_head(
    nn: &mut Layers,
    h: ValueId,
    features: usize,
    dropout: f64,
    classes: usize,
    path: &str,
) -> wick_graph::Result<ValueId> {
    let h = nn.scope("avgpool", |nn| nn.builder().global_avg_pool(h))?;
    let h = nn.builder().flatten(h)?;
    let h = nn.scope("classifier.0", |nn| nn.builder().dropout(h, dropout))?;
    nn.linear(path, h, features, classes, Init::Normal(0.01))
}

/// One MobileNetV3 block setting: input, kernel, expanded, output channels, SE,
/// hardswish, stride.
type V3Block = (usize, usize, usize, usize, bool, bool, usize);

const V3_LARGE: [V3Block; 15] = [
    (16, 3, 16, 16, false, false, 1),
    (16, 3, 64, 24, false, false, 2),
    (24, 3, 72, 24, false, false, 1),
    (24, 5, 72, 40, true, false, 2),
    (40, 5, 120, 40, true, false, 1),
    (40, 5, 120, 40, true, false, 1),
    (40, 3, 240, 80, false, true, 2),
    (80, 3, 200, 80, false, true, 1),
    (80, 3, 184, 80, false, true, 1),
    (80, 3, 184, 80, false, true, 1),
    (80, 3, 480, 112, true, true, 1),
    (112, 3, 672, 112, true, true, 1),
    (112, 5, 672, 160, true, true, 2),
    (160, 5, 960, 160, true, true, 1),
    (160, 5, 960, 160, true, true, 1),
];

const V3_SMALL: [V3Block; 11] = [
    (16, 3, 16, 16, true, false, 2),
    (16, 3, 72, 24, false, false, 2),
    (24, 3, 88, 24, false, false, 1),
    (24, 5, 96, 40, true, true, 2),
    (40, 5, 240, 40, true, true, 1),
    (40, 5, 240, 40, true, true, 1),
    (40, 5, 120, 48, true, true, 1),
    (48, 5, 144, 48, true, true, 1),
    (48, 5, 288, 96, true, true, 2),
    (96, 5, 576, 96, true, true, 1),
    (96, 5, 576, 96, true, true, 1),
];

/// MobileNetV3 (`large` or small)'s forward pass of `x`; returns the logits.
pub fn mobilenet_v3(
    nn: &mut Layers,
    x: ValueId,
    cfg: &ModelConfig,
    large: bool,
) -> wick_graph::Result<ValueId> {
    nn.set_batch_norm(BatchNorm2dParams {
        eps: 1e-3,
        momentum: 0.01,
    });
    let (blocks, last): (&[V3Block], usize) = if large {
        (&V3_LARGE, 1280)
    } else {
        (&V3_SMALL, 1024)
    };
    let mut h = conv_norm_act(
        nn,
        "features.0",
        x,
        Conv::new(3, 16, 3).stride(2),
        Act::Hardswish,
    )?;
    for (i, &(cin, k, exp, cout, se, hs, stride)) in blocks.iter().enumerate() {
        let act = if hs { Act::Hardswish } else { Act::Relu };
        h = nn.scope(&format!("features.{}", i + 1), |nn| {
            let mut y = h;
            let mut j = 0;
            if exp != cin {
                y = conv_norm_act(nn, "block.0", y, Conv::new(cin, exp, 1), act)?;
                j = 1;
            }
            let dw = Conv::new(exp, exp, k).stride(stride).groups(exp);
            y = conv_norm_act(nn, &format!("block.{j}"), y, dw, act)?;
            j += 1;
            if se {
                let squeeze = make_divisible((exp / 4) as f64, 8);
                y = squeeze_excitation(
                    nn,
                    &format!("block.{j}"),
                    y,
                    exp,
                    squeeze,
                    Act::Relu,
                    Act::Hardsigmoid,
                )?;
                j += 1;
            }
            y = conv_norm_act(
                nn,
                &format!("block.{j}"),
                y,
                Conv::new(exp, cout, 1),
                Act::Identity,
            )?;
            if stride == 1 && cin == cout {
                y = nn.builder().add(y, h)?;
            }
            Ok(y)
        })?;
    }
    let cin = blocks[blocks.len() - 1].3;
    let lastconv = 6 * cin;
    let path = format!("features.{}", blocks.len() + 1);
    h = conv_norm_act(nn, &path, h, Conv::new(cin, lastconv, 1), Act::Hardswish)?;
    let h = nn.scope("avgpool", |nn| nn.builder().global_avg_pool(h))?;
    let h = nn.builder().flatten(h)?;
    let h = nn.linear("classifier.0", h, lastconv, last, Init::Normal(0.01))?;
    let h = nn.scope("classifier.1", |nn| nn.builder().hardswish(h))?;
    let h = nn.scope("classifier.2", |nn| nn.builder().dropout(h, cfg.dropout))?;
    nn.linear("classifier.3", h, last, cfg.num_classes, Init::Normal(0.01))
}

/// `mobilenet_v2`.
pub const MOBILENET_V2: Architecture =
    Architecture::new("mobilenet_v2", mobilenet_v2).with_dropout(0.2);

/// `mobilenet_v3_small`.
pub const MOBILENET_V3_SMALL: Architecture = Architecture::new("mobilenet_v3_small", |nn, x, c| {
    mobilenet_v3(nn, x, c, false)
})
.with_dropout(0.2);

/// `mobilenet_v3_large`.
pub const MOBILENET_V3_LARGE: Architecture = Architecture::new("mobilenet_v3_large", |nn, x, c| {
    mobilenet_v3(nn, x, c, true)
})
.with_dropout(0.2);
