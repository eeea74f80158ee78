//! A tiny ViT: 4x4 patches by a strided convolution, a class token expanded over the
//! batch, learned positions, one block, the class token's features to the head.

use candle_core::{DType, Device, Tensor};
use wick::graph::GraphBuilder;
use wick::models::nn::{Conv, Init, Layers, TensorRole};

use crate::{block, Probe, Recorded};

const N: usize = 4;
const DIM: usize = 16;

#[test]
fn a_tiny_vit_with_a_class_token_learns_its_batch() {
    let cpu = Device::Cpu;
    let images: Vec<f32> = (0..N * 3 * 8 * 8)
        .map(|i| ((i * 37) % 17) as f32 / 17.0 - 0.5)
        .collect();
    let feed = [
        (
            "images",
            Tensor::from_vec(images, (N, 3, 8, 8), &cpu).unwrap(),
        ),
        ("labels", Tensor::new(&[0i64, 1, 2, 1], &cpu).unwrap()),
    ];
    let record = |b: &mut GraphBuilder| {
        let images = b.input("images", &[N, 3, 8, 8], DType::F32)?;
        let labels = b.input("labels", &[N], DType::I64)?;
        let mut nn = Layers::new(b);
        let p = nn.conv2d("conv_proj", images, Conv::new(3, DIM, 4).stride(4).bias())?; // [N, D, 2, 2]
        let p = nn.builder().reshape(p, &[N, DIM, 4])?;
        let p = nn.builder().transpose(p, 1, 2)?; // [N, 4 patches, D]
        let cls = nn.param(
            "class_token",
            &[1, 1, DIM],
            TensorRole::FcWeight,
            Init::Constant(0.0),
            DIM,
        )?;
        let cls = nn.builder().expand(cls, &[N as isize, -1, -1])?;
        let x = nn.builder().concat(&[cls, p], 1)?;
        let pos = nn.param(
            "encoder.pos_embedding",
            &[1, 5, DIM],
            TensorRole::FcWeight,
            Init::Normal(0.02),
            DIM,
        )?;
        let x = nn.builder().broadcast_add(x, pos)?;
        let x = block(&mut nn, "encoder.layers.0", x, DIM, 2, None)?;
        let x = nn.layer_norm("encoder.ln", x, DIM, 1e-6)?;
        let cls = nn.builder().narrow(x, 1, 0, 1)?;
        let cls = nn.builder().squeeze(cls, 1)?;
        let logits = nn.linear("heads.head", cls, DIM, 3, Init::LinearDefault)?;
        let specs = nn.into_specs();
        let loss = b.cross_entropy(logits, labels)?;
        Ok(Recorded { loss, specs })
    };
    Probe {
        name: "vit",
        lr: 1e-2,
        steps: 30,
        loss_ratio: 0.3,
        ops: &[
            "Expand",
            "ExpandBackward",
            "Narrow",
            "NarrowBackward",
            "AttentionForward",
        ],
    }
    .check(record, &feed);
}
