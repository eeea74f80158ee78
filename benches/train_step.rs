//! Whole training steps and inference, wick next to candle's own autograd doing the same
//! work in the same run, plus wick with the profiler at verbosity 2 (its overhead):
//! ResNet-18 CIFAR (batch 8), ResNet-50 224x224 (batch 2), ResNet-50 inference (batch 1).
//!
//! `cargo bench --bench train_step`

mod candle_resnet;

use std::time::Duration;

use candle_core::{Device, Tensor};
use candle_resnet::CandleResNet;
use criterion::{criterion_group, criterion_main, Criterion};
use wick::models::data::{BatchSource, SyntheticImages};
use wick::models::{Depth, ResNetConfig, Session, Stem, TrainOptions, WeightInit};
use wick::ops::SgdParams;
use wick::profiler::TimeProfiler;

/// Transparent huge pages under every big block (see `wick::allocator`).
#[global_allocator]
static ALLOC: wick::allocator::HugePageAlloc = wick::allocator::HugePageAlloc;

const SGD: SgdParams = SgdParams {
    lr: 0.01,
    momentum: 0.9,
    weight_decay: 5e-4,
    dampening: 0.0,
    nesterov: false,
};

fn train(c: &mut Criterion, name: &str, config: ResNetConfig, batch: usize, size: usize) {
    let dev = Device::Cpu;
    let (x, y) = SyntheticImages::new(10, batch, size, 0)
        .and_then(|mut s| s.next_batch())
        .expect("batch");
    let y_u32 = y.to_dtype(candle_core::DType::U32).expect("labels");
    let mut group = c.benchmark_group(format!("train_step {name}"));
    for verbosity in [0u8, 2] {
        let opts = TrainOptions::from(SGD);
        let mut s = Session::training(config, batch, size, opts, &dev).expect("session");
        s.init_weights(WeightInit::Torchvision(0)).expect("init");
        if verbosity > 0 {
            s.executor_mut()
                .add_hook(TimeProfiler::new(verbosity, 0))
                .expect("hook");
        }
        group.bench_function(format!("wick (profiler verbosity {verbosity})"), |b| {
            b.iter(|| s.step(&x, &y).expect("step"))
        });
    }
    let mut candle = CandleResNet::new(&config, &dev).expect("candle model");
    group.bench_function("candle autograd", |b| {
        b.iter(|| {
            candle
                .step(&x, &y_u32, SGD.lr, SGD.momentum, SGD.weight_decay)
                .expect("candle step")
        })
    });
    group.finish();
}

fn bench(c: &mut Criterion) {
    wick::prepare_process();
    let r18 = ResNetConfig::new(Depth::R18, Stem::Cifar, 10).expect("config");
    let r50 = ResNetConfig::new(Depth::R50, Stem::ImageNet, 1000).expect("config");
    train(c, "resnet18 cifar b8 32x32", r18, 8, 32);
    train(c, "resnet50 b2 224x224", r50, 2, 224);

    let dev = Device::Cpu;
    let x = Tensor::randn(0f32, 1.0, (1, 3, 224, 224), &dev).expect("image");
    let mut group = c.benchmark_group("inference resnet50 b1 224x224");
    let mut s = Session::inference(r50, 1, 224, &dev).expect("session");
    s.init_weights(WeightInit::Torchvision(0)).expect("init");
    group.bench_function("wick", |b| b.iter(|| s.forward(&x).expect("forward")));
    let candle = CandleResNet::new(&r50, &dev).expect("candle model");
    group.bench_function("candle", |b| {
        b.iter(|| candle.forward(&x, false).expect("candle forward"))
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(Duration::from_secs(2)).measurement_time(Duration::from_secs(8));
    targets = bench
}
criterion_main!(benches);
