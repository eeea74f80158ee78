//! The input pipeline alone: an ImageFolder's training batches (read, decode,
//! RandomResizedCrop, flip, normalise, collate) on --loader-threads threads, as
//! train_resnet prepares them, with no model. Prints images/s overall and per thread, and
//! each stage's share; scripts/loader-throughput.sh runs it beside torchvision's
//! DataLoader on the same folder.
//!
//!   cargo run --release --example loader_bench -- --data-dir shapes --loader-threads 2

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{ensure, Result};
use clap::Parser;
use wick::graph::{InputStage, InputStages};
use wick::models::data::transforms::ImageTransform;
use wick::models::data::{BatchSource, ImageBatches, ImageFolder, Prefetcher};
use wick::models::ImageSize;

#[derive(Parser)]
#[command(about = "Measure the ImageFolder input pipeline's throughput, without a model")]
struct Args {
    /// An ImageFolder (one subfolder per class; its train/ when it has one).
    #[arg(long)]
    data_dir: PathBuf,
    /// The training crop's size.
    #[arg(long, default_value = "224")]
    image_size: ImageSize,
    /// Images per batch.
    #[arg(long, default_value_t = 32)]
    batch_size: usize,
    /// Loader threads.
    #[arg(long, default_value_t = 1)]
    loader_threads: usize,
    /// Batches timed, after one untimed batch per thread.
    #[arg(long, default_value_t = 20)]
    batches: usize,
}

mod common;

fn main() -> std::process::ExitCode {
    common::exit_on_error(run())
}

fn run() -> Result<()> {
    let a = Args::parse();
    ensure!(
        a.loader_threads > 0 && a.batches > 0 && a.batch_size > 0,
        "--loader-threads, --batches and --batch-size must be at least 1"
    );
    let root = if a.data_dir.join("train").is_dir() {
        a.data_dir.join("train")
    } else {
        a.data_dir.clone()
    };
    let folder = ImageFolder::open(&root)?;
    let source = ImageBatches::new(folder, ImageTransform::train(a.image_size), a.batch_size, 0)?;
    let batches = Prefetcher::ordered(
        Box::new(move || Ok(Box::new(source.clone()) as Box<dyn BatchSource>)),
        a.loader_threads,
        2,
        0,
    );
    for _ in 0..a.loader_threads {
        batches.next_batch()?;
    }
    let started = Instant::now();
    let mut stages = InputStages::default();
    for _ in 0..a.batches {
        let (_, work) = batches.next_batch_timed()?;
        if let Some(w) = work {
            for s in InputStage::ALL {
                stages.add(s, w.stages.get(s));
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let images = (a.batches * a.batch_size) as f64;
    println!(
        "wick: {:.1} images/s with {} loader threads ({:.1} per thread), {} batches of {} at {}: {}",
        images / secs,
        a.loader_threads,
        images / secs / a.loader_threads as f64,
        a.batches,
        a.batch_size,
        a.image_size,
        stages.shares()
    );
    Ok(())
}
