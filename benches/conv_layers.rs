//! Per-layer convolution speed at every distinct ResNet-50 conv shape (batch 2, 224x224) and
//! every distinct CIFAR ResNet-18 conv shape (batches 8 and 32, 32x32): forward, input
//! gradient and weight gradient, each next to a plain GEMM of the same FLOP count (M =
//! output channels, N = batch * output pixels, K = input channels * kernel area) through
//! candle's matmul. Criterion's throughput is FLOP/s: read Gelem/s as GFLOP/s.
//!
//! 3x3 stride-1 layers also run their forward and input gradient with im2col + GEMM only
//! (`forward_im2col`, `input_grad_im2col`), beside the automatic choice (Winograd's
//! F(2x2, 3x3) there); FLOP/s are the direct convolution's FLOPs over the time.
//!
//! `cargo bench --bench conv_layers` (`-- 'resnet18'`, `-- 'b32 512->512'` or `-- '@8 '` to
//! filter).

mod model_convs;

use candle_core::{Device, Tensor};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use model_convs::model_convs;
use std::time::Duration;
use wick::models::Stem;
use wick::ops::conv;

/// Transparent huge pages under every big block (see `wick::allocator`).
#[global_allocator]
static ALLOC: wick::allocator::HugePageAlloc = wick::allocator::HugePageAlloc;

fn bench(c: &mut Criterion) {
    wick::allocator::keep_freed_memory();
    let dev = Device::Cpu;
    let models = [
        ("resnet50 b2", "resnet50", Stem::ImageNet, 2, 224),
        ("resnet18-cifar b8", "resnet18", Stem::Cifar, 8, 32),
        ("resnet18-cifar b32", "resnet18", Stem::Cifar, 32, 32),
    ];
    let shapes = models
        .into_iter()
        .flat_map(|(model, name, stem, batch, image)| {
            model_convs(name, stem, batch, image)
                .into_iter()
                .map(move |layer| (model, layer))
        });
    for (model, layer) in shapes {
        let (x_shape, w_shape, p) = (layer.input, layer.weight, layer.params);
        let [n, cin, _, _] = x_shape;
        let [cout, _, k, _] = w_shape;
        let name = format!("{model} {} ", layer.name());
        let x = Tensor::randn(0f32, 1.0, x_shape.as_slice(), &dev).expect("x");
        let w = Tensor::randn(0f32, 0.05, w_shape.as_slice(), &dev).expect("w");
        let out = p.output_shape(&x_shape, &w_shape).expect("shape");
        let gy = Tensor::randn(0f32, 1.0, out.as_slice(), &dev).expect("grad");
        let flops = p.flops(&x_shape, &w_shape);
        // The plain GEMM with the convolution's dimensions.
        let (m, nn, kk) = (cout, n * out[2] * out[3], cin * k * k);
        let a = Tensor::randn(0f32, 1.0, (m, kk), &dev).expect("a");
        let bm = Tensor::randn(0f32, 1.0, (kk, nn), &dev).expect("b");

        let mut group = c.benchmark_group(format!("conv {name}"));
        group.throughput(Throughput::Elements(flops));
        group.bench_function(BenchmarkId::from_parameter("forward"), |bch| {
            bch.iter(|| conv::conv2d(&x, &w, None, &p).expect("forward"))
        });
        group.bench_function(BenchmarkId::from_parameter("input_grad"), |bch| {
            bch.iter(|| conv::conv2d_backward_data(&gy, &w, &x_shape, &p).expect("input grad"))
        });
        group.bench_function(BenchmarkId::from_parameter("weight_grad"), |bch| {
            bch.iter(|| conv::conv2d_backward_filter(&gy, &x, &w_shape, &p).expect("weight grad"))
        });
        // The same passes with im2col + GEMM only, beside Winograd's F(2x2, 3x3) where the
        // automatic choice takes it (3x3 stride 1, 16+ channels).
        let winograd = k == 3 && p.stride == [1, 1] && cin.min(cout) >= 16;
        if winograd {
            let im2col = conv::ConvAlgorithm::Im2col;
            group.bench_function(BenchmarkId::from_parameter("forward_im2col"), |bch| {
                bch.iter(|| im2col.scope(|| conv::conv2d(&x, &w, None, &p).expect("forward")))
            });
            group.bench_function(BenchmarkId::from_parameter("input_grad_im2col"), |bch| {
                bch.iter(|| {
                    im2col.scope(|| {
                        conv::conv2d_backward_data(&gy, &w, &x_shape, &p).expect("input grad")
                    })
                })
            });
        }
        group.bench_function(BenchmarkId::from_parameter("gemm_same_flops"), |bch| {
            bch.iter(|| a.matmul(&bm).expect("gemm"))
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
