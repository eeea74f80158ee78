//! Runs every wick-ops kernel forward and backward on random data and prints, per kernel,
//! its name, output shape, FLOPs and median time.
//!
//! `cargo run --release --example ops_tour -- --batch 8 --size 56 --channels 64`

use std::time::Instant;

use anyhow::Result;
use candle_core::{DType, Device, Tensor};
use clap::Parser;
use wick::ops::{self, conv, pool, Conv2dParams, Kernel, Pool2dParams, SgdParams};

mod common;

#[derive(Parser)]
#[command(about = "Run every wick-ops kernel forward and backward and time it")]
struct Args {
    /// Batch size.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Channels of the feature map.
    #[arg(long, default_value_t = 64)]
    channels: usize,
    /// Height and width of the feature map.
    #[arg(long, default_value_t = 56)]
    size: usize,
    /// Timed repetitions per kernel (after one untimed warm-up).
    #[arg(long, default_value_t = 5)]
    reps: usize,
}

/// Runs `f` once untimed, then `reps` times, and returns the last output and the median seconds.
fn time<T>(reps: usize, mut f: impl FnMut() -> ops::Result<T>) -> Result<(T, f64)> {
    let mut out = f()?;
    let mut secs = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        out = f()?;
        secs.push(start.elapsed().as_secs_f64());
    }
    secs.sort_by(f64::total_cmp);
    Ok((out, secs[secs.len() / 2]))
}

fn report(kernel: Kernel, shape: &[usize], flops: u64, secs: f64) {
    let name = kernel.name_on(&Device::Cpu);
    let rate = flops as f64 / secs / 1e9;
    println!(
        "{name:<28} {:<20} {:>10.3} ms {:>8.1} GFLOP/s",
        format!("{shape:?}"),
        secs * 1e3,
        rate
    );
}

fn main() -> std::process::ExitCode {
    common::exit_on_error(run())
}

fn run() -> Result<()> {
    let a = Args::parse();
    let (n, c, s, reps) = (a.batch, a.channels, a.size, a.reps);
    check(&a)?;
    println!("wick ops tour: f32, batch {n}, {c} channels, {s}x{s}, median of {reps} after 1 warm-up, host clock, {} threads", common::threads());
    let x = Tensor::randn(0f32, 1., (n, c, s, s), &Device::Cpu)?;
    let w = Tensor::randn(0f32, 0.05, (c, c, 3, 3), &Device::Cpu)?;
    let (y, dw) = convolution(&x, &w, reps)?;
    let sum = norm_and_activation(&x, &y, reps)?;
    let features = pooling(&sum, reps)?;
    let loss = head(&features, n, reps)?;
    let sp = SgdParams {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 5e-4,
        ..Default::default()
    };
    let (upd, t) = time(reps, || ops::sgd_step(&w, &dw, Some(&w), &sp))?;
    report(Kernel::SgdUpdate, upd.0.dims(), sp.flops(w.elem_count()), t);
    println!("loss on random data: {:.4}", loss.to_scalar::<f32>()?);
    Ok(())
}

/// The sizes, each at least 1, and the tour's memory checked before any tensor is made.
fn check(a: &Args) -> Result<()> {
    let (n, c, s, reps) = (a.batch, a.channels, a.size, a.reps);
    for (flag, value) in [
        ("--batch", n),
        ("--channels", c),
        ("--size", s),
        ("--reps", reps),
    ] {
        common::at_least_one(flag, value)?;
    }
    common::at_most_repeats("--reps", reps)?;
    // The tour holds about a dozen feature maps at once (inputs, outputs, gradients and
    // the convolution's unfolded input, 9 maps).
    wick::models::limits::check_allocation(
        &format!("ops_tour's feature maps [{n}, {c}, {s}, {s}]"),
        wick::models::limits::bytes_of(4, &[n, c, s, s]).and_then(|b| b.checked_mul(24)),
    )?;
    Ok(())
}

/// The 3x3 convolution forward and both its gradients; returns its output and the
/// weight gradient.
fn convolution(x: &Tensor, w: &Tensor, reps: usize) -> Result<(Tensor, Tensor)> {
    let cp = Conv2dParams::new(1, 1);
    let cflops = cp.flops(x.dims(), w.dims());
    let (y, t) = time(reps, || conv::conv2d(x, w, None, &cp))?;
    report(Kernel::ConvForward, y.dims(), cflops, t);
    let (dx, t) = time(reps, || conv::conv2d_backward_data(&y, w, x.dims(), &cp))?;
    report(Kernel::ConvBackwardData, dx.dims(), cflops, t);
    let (dw, t) = time(reps, || conv::conv2d_backward_filter(&y, x, w.dims(), &cp))?;
    report(Kernel::ConvBackwardFilter, dw.dims(), cflops, t);

    Ok((y, dw))
}

