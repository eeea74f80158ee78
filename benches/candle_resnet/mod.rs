//! The same ResNet training step written with candle's own autograd and candle-nn, for
//! side-by-side benches. candle has no padded max pool and no pool backward when the
//! kernel differs from the stride, so the ImageNet stem's 3x3/2 max pool runs wick's
//! kernels inside a `CustomOp1` (forward and backward); everything else is candle's.

use candle_core::{
    CpuStorage, CustomOp1, DType, Device, Layout, Module, ModuleT, Result, Shape, Storage, Tensor,
    Var,
};
use candle_nn::{BatchNorm, BatchNormConfig, Conv2d, Conv2dConfig, Linear, VarBuilder, VarMap};
use wick::models::{Depth, ResNetConfig, Stem};
use wick::ops::{pool, Pool2dParams};

struct Block {
    convs: Vec<(Conv2d, BatchNorm)>,
    downsample: Option<(Conv2d, BatchNorm)>,
}

/// A ResNet on candle-nn with its variables.
pub struct CandleResNet {
    stem: (Conv2d, BatchNorm),
    imagenet: bool,
    blocks: Vec<Block>,
    fc: Linear,
    vars: Vec<Var>,
    momentum: Vec<Option<Tensor>>,
}

fn conv_bn(
    vb: &VarBuilder,
    name: &str,
    cin: usize,
    cout: usize,
    k: usize,
    stride: usize,
    pad: usize,
) -> Result<(Conv2d, BatchNorm)> {
    let cfg = Conv2dConfig {
        padding: pad,
        stride,
        ..Default::default()
    };
    let conv = candle_nn::conv2d_no_bias(cin, cout, k, cfg, vb.pp(format!("{name}.conv")))?;
    let bn = candle_nn::batch_norm(
        cout,
        BatchNormConfig::default(),
        vb.pp(format!("{name}.bn")),
    )?;
    Ok((conv, bn))
}

struct MaxPoolStem;

fn cpu_tensor(s: &CpuStorage, l: &Layout) -> Result<Tensor> {
    if !l.is_contiguous() || l.start_offset() != 0 {
        candle_core::bail!("the stem pool expects a contiguous input");
    }
    Ok(Tensor::from_storage(
        Storage::Cpu(s.clone()),
        l.shape().clone(),
        candle_core::op::BackpropOp::none(),
        false,
    ))
}

fn storage_of(t: &Tensor) -> Result<CpuStorage> {
    match &*t.storage_and_layout().0 {
        Storage::Cpu(s) => Ok(s.clone()),
        _ => candle_core::bail!("cpu only"),
    }
}

const STEM_POOL: Pool2dParams = Pool2dParams {
    kernel: [3, 3],
    stride: [2, 2],
    padding: [1, 1],
};

impl CustomOp1 for MaxPoolStem {
    fn name(&self) -> &'static str {
        "wick-max-pool"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = cpu_tensor(s, l)?;
        let y = pool::max_pool2d(&x, &STEM_POOL)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?
            .y;
        Ok((storage_of(&y)?, y.shape().clone()))
    }
    fn bwd(&self, arg: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let err = |e: wick::ops::OpError| candle_core::Error::Msg(e.to_string());
        let out = pool::max_pool2d(arg, &STEM_POOL).map_err(err)?;
        Ok(Some(
            pool::max_pool2d_backward(grad, &out.indices, arg.dims(), &STEM_POOL).map_err(err)?,
        ))
    }
}

impl CandleResNet {
    /// A ResNet of `config` with candle-nn's default initialisation.
    pub fn new(config: &ResNetConfig, dev: &Device) -> Result<Self> {
        let map = VarMap::new();
        let vb = VarBuilder::from_varmap(&map, DType::F32, dev);
        let imagenet = config.stem == Stem::ImageNet;
        let stem = if imagenet {
            conv_bn(&vb, "stem", 3, 64, 7, 2, 3)?
        } else {
            conv_bn(&vb, "stem", 3, 64, 3, 1, 1)?
        };
        let bottleneck = matches!(config.depth, Depth::R50 | Depth::R101 | Depth::R152);
        let exp = if bottleneck { 4 } else { 1 };
        let mut blocks = Vec::new();
        let mut inplanes = 64;
        for (stage, &n) in config.depth.blocks().iter().enumerate() {
            let planes = 64 << stage;
            for i in 0..n {
                let stride = if stage > 0 && i == 0 { 2 } else { 1 };
                let p = format!("l{stage}.{i}");
                let convs = if bottleneck {
                    vec![
                        conv_bn(&vb, &format!("{p}.a"), inplanes, planes, 1, 1, 0)?,
                        conv_bn(&vb, &format!("{p}.b"), planes, planes, 3, stride, 1)?,
                        conv_bn(&vb, &format!("{p}.c"), planes, planes * exp, 1, 1, 0)?,
                    ]
                } else {
                    vec![
                        conv_bn(&vb, &format!("{p}.a"), inplanes, planes, 3, stride, 1)?,
                        conv_bn(&vb, &format!("{p}.b"), planes, planes, 3, 1, 1)?,
                    ]
                };
                let downsample = if stride != 1 || inplanes != planes * exp {
                    Some(conv_bn(
                        &vb,
                        &format!("{p}.ds"),
                        inplanes,
                        planes * exp,
                        1,
                        stride,
                        0,
                    )?)
                } else {
                    None
                };
                blocks.push(Block { convs, downsample });
                inplanes = planes * exp;
            }
        }
        let fc = candle_nn::linear(inplanes, config.num_classes, vb.pp("fc"))?;
        let vars = map.all_vars();
        let momentum = vec![None; vars.len()];
        Ok(CandleResNet {
            stem,
            imagenet,
            blocks,
            fc,
            vars,
            momentum,
        })
    }

    /// Logits, with batch statistics when `train`.
    pub fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        let cb = |x: &Tensor, (c, b): &(Conv2d, BatchNorm)| b.forward_t(&c.forward(x)?, train);
        let mut h = cb(x, &self.stem)?.relu()?;
        if self.imagenet {
            h = h.apply_op1(MaxPoolStem)?;
        }
        for block in &self.blocks {
            let mut out = h.clone();
            for (i, layer) in block.convs.iter().enumerate() {
                out = cb(&out, layer)?;
                if i + 1 < block.convs.len() {
                    out = out.relu()?;
                }
            }
            let short = match &block.downsample {
                Some(ds) => cb(&h, ds)?,
                None => h.clone(),
            };
            h = (out + short)?.relu()?;
        }
        let h = h.mean((2, 3))?;
        self.fc.forward(&h)
    }

    /// One training step: forward, cross-entropy, candle's backward, SGD with momentum and
    /// weight decay (PyTorch's rule).
    pub fn step(
        &mut self,
        x: &Tensor,
        labels: &Tensor,
        lr: f64,
        momentum: f64,
        wd: f64,
    ) -> Result<f32> {
        let logits = self.forward(x, true)?;
        let loss = candle_nn::loss::cross_entropy(&logits, labels)?;
        let grads = loss.backward()?;
        for (var, buf) in self.vars.iter().zip(self.momentum.iter_mut()) {
            let Some(g) = grads.get(var.as_tensor()) else {
                continue;
            };
            let d = (g + (var.as_tensor() * wd)?)?;
            let b = match buf.take() {
                None => d,
                Some(b) => ((b * momentum)? + d)?,
            };
            var.set(&(var.as_tensor() - (&b * lr)?)?)?;
            *buf = Some(b);
        }
        loss.to_scalar::<f32>()
    }
}
