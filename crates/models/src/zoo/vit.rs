//! The Vision Transformers (Dosovitskiy et al. 2021) as torchvision defines them
//! (`vision_transformer.py`): a patch-embedding convolution, a class token, a learned
//! position embedding for the model's `image_size`, pre-norm encoder blocks of
//! multi-head self-attention (the fused attention op) and a GELU MLP, a final layer norm
//! and a linear head on the class token. State-dict names and initialisation are
//! torchvision's (`encoder.layers.encoder_layer_0.self_attention.in_proj_weight`, ...).

use wick_graph::{GraphError, ValueId};

use crate::model::{Architecture, ModelConfig};
use crate::nn::{Conv, Init, Layers, TensorRole};

/// One ViT's sizes, torchvision's builder arguments.
struct VitSize {
    patch: usize,
    layers: usize,
    heads: usize,
    hidden: usize,
    mlp: usize,
}

const B_16: VitSize = VitSize {
    patch: 16,
    layers: 12,
    heads: 12,
    hidden: 768,
    mlp: 3072,
};
const B_32: VitSize = VitSize {
    patch: 32,
    layers: 12,
    heads: 12,
    hidden: 768,
    mlp: 3072,
};
const L_16: VitSize = VitSize {
    patch: 16,
    layers: 24,
    heads: 16,
    hidden: 1024,
    mlp: 4096,
};
/// ViT-Ti/16 (DeiT-Ti; timm's `vit_tiny_patch16_224`), which torchvision builds as
/// `VisionTransformer(image_size, 16, 12, 3, 192, 768)` but does not name.
const TI_16: VitSize = VitSize {
    patch: 16,
    layers: 12,
    heads: 3,
    hidden: 192,
    mlp: 768,
};
const EPS: f64 = 1e-6;

fn vision_transformer(
    nn: &mut Layers,
    x: ValueId,
    cfg: &ModelConfig,
    v: &VitSize,
) -> wick_graph::Result<ValueId> {
    let shape = nn.builder().shape(x).to_vec();
    let (n, h, w) = (shape[0], shape[2], shape[3]);
    if h != cfg.image_size || w != cfg.image_size {
        return Err(GraphError::Usage(format!(
            "{} is built for {s}x{s} images (torchvision's image_size), got {w}x{h} (width x height)",
            cfg.name(),
            s = cfg.image_size
        )));
    }
    let tokens = (h / v.patch) * (w / v.patch);
    let fan_in = 3 * v.patch * v.patch;
    let proj = Conv::new(3, v.hidden, v.patch)
        .stride(v.patch)
        .bias()
        .init(Init::TruncNormal((1.0 / fan_in as f64).sqrt()));
    let p = nn.conv2d("conv_proj", x, proj)?;
    let b = nn.builder();
    let p = b.reshape(p, &[n, v.hidden, tokens])?;
    let p = b.permute(p, &[0, 2, 1])?;
    let class = nn.param(
        "class_token",
        &[1, 1, v.hidden],
        TensorRole::FcWeight,
        Init::Constant(0.0),
        0,
    )?;
    let b = nn.builder();
    let class = b.expand(class, &[n as isize, -1, -1])?;
    let mut x = b.concat(&[class, p], 1)?;
    x = nn.scope("encoder", |nn| {
        let pos = nn.param(
            "pos_embedding",
            &[1, tokens + 1, v.hidden],
            TensorRole::FcWeight,
            Init::Normal(0.02),
            0,
        )?;
        let mut x = nn.builder().broadcast_add(x, pos)?;
        for i in 0..v.layers {
            x = nn.scope(&format!("layers.encoder_layer_{i}"), |nn| {
                encoder_block(nn, x, v)
            })?;
        }
        nn.layer_norm("ln", x, v.hidden, EPS)
    })?;
    let b = nn.builder();
    let first = b.narrow(x, 1, 0, 1)?;
    let first = b.squeeze(first, 1)?;
    let zeros = Init::Constant(0.0);
    nn.linear_with(
        "heads.head",
        first,
        v.hidden,
        cfg.num_classes,
        zeros,
        Some(zeros),
    )
}

/// One `EncoderBlock`: `x + attention(ln_1(x))`, then `+ mlp(ln_2(·))`.
fn encoder_block(nn: &mut Layers, x: ValueId, v: &VitSize) -> wick_graph::Result<ValueId> {
    let y = nn.layer_norm("ln_1", x, v.hidden, EPS)?;
    let y = nn.multi_head_attention("self_attention", y, v.hidden, v.heads, None)?;
    let x = nn.builder().add(y, x)?;
    let y = nn.layer_norm("ln_2", x, v.hidden, EPS)?;
    let xavier =
        |fan_in: usize, fan_out: usize| Init::Uniform((6.0 / (fan_in + fan_out) as f64).sqrt());
    let bias = Some(Init::Normal(1e-6));
    let y = nn.linear_with("mlp.0", y, v.hidden, v.mlp, xavier(v.hidden, v.mlp), bias)?;
    let y = nn.scope("mlp.1", |nn| nn.builder().gelu(y))?;
    let y = nn.linear_with("mlp.3", y, v.mlp, v.hidden, xavier(v.mlp, v.hidden), bias)?;
    nn.builder().add(y, x)
}

fn vit_ti_16(nn: &mut Layers, x: ValueId, cfg: &ModelConfig) -> wick_graph::Result<ValueId> {
    vision_transformer(nn, x, cfg, &TI_16)
}

fn vit_b_16(nn: &mut Layers, x: ValueId, cfg: &ModelConfig) -> wick_graph::Result<ValueId> {
    vision_transformer(nn, x, cfg, &B_16)
}

fn vit_b_32(nn: &mut Layers, x: ValueId, cfg: &ModelConfig) -> wick_graph::Result<ValueId> {
    vision_transformer(nn, x, cfg, &B_32)
}

fn vit_l_16(nn: &mut Layers, x: ValueId, cfg: &ModelConfig) -> wick_graph::Result<ValueId> {
    vision_transformer(nn, x, cfg, &L_16)
}

/// `vit_ti_16`: ViT-Tiny, 16x16 patches (5.7M parameters at 224x224; not a torchvision
/// builder name, but its `VisionTransformer` class with these sizes and the same state-dict
/// names).
pub const VIT_TI_16: Architecture = Architecture::new("vit_ti_16", vit_ti_16).with_patch(16);
/// `vit_b_16`: ViT-Base, 16x16 patches.
pub const VIT_B_16: Architecture = Architecture::new("vit_b_16", vit_b_16).with_patch(16);
/// `vit_b_32`: ViT-Base, 32x32 patches.
pub const VIT_B_32: Architecture = Architecture::new("vit_b_32", vit_b_32).with_patch(32);
/// `vit_l_16`: ViT-Large, 16x16 patches.
pub const VIT_L_16: Architecture = Architecture::new("vit_l_16", vit_l_16).with_patch(16);
