//! ConvNeXt-Tiny (Liu et al. 2022) as torchvision defines it (`convnext.py`): a 4x4 patch
//! stem, blocks of a 7x7 depthwise convolution, channels-last layer norm, an MLP with GELU
//! and a layer scale, and layer-norm-then-2x2-convolution downsampling.

use wick_graph::ValueId;

use crate::model::{Architecture, ModelConfig};
use crate::nn::{Conv, Init, Layers, TensorRole};

/// Stages: channels in, channels out (after the stage's downsampling), blocks.
const TINY: [(usize, Option<usize>, usize); 4] = [
    (96, Some(192), 3),
    (192, Some(384), 3),
    (384, Some(768), 9),
    (768, None, 3),
];
const EPS: f64 = 1e-6;
const LAYER_SCALE: f64 = 1e-6;

/// ConvNeXt-Tiny's forward pass of `x`; returns the logits.
pub fn convnext_tiny(
    nn: &mut Layers,
    x: ValueId,
    cfg: &ModelConfig,
) -> wick_graph::Result<ValueId> {
    let init = Init::TruncNormal(0.02);
    let mut h = nn.scope("features.0", |nn| {
        let h = nn.conv2d("0", x, Conv::new(3, 96, 4).stride(4).bias().init(init))?;
        nn.layer_norm2d("1", h, 96, EPS)
    })?;
    let total: usize = TINY.iter().map(|s| s.2).sum();
    let mut block_id = 0;
    let mut index = 1;
    for &(dim, out, blocks) in &TINY {
        for j in 0..blocks {
            let sd = cfg.stochastic_depth * block_id as f64 / (total as f64 - 1.0);
            let path = format!("features.{index}.{j}");
            h = nn.scope(&path, |nn| cn_block(nn, h, dim, sd))?;
            block_id += 1;
        }
        index += 1;
        if let Some(out) = out {
            h = nn.scope(&format!("features.{index}"), |nn| {
                let y = nn.layer_norm2d("0", h, dim, EPS)?;
                nn.conv2d("1", y, Conv::new(dim, out, 2).stride(2).bias().init(init))
            })?;
            index += 1;
        }
    }
    let h = nn.scope("avgpool", |nn| nn.builder().global_avg_pool(h))?;
    let h = nn.layer_norm2d("classifier.0", h, 768, EPS)?;
    let h = nn.builder().flatten(h)?;
    nn.linear("classifier.2", h, 768, cfg.num_classes, init)
}

/// One `CNBlock` (inside its layer).
fn cn_block(
    nn: &mut Layers,
    x: ValueId,
    dim: usize,
    stochastic_depth: f64,
) -> wick_graph::Result<ValueId> {
    let init = Init::TruncNormal(0.02);
    let dw = Conv::new(dim, dim, 7)
        .padding(3)
        .groups(dim)
        .bias()
        .init(init);
    let h = nn.conv2d("block.0", x, dw)?;
    let h = nn.builder().permute(h, &[0, 2, 3, 1])?;
    let h = nn.layer_norm("block.2", h, dim, EPS)?;
    let h = nn.linear("block.3", h, dim, 4 * dim, init)?;
    let h = nn.scope("block.4", |nn| nn.builder().gelu(h))?;
    let h = nn.linear("block.5", h, 4 * dim, dim, init)?;
    let h = nn.builder().permute(h, &[0, 3, 1, 2])?;
    let scale = nn.param(
        "layer_scale",
        &[dim, 1, 1],
        TensorRole::LayerScale,
        Init::Constant(LAYER_SCALE),
        0,
    )?;
    let h = nn.builder().mul(scale, h)?;
    let h = nn.scope("stochastic_depth", |nn| {
        nn.builder().stochastic_depth(h, stochastic_depth)
    })?;
    nn.builder().add(h, x)
}

/// `convnext_tiny`.
pub const CONVNEXT_TINY: Architecture =
    Architecture::new("convnext_tiny", convnext_tiny).with_stochastic_depth(0.1);
