//! Trains a ResNet on synthetic data for a few iterations and prints wick's time profile:
//! SINGA's documented lines, then the per-op-type table and the step breakdown.
//!
//! CPU default (about a minute on 2 cores):
//!   cargo run --release --example profile_resnet
//! SINGA's documented setting (ResNet-50, batch 32, 224x224, skip 5), for a GPU:
//!   cargo run --release --features cuda --example profile_resnet -- --device cuda

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use wick::graph::TimeProfiler;
use wick::models::data::{BatchSource, SyntheticImages};
use wick::models::{ResNetConfig, Session, Stem, TrainOptions};
use wick::ops::SgdParams;

/// Transparent huge pages under every big block (see `wick::allocator`).
#[global_allocator]
static ALLOC: wick::allocator::HugePageAlloc = wick::allocator::HugePageAlloc;

#[derive(Parser)]
#[command(about = "Profile ResNet training steps with wick's SINGA-style time profiler")]
struct Args {
    /// resnet18, resnet34, resnet50, resnet101 or resnet152.
    #[arg(long, default_value = "resnet50")]
    model: String,
    /// imagenet or cifar.
    #[arg(long, default_value = "imagenet")]
    stem: String,
    /// Output classes [default: 1000 for the imagenet stem, 10 for cifar].
    #[arg(long)]
    num_classes: Option<usize>,
    /// Images per batch [default: 2 on cpu, 32 on cuda].
    #[arg(long)]
    batch_size: Option<usize>,
    /// Image height and width [default: 64 on cpu, 224 on cuda].
    #[arg(long)]
    image_size: Option<usize>,
    /// Iterations to run, skipped ones included.
    #[arg(long, default_value_t = 10)]
    iterations: usize,
    /// Untimed warm-up iterations at the start (SINGA's default is 5).
    #[arg(long, default_value_t = 5)]
    skip: usize,
    /// 0: no timing; 1: forward/backward/optimizer time; 2: also every op.
    #[arg(long, default_value_t = 2)]
    verbosity: u8,
    /// cpu or cuda.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// SGD learning rate (SINGA's documented run: 0.1, momentum 0.9, weight decay 1e-5).
    #[arg(long, default_value_t = 0.1)]
    lr: f64,
    /// Write a Chrome/Perfetto trace of the last timed iteration here (verbosity 2).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Write the whole profile as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> Result<()> {
    let a = Args::parse();
    wick::allocator::keep_freed_memory();
    wick::denormals::flush_denormals_to_zero();
    let device = wick::device::select(&a.device).map_err(anyhow::Error::msg)?;
    let gpu = !device.is_cpu();
    let stem: Stem = a.stem.parse()?;
    let config = ResNetConfig::new(
        a.model.parse()?,
        stem,
        a.num_classes.unwrap_or(ResNetConfig::default_classes(stem)),
    )?;
    let batch = a.batch_size.unwrap_or(if gpu { 32 } else { 2 });
    let size = a.image_size.unwrap_or(if gpu { 224 } else { 64 });
    anyhow::ensure!(
        a.iterations > a.skip,
        "--iterations ({}) must exceed --skip ({})",
        a.iterations,
        a.skip
    );

    let sgd = SgdParams {
        lr: a.lr,
        momentum: 0.9,
        weight_decay: 1e-5,
        ..Default::default()
    };
    let mut session = Session::training(
        config,
        batch,
        size,
        TrainOptions {
            sgd,
            keep_gradients: false,
        },
        &device,
    )?;
    session.init_weights(0)?;
    session
        .executor_mut()
        .add_hook(TimeProfiler::new(a.verbosity, a.skip))?;
    let (images, labels) =
        SyntheticImages::new(config.num_classes.min(10), batch, size, 1)?.next_batch()?;
    let images = images.to_device(&device)?;

    println!(
        "{} ({:?} stem, {} classes), batch {batch}, {size}x{size}, f32, {} ops per iteration, {:?}, {} CPU threads; {} iterations, {} skipped",
        config.depth.name(),
        stem,
        config.num_classes,
        session.executor().graph().nodes().len(),
        device.location(),
        rayon_threads(),
        a.iterations,
        a.skip
    );
    for _ in 0..a.iterations {
        session.step(&images, &labels)?;
    }
    let profiler = session
        .executor()
        .hook::<TimeProfiler>()
        .context("profiler attached above")?;
    profiler.print();
    let profile = profiler.profile();
    if let Some(path) = &a.trace {
        std::fs::write(path, profile.chrome_trace())
            .with_context(|| format!("writing {}", path.display()))?;
        println!(
            "trace of the last timed iteration written to {} (open in ui.perfetto.dev)",
            path.display()
        );
    }
    if let Some(path) = &a.json {
        std::fs::write(path, profile.to_json())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
