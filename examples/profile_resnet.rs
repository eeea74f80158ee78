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
use wick::models::{Session, WeightInit};
use wick::ops::SgdParams;

/// Transparent huge pages under every big block (see `wick::allocator`).
#[global_allocator]
static ALLOC: wick::allocator::HugePageAlloc = wick::allocator::HugePageAlloc;

mod common;

#[derive(Parser)]
#[command(about = "Profile ResNet training steps with wick's SINGA-style time profiler")]
struct Args {
    #[command(flatten)]
    model: common::ModelArgs,
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
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(0..=2))]
    verbosity: u8,
    /// SGD learning rate (SINGA's documented run: 0.1, momentum 0.9, weight decay 1e-5).
    #[arg(long, default_value_t = 0.1)]
    lr: f64,
    /// Write a Chrome/Perfetto trace of the last timed iteration here (needs verbosity 2).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Write the whole profile as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> std::process::ExitCode {
    common::exit_on_error(run())
}

fn run() -> Result<()> {
    let a = Args::parse();
    wick::prepare_process();
    let device = a.model.device()?;
    let gpu = !device.is_cpu();
    let config = a.model.config("resnet50")?;
    check_outputs(&a)?;
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
    let mut session = Session::training(config, batch, size, sgd.into(), &device)?;
    session.init_weights(WeightInit::Torchvision(0))?;
    session
        .executor_mut()
        .add_hook(TimeProfiler::new(a.verbosity, a.skip))?;
    let (images, labels) =
        SyntheticImages::new(config.num_classes.min(10), batch, size, 1)?.next_batch()?;
    let images = images.to_device(&device)?;

    println!(
        "{} ({:?} stem, {} classes), batch {batch}, {size}x{size}, f32, {} ops per iteration, {:?}, {} CPU threads; {} iterations, {} skipped",
        config.depth.name(),
        config.stem,
        config.num_classes,
        session.executor().graph().nodes().len(),
        device.location(),
        common::threads(),
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
        let trace = profile
            .chrome_trace()
            .context("no per-op timings to trace (was any iteration timed?)")?;
        wick::graph::output::write_bytes_atomically(path, trace.as_bytes())?;
        println!(
            "trace of the last timed iteration written to {} (open in ui.perfetto.dev)",
            path.display()
        );
    }
    if let Some(path) = &a.json {
        wick::graph::output::write_bytes_atomically(path, profile.to_json().as_bytes())?;
        println!("profile written to {}", path.display());
    }
    Ok(())
}

/// Refuses, before any work, output requests that cannot be honoured: a trace without
/// per-op timings, one path for both files, a path that cannot be written.
fn check_outputs(a: &Args) -> Result<()> {
    if a.trace.is_some() && a.verbosity < 2 {
        anyhow::bail!(
            "--trace needs per-op timings: use --verbosity 2 (got {})",
            a.verbosity
        );
    }
    if let (Some(t), Some(j)) = (&a.trace, &a.json) {
        anyhow::ensure!(
            t != j,
            "--trace and --json name the same file {}: give each its own",
            t.display()
        );
    }
    if let Some(path) = &a.trace {
        common::check_output("--trace", path)?;
    }
    if let Some(path) = &a.json {
        common::check_output("--json", path)?;
    }
    Ok(())
}
