//! The distinct convolutions of a model of wick's registry, as wick builds it: the shapes
//! the convolution benches time.

use candle_core::DType;
use wick::graph::nodes::conv::Conv2d;
use wick::graph::{GraphBuilder, Mode};
use wick::models::{ModelConfig, Stem};
use wick::ops::Conv2dParams;

/// One distinct convolution: input shape, weight shape, settings, and how many of the
/// network's convolutions have them.
pub struct ModelConv {
    pub input: [usize; 4],
    pub weight: [usize; 4],
    pub params: Conv2dParams,
    #[allow(dead_code)] // read by conv_passes, not by conv_layers
    pub count: usize,
}

impl ModelConv {
    /// `cin->cout kxk sS @H`, as the benches name it; a grouped convolution's channels
    /// end in its group count (`96->96g96`, a depthwise one).
    pub fn name(&self) -> String {
        let ([_, cin, h, _], [cout, _, k, _]) = (self.input, self.weight);
        let groups = match self.params.groups {
            1 => String::new(),
            g => format!("g{g}"),
        };
        format!(
            "{cin}->{cout}{groups} {k}x{k} s{} @{h}",
            self.params.stride[0]
        )
    }
}

/// Every distinct convolution of the registered model `name` (`resnet18`,
/// `mobilenet_v2`, ...) with `stem` at `batch` images of `image` pixels, in network order.
pub fn model_convs(name: &str, stem: Stem, batch: usize, image: usize) -> Vec<ModelConv> {
    let config = ModelConfig::by_name(name, stem, Some(10))
        .and_then(|c| c.with_image_size(image))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let images = b
        .input("images", &[batch, 3, image, image], DType::F32)
        .expect("input");
    config.forward(&mut b, images).expect("the model records");
    let g = b.finish();
    let mut out: Vec<ModelConv> = Vec::new();
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
                None => out.push(ModelConv {
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
