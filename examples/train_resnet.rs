//! Trains a ResNet with SGD and a progress bar, reports accuracy and saves a checkpoint.
//!
//! Learnable synthetic data by default (loss and accuracy improve within minutes on a CPU):
//!   cargo run --release --example train_resnet
//! CIFAR-10 binaries:   ... -- --stem cifar --data-dir cifar-10-batches-bin
//! One exact batch:     ... -- --weights W.safetensors --data B.safetensors --steps 1 --save O.safetensors

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use candle_core::Tensor;
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use wick::models::data::{BatchFile, BatchSource, Cifar10, Prefetcher, SyntheticImages};
use wick::models::{Session, WeightInit};
use wick::ops::SgdParams;

/// Transparent huge pages under every big block (see `wick::allocator`).
#[global_allocator]
static ALLOC: wick::allocator::HugePageAlloc = wick::allocator::HugePageAlloc;

mod common;

#[derive(Parser)]
#[command(about = "Train a ResNet with wick")]
struct Args {
    #[command(flatten)]
    model: common::ModelArgs,
    /// Start from this safetensors checkpoint (torchvision names) instead of a fresh init.
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Train on this batch file (`images` f32 NCHW, `labels` integers) every step.
    #[arg(long, conflicts_with = "data_dir")]
    data: Option<PathBuf>,
    /// Train on CIFAR-10's binary files in this folder (data_batch_*.bin, test_batch.bin).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Training steps.
    #[arg(long, default_value_t = 150)]
    steps: usize,
    /// Images per batch (a batch file sets its own).
    #[arg(long, default_value_t = 16)]
    batch_size: usize,
    /// Image height and width for synthetic data (CIFAR-10 is 32; a batch file sets its own).
    #[arg(long, default_value_t = 32)]
    image_size: usize,
    /// Classes of the synthetic data (at most --num-classes).
    #[arg(long, default_value_t = 10)]
    synthetic_classes: usize,
    /// Learning rate.
    #[arg(long, default_value_t = 0.05)]
    lr: f64,
    /// SGD momentum.
    #[arg(long, default_value_t = 0.9)]
    momentum: f64,
    /// Weight decay.
    #[arg(long, default_value_t = 5e-4)]
    weight_decay: f64,
    /// Save the trained weights here (safetensors, torchvision names).
    #[arg(long)]
    save: Option<PathBuf>,
    /// Check every op's output for NaN and infinity and name the first op that made one
    /// (PyTorch's detect_anomaly; slow, for debugging a diverging run).
    #[arg(long)]
    detect_anomaly: bool,
    #[command(flatten)]
    profile: common::ProfileArgs,
    /// Seed for the initialisation and the synthetic data.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

fn main() -> std::process::ExitCode {
    common::exit_on_error(run())
}

fn run() -> Result<()> {
    let a = Args::parse();
    common::at_least_one("--steps", a.steps)?;
    common::at_least_one("--batch-size", a.batch_size)?;
    common::at_least_one("--image-size", a.image_size)?;
    if let Some(path) = &a.save {
        common::check_output("--save", path)?;
    }
    a.profile.check(0)?;
    wick::prepare_process();
    let device = a.model.device()?;
    let config = a.model.config("resnet18")?;

    let Data {
        train,
        mut eval,
        batch,
        size,
    } = open_data(&a, config.num_classes)?;

    let sgd = SgdParams {
        lr: a.lr,
        momentum: a.momentum,
        weight_decay: a.weight_decay,
        ..Default::default()
    };
    let mut session = Session::training(config, batch, size, sgd.into(), &device)?;
    session
        .executor_mut()
        .set_anomaly_detection(a.detect_anomaly);
    a.profile.attach(&mut session, 0)?;
    match &a.weights {
        Some(w) => session.load_checkpoint(w)?,
        None => session.init_weights(WeightInit::Torchvision(a.seed))?,
    }
    println!(
        "training {} ({:?} stem, {} classes) on {:?}: batch {batch}, {size}x{size}, {} steps, lr {}, momentum {}, weight decay {}",
        config.depth.name(),
        config.stem,
        config.num_classes,
        device.location(),
        a.steps,
        a.lr,
        a.momentum,
        a.weight_decay
    );

    let mut evaluator = Session::inference(config, batch, size, &device)?;
    // The same held-out batches before and after training, so the two accuracies compare.
    let held_out: Vec<(Tensor, Tensor)> = match &mut eval {
        Some(eval) => (0..4)
            .map(|_| eval.next_batch())
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    let mut accuracy = |session: &Session| -> Result<f64> {
        if held_out.is_empty() {
            return Ok(f64::NAN);
        }
        for (name, t) in session.state_dict()? {
            if !name.ends_with("num_batches_tracked") {
                evaluator.executor_mut().set(&name, &t)?;
            }
        }
        let (mut correct, mut total) = (0, 0);
        for (images, labels) in &held_out {
            let predicted = evaluator
                .forward(images)?
                .argmax(1)?
                .to_dtype(candle_core::DType::I64)?
                .to_device(&candle_core::Device::Cpu)?;
            correct += predicted
                .eq(labels)?
                .to_dtype(candle_core::DType::U32)?
                .sum_all()?
                .to_scalar::<u32>()? as usize;
            total += labels.dim(0)?;
        }
        Ok(correct as f64 / total as f64)
    };
    let before = accuracy(&session)?;

    let batches = Prefetcher::new(train, 2);
    let bar = ProgressBar::new(a.steps as u64);
    bar.set_style(ProgressStyle::with_template(
        "{bar:30} {pos}/{len} [{elapsed_precise}] {msg}",
    )?);
    // images/s counts the steps after the warm-up (--skip, at most all but one step),
    // and no evaluation.
    let warmup = a.profile.skip.min(a.steps - 1);
    let mut started = Instant::now();
    let (mut first_loss, mut last_loss) = (None, 0f32);
    for step in 0..a.steps {
        if step == warmup {
            started = Instant::now();
        }
        let waiting = Instant::now();
        let (images, labels): (Tensor, Tensor) = batches.next_batch()?;
        session.report_input_wait(waiting.elapsed());
        let loss = session.step(&images, &labels).map_err(|e| {
            bar.abandon();
            match &a.save {
                Some(path) => {
                    anyhow::anyhow!("{e}; nothing saved, {} is untouched", path.display())
                }
                None => e.into(),
            }
        })?;
        first_loss.get_or_insert(loss);
        last_loss = loss;
        if step >= warmup {
            let timed = (step + 1 - warmup) as f64 * batch as f64;
            let rate = timed / started.elapsed().as_secs_f64();
            bar.set_message(format!("loss {loss:.4}, {rate:.1} images/s"));
        } else {
            bar.set_message(format!("loss {loss:.4}, warming up"));
        }
        bar.inc(1);
    }
    bar.finish();
    let secs = started.elapsed().as_secs_f64();
    let after = accuracy(&session)?;
    println!(
        "loss {:.4} -> {last_loss:.4}; held-out accuracy {:.1}% -> {:.1}%; {:.1} images/s over {} steps after {warmup} warm-up ({:.2} s)",
        first_loss.unwrap_or(f32::NAN),
        100.0 * before,
        100.0 * after,
        ((a.steps - warmup) * batch) as f64 / secs,
        a.steps - warmup,
        secs
    );
    a.profile.report(&session)?;
    if let Some(path) = &a.save {
        session.save_checkpoint(path)?;
        println!("saved {}", path.display());
    }
    Ok(())
}

/// The training batches, held-out batches to measure accuracy on, and their shape.
struct Data {
    train: Box<dyn BatchSource>,
    eval: Option<Box<dyn BatchSource>>,
    batch: usize,
    size: usize,
}

fn open_data(a: &Args, num_classes: usize) -> Result<Data> {
    Ok(if let Some(path) = &a.data {
        let file = BatchFile::open(path)?;
        let (batch, size) = (file.images.dim(0)?, file.images.dim(3)?);
        Data {
            train: Box::new(file.clone()),
            eval: Some(Box::new(file)),
            batch,
            size,
        }
    } else if let Some(dir) = &a.data_dir {
        let train = Cifar10::open(dir, true, a.batch_size, a.seed)?;
        let test = Cifar10::open(dir, false, a.batch_size, a.seed + 1)?;
        Data {
            train: Box::new(train),
            eval: Some(Box::new(test)),
            batch: a.batch_size,
            size: 32,
        }
    } else {
        let k = a.synthetic_classes.min(num_classes);
        let train = SyntheticImages::new(k, a.batch_size, a.image_size, a.seed + 1)?;
        let eval = SyntheticImages::new(k, a.batch_size, a.image_size, a.seed + 1_000_003)?;
        Data {
            train: Box::new(train),
            eval: Some(Box::new(eval)),
            batch: a.batch_size,
            size: a.image_size,
        }
    })
}
