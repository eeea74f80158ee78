//! A small residual conv net written once against the builder, used by the graph tests.
#![allow(dead_code)]

pub mod ranks;

use candle_core::{DType, Device, Tensor};
use wick_graph::{Executor, GraphBuilder, Mode, Result, ValueId, ValueKind};
use wick_ops::{BatchNorm2dParams, Conv2dParams, SgdParams};

/// Handles to the interesting values of the small net.
pub struct SmallNet {
    pub images: ValueId,
    pub labels: ValueId,
    pub logits: ValueId,
    pub loss: ValueId,
}

/// conv-bn-relu-maxpool, a residual block (conv-bn-relu-conv-bn + add + relu), global
/// average pool, flatten, linear, cross-entropy.
pub fn small_net(
    b: &mut GraphBuilder,
    dtype: DType,
    batch: usize,
    size: usize,
    classes: usize,
) -> Result<SmallNet> {
    let c = 6;
    let images = b.input("images", &[batch, 3, size, size], dtype)?;
    let labels = b.input("labels", &[batch], DType::U32)?;
    let conv_bn = |b: &mut GraphBuilder,
                   x: ValueId,
                   name: &str,
                   cin: usize,
                   stride: usize|
     -> Result<ValueId> {
        let w = b.param(&format!("{name}.weight"), &[c, cin, 3, 3])?;
        let h = b.in_layer(name, |b| b.conv2d(x, w, None, Conv2dParams::new(stride, 1)))?;
        let g = b.param(&format!("{name}.bn.weight"), &[c])?;
        let beta = b.param(&format!("{name}.bn.bias"), &[c])?;
        let rm = b.state(&format!("{name}.bn.running_mean"), &[c])?;
        let rv = b.state(&format!("{name}.bn.running_var"), &[c])?;
        let bn = BatchNorm2dParams::default();
        b.in_layer(&format!("{name}.bn"), |b| {
            b.batch_norm(h, g, beta, rm, rv, bn)
        })
    };
    // Layers as a model records them (module paths); `flatten` is left outside any layer.
    let h = conv_bn(b, images, "stem", 3, 1)?;
    let h = b.in_layer("stem.relu", |b| b.relu(h))?;
    let h = b.in_layer("maxpool", |b| {
        b.max_pool2d(h, wick_ops::Pool2dParams::new(3, 2, 1))
    })?;
    let r = conv_bn(b, h, "block.conv1", c, 1)?;
    let r = b.in_layer("block", |b| b.in_layer("relu", |b| b.relu(r)))?;
    let r = conv_bn(b, r, "block.conv2", c, 1)?;
    let h = b.in_layer("block", |b| b.add(r, h))?;
    let h = b.in_layer("block.relu", |b| b.relu(h))?;
    let h = b.in_layer("avgpool", |b| b.global_avg_pool(h))?;
    let h = b.flatten(h)?;
    let fw = b.param("fc.weight", &[classes, c])?;
    let fb = b.param("fc.bias", &[classes])?;
    let logits = b.in_layer("fc", |b| b.linear(h, fw, Some(fb)))?;
    let loss = b.in_layer("loss", |b| b.cross_entropy(logits, labels))?;
    b.output(loss);
    b.output(logits);
    Ok(SmallNet {
        images,
        labels,
        logits,
        loss,
    })
}

pub use wick_ops::compare::uniform;

/// Sets every parameter to small random values, running means to 0 and variances to 1.
pub fn init(exec: &mut Executor, dtype: DType, seed: u64) {
    let values: Vec<_> = exec.graph().values().to_vec();
    for (i, v) in values.iter().enumerate() {
        let n: usize = v.shape.iter().product();
        let data = match v.kind {
            ValueKind::Param if v.name.ends_with("bn.weight") => uniform(seed + i as u64, n)
                .iter()
                .map(|x| 1.0 + 0.2 * x)
                .collect(),
            ValueKind::Param => uniform(seed + i as u64, n)
                .iter()
                .map(|x| 0.5 * x)
                .collect(),
            ValueKind::State if v.name.ends_with("running_mean") => vec![0.0; n],
            ValueKind::State if v.name.ends_with("running_var") => vec![1.0; n],
            _ => continue,
        };
        let t = Tensor::from_vec(data, v.shape.as_slice(), &Device::Cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        exec.set(&v.name, &t).unwrap();
    }
}

/// Builds the small net in `mode` (with backward and, optionally, SGD in train mode).
pub fn build(
    mode: Mode,
    dtype: DType,
    batch: usize,
    size: usize,
    classes: usize,
) -> (wick_graph::Graph, SmallNet, Option<wick_graph::Gradients>) {
    let mut b = GraphBuilder::new(mode, dtype);
    let net = small_net(&mut b, dtype, batch, size, classes).unwrap();
    let grads = if mode == Mode::Train {
        Some(b.backward(net.loss).unwrap())
    } else {
        None
    };
    (b.finish(), net, grads)
}

/// The small net (`batch` images of `size`x`size`, `classes` classes) as a training graph
/// in `dtype` with `sgd` updates.
pub fn small_training_graph(
    dtype: DType,
    batch: usize,
    size: usize,
    classes: usize,
    sgd: SgdParams,
) -> wick_graph::Graph {
    let mut b = GraphBuilder::new(Mode::Train, dtype);
    let net = small_net(&mut b, dtype, batch, size, classes).unwrap();
    let grads = b.backward(net.loss).unwrap();
    b.sgd(&grads, sgd).unwrap();
    b.finish()
}

/// The small net (batch 2, `size`x`size` images, 3 classes) as an f32 training graph with
/// `sgd` updates on the CPU, initialised by [`init`] (seed 1), its images all `pixel` and
/// its labels `[0, 1]`.
pub fn small_train_executor(size: usize, sgd: SgdParams, pixel: f64) -> Executor {
    let graph = small_training_graph(DType::F32, 2, size, 3, sgd);
    let mut exec = Executor::new(graph, &Device::Cpu);
    init(&mut exec, DType::F32, 1);
    let images = Tensor::full(pixel as f32, (2, 3, size, size), &Device::Cpu).unwrap();
    exec.set("images", &images).unwrap();
    exec.set("labels", &Tensor::new(&[0u32, 1], &Device::Cpu).unwrap())
        .unwrap();
    exec
}

/// Asserts that `text` (an error message) mentions each of `words`, naming those missing.
#[track_caller]
pub fn assert_mentions(text: &str, words: &[&str]) {
    let missing: Vec<&&str> = words.iter().filter(|w| !text.contains(**w)).collect();
    assert!(missing.is_empty(), "{missing:?} missing from: {text}");
}
