//! The distinct convolutions of a ResNet, as wick builds it: the shapes the convolution
//! benches time.

use candle_core::DType;
use wick::graph::nodes::conv::Conv2d;
use wick::graph::{GraphBuilder, Mode};
use wick::models::{Depth, ResNetConfig, Stem};
use wick::ops::Conv2dParams;

/// One distinct convolution: input shape, weight shape, settings, and how many of the
/// network's convolutions have them.
pub struct ResNetConv {
    pub input: [usize; 4],
    pub weight: [usize; 4],
    pub params: Conv2dParams,
    #[allow(dead_code)] // read by conv_passes, not by conv_layers
    pub count: usize,
}

impl ResNetConv {
    /// `cin->cout kxk sS @H`, as the benches name it.
    pub fn name(&self) -> String {
        let ([_, cin, h, _], [cout, _, k, _]) = (self.input, self.weight);
        format!("{cin}->{cout} {k}x{k} s{} @{h}", self.params.stride[0])
    }
}

/// Every distinct convolution of the ResNet `depth` with `stem` at `batch` images of
/// `image` pixels, in network order.
pub fn resnet_convs(depth: Depth, stem: Stem, batch: usize, image: usize) -> Vec<ResNetConv> {
    let config = ResNetConfig::new(depth, stem, 10).expect("valid config");
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let images = b
        .input("images", &[batch, 3, image, image], DType::F32)
        .expect("input");
    config.forward(&mut b, images).expect("resnet records");
    let g = b.finish();
    let mut out: Vec<ResNetConv> = Vec::new();
    for n in g.nodes() {
        if let Some(Conv2d { params, .. }) = n.op_as::<Conv2d>() {
            let shape = |i: usize| -> [usize; 4] {
                g.value(n.inputs[i]).shape.clone().try_into().expect("4-D")
            };
            let (input, weight) = (shape(0), shape(1));
            match out
                .iter_mut()
                .find(|c| (c.input, c.weight, c.params) == (input, weight, *params))
            {
                Some(c) => c.count += 1,
                None => out.push(ResNetConv {
                    input,
                    weight,
                    params: *params,
                    count: 1,
                }),
            }
        }
    }
    out
}
