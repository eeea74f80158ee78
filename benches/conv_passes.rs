//! Every distinct convolution of a model of wick's registry, its three passes (forward,
//! input gradient, weight gradient) timed as plain medians in float32 or with autocast's
//! bf16 products (a bf16 weight, a float32 input rounded as the GEMM reads it): the wick
//! side of `scripts/compare_conv_passes.sh`, which runs PyTorch's
//! (`scripts/torch_conv_passes.py`) beside it and says which layers and passes hold the
//! gap. One line per convolution:
//!
//! `conv 64->64 3x3 s1 @32 count 4 forward 6.1 input_grad 6.3 weight_grad 10.2` (ms)
//!
//! `cargo bench --bench conv_passes -- [--precision f32|bf16] [--model resnet18-cifar|NAME]
//! [--image N] [--batch N] [--reps N] [--only TEXT]`: NAME is any registered model
//! (`resnet50`, `mobilenet_v2`, ...), at `--image` pixels (default 224; 32 for
//! `resnet18-cifar`, ResNet-18 with the CIFAR stem); `--only 7x7` keeps the convolutions
//! whose name holds it (`--only g`: the grouped and depthwise ones).

mod model_convs;

use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use model_convs::{model_convs, ModelConv};
use wick::models::Stem;
use wick::ops::{conv, Products};

/// Transparent huge pages under every big block (see `wick::allocator`).
#[global_allocator]
static ALLOC: wick::allocator::HugePageAlloc = wick::allocator::HugePageAlloc;

/// The value after `flag` in the arguments, or `default`.
fn arg<T: std::str::FromStr>(args: &[String], flag: &str, default: T) -> T {
    match args.iter().position(|a| a == flag) {
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{flag} needs a value")),
        None => default,
    }
}

/// The median of `reps` timed calls of `f` (ms), after one untimed call.
fn median_ms(reps: usize, f: impl Fn()) -> f64 {
    f();
    let mut v: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The three passes of `c` (ms): the stem's input gradient (3 channels, never computed in
/// training) is 0.
fn passes(c: &ModelConv, products: Products, reps: usize) -> [f64; 3] {
    let dev = Device::Cpu;
    let (xs, ws, p) = (c.input, c.weight, c.params);
    let x = Tensor::randn(0f32, 1.0, xs.as_slice(), &dev).expect("x");
    let w = Tensor::randn(0f32, 0.05, ws.as_slice(), &dev).expect("w");
    let w = match products.low_dtype() {
        Some(low) => w.to_dtype(low).expect("cast"),
        None => w,
    };
    let gy = Tensor::randn(
        0f32,
        1.0,
        p.output_shape(&xs, &ws).expect("shape").as_slice(),
        &dev,
    )
    .expect("gy");
    let forward = median_ms(reps, || {
        conv::conv2d(&x, &w, None, &p).expect("forward");
    });
    let input_grad = match xs[1] {
        3 => 0.0,
        _ => median_ms(reps, || {
            conv::conv2d_backward_data(&gy, &w, &xs, &p).expect("input gradient");
        }),
    };
    let weight_grad = median_ms(reps, || {
        conv::conv2d_backward_filter_with(&gy, &x, &ws, &p, products).expect("weight gradient");
    });
    [forward, input_grad, weight_grad]
}

fn main() {
    wick::allocator::keep_freed_memory();
    let args: Vec<String> = std::env::args().collect();
    let products = match arg(&args, "--precision", "f32".to_string()).as_str() {
        "f32" => Products::Native,
        "bf16" => Products::of(DType::BF16),
        other => panic!("--precision f32 or bf16, not {other}"),
    };
    let model = arg(&args, "--model", "resnet18-cifar".to_string());
    let (name, stem, image) = match model.as_str() {
        "resnet18-cifar" => ("resnet18", Stem::Cifar, 32),
        name => (name, Stem::ImageNet, 224),
    };
    let image = arg(&args, "--image", image);
    let batch = arg(&args, "--batch", 32);
    let reps = arg(&args, "--reps", 9);
    let only = arg(&args, "--only", String::new());
    for c in model_convs(name, stem, batch, image) {
        if !c.name().contains(&only) {
            continue;
        }
        let [f, d, w] = passes(&c, products, reps);
        println!(
            "conv {} count {} forward {f:.3} input_grad {d:.3} weight_grad {w:.3}",
            c.name(),
            c.count
        );
    }
}
