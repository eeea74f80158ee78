//! The tensor language's memory-bound ops on a transformer-sized activation `[8, 128, 512]`
//! (f32, 2 MiB), each on wick's CPU kernel (`wick`) and on candle's device-generic ops
//! (`candle`, the path `KernelPath::Generic` forces, which the ops took before they had
//! CPU kernels). Criterion's throughput is elements per second.
//!
//! `cargo bench --bench tensor_ops` (`-- clamp` to filter).

use std::time::Duration;

use candle_core::{Device, Tensor};
use criterion::{criterion_group, criterion_main, Criterion};
use wick::ops::tensor::reduce::{Reduce, Reduction};
use wick::ops::tensor::unary::Unary;
use wick::ops::tensor::{mask, select};
use wick::ops::{broadcast, BinaryOp};

mod kernel_paths;

/// Transparent huge pages under every big block (see `wick::allocator`).
#[global_allocator]
static ALLOC: wick::allocator::HugePageAlloc = wick::allocator::HugePageAlloc;

const SHAPE: [usize; 3] = [8, 128, 512];

type Op<'a> = Box<dyn Fn() -> wick::ops::Result<Tensor> + 'a>;

fn bench(c: &mut Criterion) {
    wick::allocator::keep_freed_memory();
    let dev = Device::Cpu;
    let x = Tensor::randn(0f32, 1.0, SHAPE.as_slice(), &dev).expect("x");
    let gy = Tensor::randn(0f32, 1.0, SHAPE.as_slice(), &dev).expect("gy");
    let rows = Tensor::randn(0f32, 1.0, (8, 128, 1), &dev).expect("rows");
    let bias = Tensor::randn(0f32, 1.0, 512, &dev).expect("bias");
    let every_third: Vec<u8> = (0..128 * 512).map(|i| u8::from(i % 3 == 0)).collect();
    let mask = Tensor::from_vec(every_third, (128, 512), &dev).expect("mask");
    let clamp = Unary::Clamp {
        min: Some(-0.5),
        max: Some(0.5),
    };
    let lse = Reduce::new(Reduction::LogSumExp, &SHAPE, &[-1], true).expect("lse");
    let lse_y = lse.forward(&x).expect("lse forward");
    let var = Reduce::new(Reduction::Var, &SHAPE, &[-1], true).expect("var");
    let ops: Vec<(&str, Op)> = vec![
        ("exp", Box::new(|| Unary::Exp.forward(&x))),
        ("clamp", Box::new(|| clamp.forward(&x))),
        ("clamp_backward", Box::new(|| clamp.backward(&gy, Some(&x)))),
        ("add_scalar", Box::new(|| Unary::AddScalar(1.0).forward(&x))),
        ("expand_rows", Box::new(|| select::expand(&rows, &SHAPE))),
        (
            "masked_fill",
            Box::new(|| mask::masked_fill(&x, &mask, -1e9)),
        ),
        (
            "add_bias",
            Box::new(|| broadcast::forward(BinaryOp::Add, &x, &bias)),
        ),
        (
            "bias_grad_sum",
            Box::new(|| broadcast::sum_to_shape("add", &gy, &[512])),
        ),
        ("logsumexp", Box::new(|| lse.forward(&x))),
        (
            "logsumexp_backward",
            Box::new(|| lse.backward(&rows, &SHAPE, Some(&x), Some(&lse_y))),
        ),
        ("var", Box::new(|| var.forward(&x))),
    ];
    let elements = SHAPE.iter().product::<usize>() as u64;
    for (name, op) in &ops {
        kernel_paths::wick_and_candle(c, format!("tensor {name}"), elements, op);
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(1));
    targets = bench
}
criterion_main!(benches);
