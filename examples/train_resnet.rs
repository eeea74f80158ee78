//! Trains a ResNet with SGD: epochs, a learning-rate schedule, CIFAR augmentation, an
//! evaluation after every epoch, a metrics log and a checkpoint.
//!
//! Learnable synthetic data by default (loss and accuracy improve within minutes on a CPU):
//!   cargo run --release --example train_resnet
//! CIFAR-10 binaries:   ... -- --stem cifar --data-dir cifar-10-batches-bin --epochs 30 --lr-schedule cosine:30:2 --log metrics.jsonl
//! One exact batch:     ... -- --weights W.safetensors --data B.safetensors --steps 1 --save O.safetensors

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use wick::graph::collective::Communicator;
use wick::graph::passes::data_parallel::DataParallelOptions;
use wick::graph::PassSet;
use wick::models::data::{
    BatchFile, BatchSource, Cifar10, Prefetcher, SourceFactory, SyntheticImages,
};
use wick::models::evaluate::{evaluate, score, Scores};
use wick::models::{resume, ImageSize, LrSchedule, Session, TrainOptions, WeightInit};
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
    /// Train on CIFAR-10's binary files in this folder (data_batch_*.bin, test_batch.bin),
    /// augmented, evaluated on the whole test set after every epoch.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Training steps [default: 150], or use --epochs.
    #[arg(long, conflicts_with = "epochs")]
    steps: Option<usize>,
    /// Epochs: passes over the CIFAR training set, or of --steps-per-epoch steps otherwise.
    #[arg(long)]
    epochs: Option<usize>,
    /// Steps per epoch for synthetic data and batch files (CIFAR's is its size / batch).
    #[arg(long, default_value_t = 50)]
    steps_per_epoch: usize,
    /// Images per batch (a batch file sets its own).
    #[arg(long, default_value_t = 16)]
    batch_size: usize,
    /// Synthetic images' size: 32 for 32x32, or WIDTHxHEIGHT such as 48x32 (CIFAR-10 is
    /// 32x32; a batch file sets its own).
    #[arg(long, default_value = "32")]
    image_size: ImageSize,
    /// Classes of the synthetic data (at most --num-classes).
    #[arg(long, default_value_t = 10)]
    synthetic_classes: usize,
    /// Base learning rate.
    #[arg(long, default_value_t = 0.05)]
    lr: f64,
    /// Schedule (PyTorch's definitions), counted in epochs, or in steps with a /step
    /// suffix: constant, step:MILESTONES[:GAMMA] (step:30,60:0.1) or
    /// cosine:TOTAL[:WARMUP[:MIN_LR]] (linear warm-up from lr/3, then cosine annealing).
    #[arg(long, default_value = "constant")]
    lr_schedule: LrSchedule,
    /// SGD momentum.
    #[arg(long, default_value_t = 0.9)]
    momentum: f64,
    /// Weight decay.
    #[arg(long, default_value_t = 5e-4)]
    weight_decay: f64,
    /// Threads preparing training batches (each with its own copy of the data; the batches
    /// come out in the same order whatever the count).
    #[arg(long, default_value_t = 1)]
    loader_threads: usize,
    /// Turn CIFAR's training augmentation (4-pixel padded random crop, flip) off.
    #[arg(long)]
    no_augmentation: bool,
    /// Write one JSON line of metrics per epoch here (rewritten atomically each epoch).
    #[arg(long)]
    log: Option<PathBuf>,
    /// Save the trained weights here (safetensors, torchvision names).
    #[arg(long)]
    save: Option<PathBuf>,
    /// Keep training checkpoints (model, momentum buffers, counters) in this folder:
    /// `step-<N>` every --checkpoint-every steps and at SIGINT, and `best` by test accuracy.
    #[arg(long)]
    checkpoint_dir: Option<PathBuf>,
    /// Steps between checkpoints [default: one epoch].
    #[arg(long)]
    checkpoint_every: Option<usize>,
    /// Periodic checkpoints to keep (the newest).
    #[arg(long, default_value_t = 3)]
    keep: usize,
    /// Continue from the newest checkpoint in this folder toward the same --steps or
    /// --epochs target (checkpoints keep going there unless --checkpoint-dir says else).
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Check every op's output for NaN and infinity and name the first op that made one
    /// (PyTorch's detect_anomaly; slow, for debugging a diverging run).
    #[arg(long)]
    detect_anomaly: bool,
    #[command(flatten)]
    profile: common::ProfileArgs,
    /// Seed for the initialisation, the data order, the augmentation and synthetic data.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Data-parallel engine: none, mpi (run under `mpirun -np N`, a build with
    /// `--features mpi`) or nccl (one process per GPU under torchrun or any launcher that
    /// sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; `--features nccl`).
    /// Each rank trains on its 1/N of every --batch-size batch; rank 0 prints, logs and
    /// writes checkpoints.
    #[arg(long, default_value = "none")]
    dist: String,
    /// With --dist: batch-norm statistics over every rank's shard (PyTorch's
    /// SyncBatchNorm), so N ranks train as one process on the whole batch. Without it
    /// they stay per rank, as in PyTorch DDP.
    #[arg(long)]
    sync_bn: bool,
    /// With --dist: gradient bucket size in MiB (PyTorch DDP's default, 25).
    #[arg(long, default_value_t = 25.0)]
    bucket_mb: f64,
}

