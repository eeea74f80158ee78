//! The layers a ConvNeXt, a ViT or a GPT-2 spends its step in, each on wick's CPU kernel
//! (`wick`) and on candle's device-generic ops (`candle`, the path `KernelPath::Generic`
//! forces, which they took before): linear layers over many rows (ConvNeXt's at batch 8,
//! 128x128; a GPT-2 block's at batch 4, context 256), forward and backward with a bias, and
//! GPT-2's `Conv1D` products (`matmul` of activations and a weight), and ConvNeXt's 7x7
//! depthwise convolutions, forward, input and weight gradient; layer norm and RMS norm
//! over a GPT-2's rows. Criterion's throughput is FLOP/s: read Gelem/s as GFLOP/s.
//!
//! `cargo bench --bench transformer_layers` (`-- linear`, `-- matmul`, `-- depthwise` or
//! `-- norm`).

use std::time::Duration;

use candle_core::{Device, Tensor};
use criterion::{criterion_group, criterion_main, Criterion};
use wick::ops::tensor::matmul::MatMulShape;
use wick::ops::{conv, linear, norm, Conv2dParams};

mod kernel_paths;

/// Transparent huge pages under every big block (see `wick::allocator`).
#[global_allocator]
static ALLOC: wick::allocator::HugePageAlloc = wick::allocator::HugePageAlloc;

type Op<'a> = Box<dyn Fn() -> wick::ops::Result<()> + 'a>;

fn randn(dims: &[usize]) -> Tensor {
    Tensor::randn(0f32, 1.0, dims, &Device::Cpu).expect("randn")
}

/// Runs `op` on wick's kernel and on candle's generic path, in one group.
fn both(c: &mut Criterion, name: String, flops: u64, op: Op) {
    kernel_paths::wick_and_candle(c, name, flops, &op);
}

fn linear_layers(c: &mut Criterion) {
    // (rows, in, out): ConvNeXt's first and third stage MLPs, its last stage's at 64x64
    // batch 4 and at batch 1 (few rows, deep sums), a GPT-2 block's c_attn.
    for (m, k, n) in [
        (8192, 96, 384),
        (8192, 384, 96),
        (512, 384, 1536),
        (64, 1536, 384),
        (16, 768, 3072),
        (16, 3072, 768),
        (1, 768, 3072),
        (1, 3072, 768),
        (1024, 384, 1152),
    ] {
        let (x, w, b, gy) = (randn(&[m, k]), randn(&[n, k]), randn(&[n]), randn(&[m, n]));
        let flops = 2 * (m * k * n) as u64;
        let forward: Op = Box::new(|| linear::linear(&x, &w, Some(&b)).map(|_| ()));
        both(c, format!("linear forward {m}x{k}->{n}"), flops, forward);
        let backward: Op = Box::new(|| linear::linear_backward(&gy, &x, &w, true).map(|_| ()));
        both(
            c,
            format!("linear backward {m}x{k}->{n}"),
            2 * flops,
            backward,
        );
    }
}

fn matmul_layers(c: &mut Criterion) {
    // GPT-2's Conv1D layers (`x @ W`, W `[in, out]`) at batch 4, context 256: c_attn
    // and c_fc of a 384-wide model.
    for (k, n) in [(384, 1152), (384, 1536)] {
        let s = MatMulShape::new(&[4, 256, k], &[k, n]).expect("shapes");
        let (x, w, gy) = (randn(&[4, 256, k]), randn(&[k, n]), randn(&[4, 256, n]));
        let flops = s.flops();
        let forward: Op = Box::new(|| s.forward(&x, &w).map(|_| ()));
        both(c, format!("matmul forward 1024x{k}->{n}"), flops, forward);
        let backward: Op = Box::new(|| {
            s.backward_a(&gy, &w)?;
            s.backward_b(&gy, &x).map(|_| ())
        });
        both(
            c,
            format!("matmul backward 1024x{k}->{n}"),
            2 * flops,
            backward,
        );
    }
}

fn depthwise_layers(c: &mut Criterion) {
    // ConvNeXt-T's 7x7 depthwise convolutions at batch 8, 128x128: its four stages.
    for (ch, side) in [(96, 32), (192, 16), (384, 8), (768, 4)] {
        let p = Conv2dParams::new(1, 3).with_groups(ch);
        let (x, w) = (randn(&[8, ch, side, side]), randn(&[ch, 1, 7, 7]));
        let gy = randn(&[8, ch, side, side]);
        let flops = 2 * (8 * ch * side * side * 49) as u64;
        let at = format!("{ch}x{side}x{side}");
        let forward: Op = Box::new(|| conv::conv2d(&x, &w, None, &p).map(|_| ()));
        both(c, format!("depthwise forward {at}"), flops, forward);
        let data: Op = Box::new(|| conv::conv2d_backward_data(&gy, &w, x.dims(), &p).map(|_| ()));
        both(c, format!("depthwise input_grad {at}"), flops, data);
        let filter: Op =
            Box::new(|| conv::conv2d_backward_filter(&gy, &x, w.dims(), &p).map(|_| ()));
        both(c, format!("depthwise weight_grad {at}"), flops, filter);
    }
}

fn norm_layers(c: &mut Criterion) {
    // A GPT-2 block's rows at batch 4, context 256, 768 wide; and 4096 wide (a LLaMA's).
    for (rows, d) in [(1024, 768), (1024, 4096)] {
        let (x, gy, w, b) = (
            randn(&[rows, d]),
            randn(&[rows, d]),
            randn(&[d]),
            randn(&[d]),
        );
        let flops = norm::norm_flops(&[rows, d]);
        let backward_flops = norm::norm_backward_flops(&[rows, d]);
        let at = format!("{rows}x{d}");
        let ln: Op = Box::new(|| norm::layer_norm(&x, Some(&w), Some(&b), 1e-5).map(|_| ()));
        both(c, format!("layer_norm forward {at}"), flops, ln);
        let ln_back: Op =
            Box::new(|| norm::layer_norm_backward(&gy, &x, Some(&w), true, 1e-5).map(|_| ()));
        both(
            c,
            format!("layer_norm backward {at}"),
            backward_flops,
            ln_back,
        );
        let rms: Op = Box::new(|| norm::rms_norm(&x, Some(&w), 1e-6).map(|_| ()));
        both(c, format!("rms_norm forward {at}"), flops, rms);
        let rms_back: Op =
            Box::new(|| norm::rms_norm_backward(&gy, &x, Some(&w), 1e-6).map(|_| ()));
        both(
            c,
            format!("rms_norm backward {at}"),
            backward_flops,
            rms_back,
        );
    }
}

fn bench(c: &mut Criterion) {
    wick::allocator::keep_freed_memory();
    linear_layers(c);
    matmul_layers(c);
    depthwise_layers(c);
    norm_layers(c);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