/// Batch norm, ReLU and the residual add, forward and backward; returns the sum.
fn norm_and_activation(x: &Tensor, y: &Tensor, reps: usize) -> Result<Tensor> {
    let (dev, c) = (Device::Cpu, y.dims()[1]);
    let ones = Tensor::ones(c, DType::F32, &dev)?;
    let zeros = Tensor::zeros(c, DType::F32, &dev)?;
    let bp = ops::BatchNorm2dParams::default();
    let (bn, t) = time(reps, || {
        ops::batchnorm::batch_norm_train(y, &ones, &zeros, &zeros, &ones, &bp)
    })?;
    report(
        Kernel::BatchNormForwardTraining,
        bn.y.dims(),
        bp.flops(y.dims()),
        t,
    );
    let (g, t) = time(reps, || {
        ops::batchnorm::batch_norm_train_backward(&bn.y, y, &ones, &bn.mean, &bn.inv_std)
    })?;
    report(Kernel::BatchNormBackward, g.x.dims(), bp.flops(y.dims()), t);

    let numel = y.elem_count() as u64;
    let (r, t) = time(reps, || ops::relu(&bn.y))?;
    report(Kernel::ReLU, r.dims(), numel, t);
    let (dr, t) = time(reps, || ops::relu_backward(&r, &bn.y))?;
    report(Kernel::ReLUBackward, dr.dims(), numel, t);
    let (sum, t) = time(reps, || ops::add(&r, x))?;
    report(Kernel::Add, sum.dims(), numel, t);

    Ok(sum)
}

/// Max, average and global pooling, forward and backward; returns the pooled features.
fn pooling(sum: &Tensor, reps: usize) -> Result<Tensor> {
    let pp = Pool2dParams::new(3, 2, 1);
    let (mp, t) = time(reps, || pool::max_pool2d(sum, &pp))?;
    report(Kernel::PoolingForward, mp.y.dims(), pp.flops(sum.dims()), t);
    let (dmp, t) = time(reps, || {
        pool::max_pool2d_backward(&mp.y, &mp.indices, sum.dims(), &pp)
    })?;
    report(Kernel::PoolingBackward, dmp.dims(), pp.flops(sum.dims()), t);
    let ap = Pool2dParams::new(3, 2, 1);
    let (avg, t) = time(reps, || pool::avg_pool2d(sum, &ap))?;
    report(Kernel::PoolingForward, avg.dims(), ap.flops(sum.dims()), t);
    let (davg, t) = time(reps, || pool::avg_pool2d_backward(&avg, sum.dims(), &ap))?;
    report(
        Kernel::PoolingBackward,
        davg.dims(),
        ap.flops(sum.dims()),
        t,
    );

    let (gap, t) = time(reps, || pool::global_avg_pool(&mp.y))?;
    report(
        Kernel::GlobalAvgPoolForward,
        gap.dims(),
        mp.y.elem_count() as u64,
        t,
    );
    let (dgap, t) = time(reps, || pool::global_avg_pool_backward(&gap, mp.y.dims()))?;
    report(
        Kernel::GlobalAvgPoolBackward,
        dgap.dims(),
        mp.y.elem_count() as u64,
        t,
    );

    Ok(gap)
}

/// The classifier and the loss, forward and backward; returns the loss.
fn head(gap: &Tensor, n: usize, reps: usize) -> Result<Tensor> {
    let (dev, c) = (Device::Cpu, gap.dims()[1]);
    let feats = gap.flatten_from(1)?;
    let fc_w = Tensor::randn(0f32, 0.1, (10, c), &dev)?;
    let fc_b = Tensor::zeros(10, DType::F32, &dev)?;
    let lflops = ops::linear::linear_flops(feats.dims(), fc_w.dims());
    let (logits, t) = time(reps, || ops::linear(&feats, &fc_w, Some(&fc_b)))?;
    report(Kernel::LinearForward, logits.dims(), lflops, t);
    let (lg, t) = time(reps, || {
        ops::linear::linear_backward(&logits, &feats, &fc_w, true)
    })?;
    report(Kernel::LinearBackward, lg.x.dims(), 2 * lflops, t);

    let labels = Tensor::from_vec((0..n as u32).map(|i| i % 10).collect::<Vec<_>>(), n, &dev)?;
    let ceflops = ops::loss::cross_entropy_flops(logits.dims());
    let (loss, t) = time(reps, || ops::cross_entropy(&logits, &labels))?;
    report(Kernel::SoftmaxCrossEntropyForward, loss.dims(), ceflops, t);
    let one = Tensor::new(1f32, &dev)?;
    let (dl, t) = time(reps, || ops::cross_entropy_backward(&one, &logits, &labels))?;
    report(Kernel::SoftmaxCrossEntropyBackward, dl.dims(), ceflops, t);

    Ok(loss)
}
