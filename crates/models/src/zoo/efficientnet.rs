//! EfficientNet-B0 (Tan & Le 2019) as torchvision defines it (`efficientnet.py`):
//! MBConv blocks with SiLU and squeeze-excitation, stochastic depth growing with depth.

use wick_graph::ValueId;

use super::blocks::{conv_norm_act, squeeze_excitation, Act};
use crate::model::{Architecture, ModelConfig};
use crate::nn::{Conv, Init, Layers};

/// MBConv stages: expansion, kernel, stride, input and output channels, repeats.
const B0: [(usize, usize, usize, usize, usize, usize); 7] = [
    (1, 3, 1, 32, 16, 1),
    (6, 3, 2, 16, 24, 2),
    (6, 5, 2, 24, 40, 2),
    (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3),
    (6, 5, 2, 112, 192, 4),
    (6, 3, 1, 192, 320, 1),
];

/// EfficientNet-B0's forward pass of `x`; returns the logits.
pub fn efficientnet_b0(
    nn: &mut Layers,
    x: ValueId,
    cfg: &ModelConfig,
) -> wick_graph::Result<ValueId> {
    let mut h = conv_norm_act(
        nn,
        "features.0",
        x,
        Conv::new(3, 32, 3).stride(2),
        Act::Silu,
    )?;
    let total: usize = B0.iter().map(|s| s.5).sum();
    let mut block_id = 0;
    for (stage, &(t, k, s, cin0, cout, n)) in B0.iter().enumerate() {
        for i in 0..n {
            let (cin, stride) = if i == 0 { (cin0, s) } else { (cout, 1) };
            let sd = cfg.stochastic_depth * block_id as f64 / total as f64;
            let path = format!("features.{}.{i}", stage + 1);
            h = nn.scope(&path, |nn| mbconv(nn, h, cin, cout, k, stride, t, sd))?;
            block_id += 1;
        }
    }
    let last = 4 * 320;
    h = conv_norm_act(nn, "features.8", h, Conv::new(320, last, 1), Act::Silu)?;
    let h = nn.scope("avgpool", |nn| nn.builder().global_avg_pool(h))?;
    let h = nn.builder().flatten(h)?;
    let h = nn.scope("classifier.0", |nn| nn.builder().dropout(h, cfg.dropout))?;
    let range = 1.0 / (cfg.num_classes as f64).sqrt();
    nn.linear(
        "classifier.1",
        h,
        last,
        cfg.num_classes,
        Init::Uniform(range),
    )
}

/// One MBConv (inside its layer): expansion (unless t = 1), depthwise, squeeze-excitation
/// (a quarter of the input channels), projection; stochastic depth and the input added
/// when the shape is kept.
#[allow(clippy::too_many_arguments)]
fn mbconv(
    nn: &mut Layers,
    x: ValueId,
    cin: usize,
    cout: usize,
    k: usize,
    stride: usize,
    t: usize,
    stochastic_depth: f64,
) -> wick_graph::Result<ValueId> {
    let hidden = cin * t;
    let mut h = x;
    let mut j = 0;
    if hidden != cin {
        h = conv_norm_act(nn, "block.0", h, Conv::new(cin, hidden, 1), Act::Silu)?;
        j = 1;
    }
    let dw = Conv::new(hidden, hidden, k).stride(stride).groups(hidden);
    h = conv_norm_act(nn, &format!("block.{j}"), h, dw, Act::Silu)?;
    let squeeze = (cin / 4).max(1);
    h = squeeze_excitation(
        nn,
        &format!("block.{}", j + 1),
        h,
        hidden,
        squeeze,
        Act::Silu,
        Act::Sigmoid,
    )?;
    h = conv_norm_act(
        nn,
        &format!("block.{}", j + 2),
        h,
        Conv::new(hidden, cout, 1),
        Act::Identity,
    )?;
    if stride == 1 && cin == cout {
        h = nn.scope("stochastic_depth", |nn| {
            nn.builder().stochastic_depth(h, stochastic_depth)
        })?;
        h = nn.builder().add(h, x)?;
    }
    Ok(h)
}

/// `efficientnet_b0`.
pub const EFFICIENTNET_B0: Architecture = Architecture::new("efficientnet_b0", efficientnet_b0)
    .with_dropout(0.2)
    .with_stochastic_depth(0.2);