fn main() -> std::process::ExitCode {
    common::exit_on_error(start())
}

/// Joins the data-parallel job if asked; a rank that fails ends the whole job.
fn start() -> Result<()> {
    let mut a = Args::parse();
    a.profile.default_verbosity(0);
    let comm = common::communicator(&a.dist)?;
    let result = run(a, comm.clone());
    if let (Err(e), Some(comm)) = (&result, &comm) {
        if comm.size() > 1 {
            eprintln!(
                "error: rank {} of {}: {}",
                comm.rank(),
                comm.size(),
                wick::error_chain(e.as_ref())
            );
            comm.abort(1);
        }
    }
    result
}

fn run(a: Args, comm: Option<Arc<dyn Communicator>>) -> Result<()> {
    let (rank, ranks) = comm.as_ref().map_or((0, 1), |c| (c.rank(), c.size()));
    let lead = rank == 0;
    for (flag, v) in [
        ("--batch-size", a.batch_size),
        ("--steps-per-epoch", a.steps_per_epoch),
        ("--loader-threads", a.loader_threads),
    ] {
        common::at_least_one(flag, v)?;
    }
    for (flag, path) in [("--save", &a.save), ("--log", &a.log)] {
        if let Some(path) = path {
            common::check_output(flag, path)?;
        }
    }
    a.profile.check()?;
    anyhow::ensure!(
        a.bucket_mb.is_finite() && a.bucket_mb > 0.0,
        "--bucket-mb must be a positive number of MiB, got {}",
        a.bucket_mb
    );
    anyhow::ensure!(
        !a.sync_bn || comm.is_some(),
        "--sync-bn synchronises batch norm over data-parallel ranks: it needs --dist mpi"
    );
    a.model.apply_threads()?;
    wick::prepare_process();
    // An engine that fixes the device (NCCL: the GPU LOCAL_RANK names) chooses it.
    let device = match comm.as_ref().and_then(|c| c.device()) {
        Some(d) => d,
        None => a.model.device()?,
    };
    let config = a.model.config("resnet18")?;
    let data = open_data(&a, config.num_classes)?;
    let (batch, size) = (data.batch, data.size);
    anyhow::ensure!(
        batch.is_multiple_of(ranks),
        "--batch-size {batch} does not split over {ranks} ranks"
    );
    let shard = batch / ranks;
    let per_epoch = data.steps_per_epoch.unwrap_or(a.steps_per_epoch);
    let (epochs, steps) = match (a.epochs, a.steps) {
        (Some(e), _) => (e, e * per_epoch),
        (None, s) => {
            let s = s.unwrap_or(150);
            (s.div_ceil(per_epoch), s)
        }
    };
    common::at_least_one("--steps/--epochs", steps)?;
    let checkpoints = a.checkpoint_dir.clone().or_else(|| a.resume.clone());
    let every = a.checkpoint_every.unwrap_or(per_epoch);
    common::at_least_one("--checkpoint-every", every)?;
    common::at_least_one("--keep", a.keep)?;
    let stop = interrupted_flag();

    let sgd = SgdParams {
        lr: a.lr,
        momentum: a.momentum,
        weight_decay: a.weight_decay,
        ..Default::default()
    };
    let passes = a.model.passes(PassSet::default());
    let options = TrainOptions {
        passes,
        ..sgd.into()
    };
    let mut session = match &comm {
        Some(c) => {
            let dp = DataParallelOptions {
                bucket_bytes: (a.bucket_mb * (1 << 20) as f64) as u64,
                sync_batch_norm: a.sync_bn,
            };
            Session::training_data_parallel(config, shard, size, options, c.clone(), &dp, &device)?
        }
        None => Session::training(config, batch, size, options, &device)?,
    };
    if lead {
        common::log_passes(&session);
    }
    session
        .executor_mut()
        .set_anomaly_detection(a.detect_anomaly);
    a.profile.attach(&mut session)?;
    match &a.weights {
        Some(w) => session.load_checkpoint(w)?,
        None => session.init_weights(WeightInit::Torchvision(a.seed))?,
    }
    // Resuming: the newest checkpoint's weights, buffers and counters; the data stream
    // continues at the same batch.
    let mut start = 0usize;
    if let Some(dir) = &a.resume {
        let (at, ckpt) = resume::periodic(dir)?
            .pop()
            .ok_or_else(|| anyhow::anyhow!("--resume {}: no checkpoint there", dir.display()))?;
        let state = resume::load(&mut session, &ckpt)?;
        if state.fields.get("seed") != Some(&a.seed.to_string()) {
            anyhow::bail!(
                "--resume {}: the checkpoint was trained with --seed {}, not {}",
                ckpt.display(),
                state.fields.get("seed").map_or("?", |s| s.as_str()),
                a.seed
            );
        }
        start = at as usize;
        if lead {
            println!("resumed from {} at step {start}", ckpt.display());
        }
    }
    if ranks > 1 && lead {
        println!(
            "data-parallel over {ranks} ranks ({}): {shard} of every {batch} images per rank",
            a.dist
        );
    }
    if lead {
        println!(
        "training {} ({:?} stem, {} classes) on {:?}: batch {batch}, {size} (width x height), {epochs} epochs of {per_epoch} steps ({steps} steps), lr {} ({:?}), momentum {}, weight decay {}",
        config.depth.name(), config.stem, config.num_classes, device.location(),
        a.lr, a.lr_schedule, a.momentum, a.weight_decay
    );
    }

    let mut evaluator = Session::inference_with_passes(config, batch, size, passes, &device)?;
    if lead {
        common::log_passes(&evaluator);
    }
    let top5 = config.num_classes >= 100;
    let state = |step: usize, best: f64| resume::TrainingState {
        step: step as u64,
        epoch: (step / per_epoch) as u64,
        fields: [
            ("seed", a.seed.to_string()),
            ("best_accuracy", best.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
    };
    let mut best = f64::NEG_INFINITY;
    let batches = Prefetcher::ordered(data.train, a.loader_threads, 2, start as u64);
    // images/s counts the steps after the warm-up (--skip, at most all but one step).
    let warmup = a.profile.skip.min(steps - 1);
    let (mut step, mut lr, mut timed_secs) = (start, f64::NAN, 0.0);
    let mut log = match (&a.log, start) {
        (Some(path), s) if s > 0 => std::fs::read_to_string(path).unwrap_or_default(),
        _ => String::new(),
    };
    for epoch in (start / per_epoch + 1)..=epochs {
        let bar = match lead {
            true => ProgressBar::new(per_epoch.min(steps - step) as u64),
            false => ProgressBar::hidden(),
        };
        bar.set_style(ProgressStyle::with_template(
            "{bar:30} {pos}/{len} [{elapsed_precise}] {msg}",
        )?);
        let (mut train, epoch_start, mut epoch_train_secs) =
            (Scores::default(), Instant::now(), 0.0);
        while step < steps && step < epoch * per_epoch {
            let next = a.lr_schedule.lr(a.lr, step, per_epoch);
            if next != lr {
                lr = next;
                session.executor_mut().set_learning_rate(lr)?;
            }
            let waiting = Instant::now();
            let (images, labels) = batches.next_batch()?;
            // This rank's shard of the batch (the whole batch on one process).
            let (images, labels) = (
                images.narrow(0, rank * shard, shard)?,
                labels.narrow(0, rank * shard, shard)?,
            );
            session.report_input_wait(waiting.elapsed());
            let started = Instant::now();
            let loss = session.step(&images, &labels).map_err(|e| {
                bar.abandon();
                match &a.save {
                    Some(path) => {
                        anyhow::anyhow!("{e}; nothing saved, {} is untouched", path.display())
                    }
                    None => e.into(),
                }
            })?;
            let secs = started.elapsed().as_secs_f64();
            epoch_train_secs += secs;
            if step >= warmup {
                timed_secs += secs;
            }
            let logits = session
                .logits()
                .ok_or_else(|| anyhow::anyhow!("the logits were not kept"))?;
            train = add(train, score(logits, &labels, shard)?);
            step += 1;
            bar.set_message(format!("loss {loss:.4}, lr {lr:.4}"));
            bar.inc(1);
            let interrupted = stop.load(std::sync::atomic::Ordering::Relaxed);
            if let Some(dir) = checkpoints.as_ref().filter(|_| lead) {
                if step % every == 0 || interrupted {
                    resume::save(&session, &state(step, best), dir, &format!("step-{step}"))?;
                    resume::prune(dir, a.keep)?;
                }
            }
            if interrupted {
                bar.abandon();
                let saved = match &checkpoints {
                    Some(dir) => format!(
                        "checkpoint saved in {}; continue with --resume {}",
                        dir.display(),
                        dir.display()
                    ),
                    None => "no --checkpoint-dir, nothing saved".into(),
                };
                anyhow::bail!("interrupted at step {step}: {saved}");
            }
        }
        bar.finish_and_clear();
        if !lead {
            // Rank 0 evaluates, logs and keeps the best checkpoint; the replicas hold the
            // same weights.
            continue;
        }
        evaluator.copy_weights_from(&session)?;
        let test = match &data.test {
            Test::Cifar(c) => {
                let n = c.batches_in_order(batch);
                evaluate(&mut evaluator, (0..n).map(|i| c.batch_in_order(i, batch)))?
            }
            Test::Batches(held_out) => evaluate(
                &mut evaluator,
                held_out
                    .iter()
                    .map(|(x, y)| Ok((x.clone(), y.clone(), batch))),
            )?,
        };
        if let Some(dir) = &checkpoints {
            if test.top1_accuracy() > best {
                best = test.top1_accuracy();
                resume::save(&session, &state(step, best), dir, "best")?;
            }
        }
        // Every rank trains on as many images as rank 0 did.
        let rate = (train.images * ranks) as f64 / epoch_train_secs.max(f64::MIN_POSITIVE);
        let top5_text = if top5 {
            format!(", top-5 {:.1}%", 100.0 * test.top5_accuracy())
        } else {
            String::new()
        };
        println!(
            "epoch {epoch}/{epochs}  lr {lr:.5}  train loss {:.4} acc {:.1}%  test loss {:.4} acc {:.1}%{top5_text} ({} images)  {rate:.1} images/s  {:.1} s",
            train.loss(), 100.0 * train.top1_accuracy(), test.loss(), 100.0 * test.top1_accuracy(),
            test.images, epoch_start.elapsed().as_secs_f64()
        );
        if let Some(path) = &a.log {
            log.push_str(&format!(
                "{{\"epoch\":{epoch},\"step\":{step},\"lr\":{lr},\"train_loss\":{},\"train_accuracy\":{},\"test_loss\":{},\"test_accuracy\":{},\"test_top5\":{},\"test_images\":{},\"images_per_sec\":{rate},\"seconds\":{}}}\n",
                train.loss(), train.top1_accuracy(), test.loss(), test.top1_accuracy(),
                if top5 { test.top5_accuracy().to_string() } else { "null".into() }, test.images,
                epoch_start.elapsed().as_secs_f64()
            ));
            wick::graph::output::write_bytes_atomically(path, log.as_bytes())?;
        }
    }
    if ranks > 1 {
        // Every rank's parameters summed in one fixed order: equal on all ranks when the
        // replicas agree (batch-norm statistics are per rank, so they are left out).
        let mut params: Vec<_> = session.state_dict()?.into_iter().collect();
        params.sort_by(|x, y| x.0.cmp(&y.0));
        let mut sum = 0f64;
        for (name, t) in params {
            if !name.ends_with("num_batches_tracked") && !name.contains("running_") {
                let values = t.flatten_all()?.to_dtype(wick::candle_core::DType::F64)?;
                sum += values.to_vec1::<f64>()?.iter().sum::<f64>();
            }
        }
        println!("rank {rank} of {ranks}: parameter checksum {sum:.17e}");
    }
    // Every rank's step times and all-reduce timings, gathered to rank 0 (a collective).
    let distributed = match (
        session.data_parallel(),
        session.executor().hook::<wick::graph::TimeProfiler>(),
    ) {
        (Some(dp), Some(profiler)) => Some(
            wick::graph::profiler::DistProfile::gather(&profiler.profile(), dp)
                .map_err(anyhow::Error::msg)?,
        ),
        _ => None,
    };
    if !lead {
        return Ok(());
    }
    let warmup = warmup.max(start).min(steps - 1);
    let timed_images = (steps - warmup) * batch;
    println!(
        "{:.1} images/s over {} training steps after {warmup} warm-up (training only: {:.2} s)",
        timed_images as f64 / timed_secs.max(f64::MIN_POSITIVE),
        steps - warmup,
        timed_secs
    );
    a.profile.report_with(&session, distributed)?;
    if let Some(path) = &a.save {
        session.save_checkpoint(path)?;
        println!("saved {}", path.display());
    }
    Ok(())
}

fn add(mut total: Scores, s: Scores) -> Scores {
    total.images += s.images;
    total.loss_sum += s.loss_sum;
    total.top1 += s.top1;
    total.top5 += s.top5;
    total
}

/// What an epoch is evaluated on.
enum Test {
    /// CIFAR's whole test set, every image once.
    Cifar(Box<Cifar10>),
    /// Fixed held-out batches (synthetic data, a batch file).
    Batches(Vec<(wick::candle_core::Tensor, wick::candle_core::Tensor)>),
}

/// The training batches (a source per loader thread), the test data, the batch shape,
/// and CIFAR's steps per epoch.
struct Data {
    train: SourceFactory,
    test: Test,
    batch: usize,
    size: ImageSize,
    steps_per_epoch: Option<usize>,
}

fn open_data(a: &Args, num_classes: usize) -> Result<Data> {
    Ok(if let Some(path) = &a.data {
        let file = BatchFile::open(path)?;
        let (batch, size) = (
            file.images.dim(0)?,
            ImageSize::new(file.images.dim(3)?, file.images.dim(2)?),
        );
        let mut held_out = file.clone();
        Data {
            test: Test::Batches(vec![held_out.next_batch()?]),
            train: Box::new(move || Ok(Box::new(file.clone()) as Box<dyn BatchSource>)),
            batch,
            size,
            steps_per_epoch: None,
        }
    } else if let Some(dir) = &a.data_dir {
        let train =
            Cifar10::open(dir, true, a.batch_size, a.seed)?.with_augmentation(!a.no_augmentation);
        let test = Cifar10::open(dir, false, a.batch_size, a.seed + 1)?;
        Data {
            steps_per_epoch: Some(train.len() / a.batch_size),
            train: Box::new(move || Ok(Box::new(train.clone()) as Box<dyn BatchSource>)),
            test: Test::Cifar(Box::new(test)),
            batch: a.batch_size,
            size: ImageSize::square(32),
        }
    } else {
        let k = a.synthetic_classes.min(num_classes);
        let train = SyntheticImages::new(k, a.batch_size, a.image_size, a.seed + 1)?;
        let mut eval = SyntheticImages::new(k, a.batch_size, a.image_size, a.seed + 1_000_003)?;
        let held_out = (0..4)
            .map(|_| eval.next_batch())
            .collect::<Result<_, _>>()?;
        Data {
            train: Box::new(move || Ok(Box::new(train.clone()) as Box<dyn BatchSource>)),
            test: Test::Batches(held_out),
            batch: a.batch_size,
            size: a.image_size,
            steps_per_epoch: None,
        }
    })
}

/// Set when the process gets SIGINT (Ctrl-C): the loop then saves a checkpoint after
/// the step in progress and exits, instead of dying mid-step.
fn interrupted_flag() -> &'static std::sync::atomic::AtomicBool {
    static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    extern "C" fn on_sigint(_: libc::c_int) {
        STOP.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t);
    }
    &STOP
}
