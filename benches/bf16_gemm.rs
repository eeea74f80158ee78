//! The bfloat16 GEMM (`wick::ops::bf16::gemm`) against wick's float32 GEMM on the
//! products a ResNet and a ViT spend their step in: each 3x3 stage of ResNet-18 on CIFAR
//! at batch 32 as im2col products (`cout × cin·9 × pixels`), and `vit_b_16`'s QKV and MLP
//! products at batch 2 (394 tokens). Paths: `f32` (the `gemm` crate, as the float32
//! convolutions run), `bf16-native` (`vdpbf16ps`, on CPUs with avx512_bf16),
//! `bf16-amx` (AMX tiles, on CPUs with amx_bf16) and `bf16-widening` (any CPU). Operands are bfloat16 in memory, as after a cast node.
//! Criterion's throughput is FLOP/s: read Gelem/s as GFLOP/s.
//!
//! `cargo bench --bench bf16_gemm`.

use std::time::Duration;

use candle_core::{Device, Tensor};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use wick::ops::bf16::{self, Bf16Path, Matrix};
use wick::ops::tensor::matmul::MatMulShape;

/// Transparent huge pages under every big block (see `wick::allocator`).
#[global_allocator]
static ALLOC: wick::allocator::HugePageAlloc = wick::allocator::HugePageAlloc;

fn randn(dims: &[usize]) -> Tensor {
    Tensor::randn(0f32, 1.0, dims, &Device::Cpu).expect("randn")
}

fn bits(t: &Tensor) -> Vec<u16> {
    let v = t
        .flatten_all()
        .and_then(|t| t.to_vec1::<f32>())
        .expect("f32 values");
    let mut out = vec![0u16; v.len()];
    bf16::round_slice(&v, &mut out);
    out
}

fn products(c: &mut Criterion) {
    for (name, m, k, n) in [
        ("resnet18 cifar b32 layer1", 64, 576, 32 * 32 * 32),
        ("resnet18 cifar b32 layer2", 128, 1152, 32 * 16 * 16),
        ("resnet18 cifar b32 layer3", 256, 2304, 32 * 8 * 8),
        ("resnet18 cifar b32 layer4", 512, 4608, 32 * 4 * 4),
        ("winograd weight gradient, layer1", 64, 8192, 64),
        ("winograd product, layer2", 128, 128, 2048),
        ("vit_b_16 b2 qkv", 394, 768, 2304),
        ("vit_b_16 b2 mlp", 394, 768, 3072),
    ] {
        let (a, b) = (randn(&[m, k]), randn(&[k, n]));
        let (a16, b16) = (bits(&a), bits(&b));
        let shape = MatMulShape::new(&[m, k], &[k, n]).expect("shape");
        let mut group = c.benchmark_group(format!("{name} {m}x{k}x{n}"));
        group.throughput(Throughput::Elements(2 * (m * k * n) as u64));
        group.bench_function(BenchmarkId::from_parameter("f32"), |bench| {
            bench.iter(|| shape.forward(&a, &b).expect("f32 matmul"))
        });
        let mut paths = vec![("bf16-widening", Bf16Path::Widening)];
        if bf16::has_avx512_bf16() {
            paths.push(("bf16-native", Bf16Path::Native));
        }
        if bf16::has_amx() {
            paths.push(("bf16-amx", Bf16Path::Amx));
        }
        for (label, path) in paths {
            let mut dst = vec![0f32; m * n];
            group.bench_function(BenchmarkId::from_parameter(label), |bench| {
                bench.iter(|| {
                    bf16::gemm(
                        path,
                        (m, n, k),
                        (&mut dst, (n, 1)),
                        false,
                        &Matrix::new(&a16, (k, 1)),
                        &Matrix::new(&b16, (n, 1)),
                    )
                })
            });
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    targets = products
}
criterion_main!(benches);
