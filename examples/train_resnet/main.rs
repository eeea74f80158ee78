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
use wick::graph::nodes::optim::{Optimizer, OptimizerConfig, ParamSelector};
use wick::graph::passes::data_parallel::DataParallelOptions;
use wick::graph::{PassSet, StepPart};
use wick::models::data::Prefetcher;
use wick::models::evaluate::{score, Scores};
use wick::models::{resume, ImageSize, ModelConfig, Session, TrainOptions, WeightInit};
use wick::ops::{AdamParams, SgdParams};

/// Transparent huge pages under every big block (see `wick::allocator`).
#[global_allocator]
static ALLOC: wick::allocator::HugePageAlloc = wick::allocator::HugePageAlloc;

mod args;
#[path = "../common/mod.rs"]
mod common;
mod data;
mod fingerprint;
mod run_state;

use args::{check_args, Args, OptimizerKind};

use data::{add, evaluate_on, open_data, Data};
use run_state::{
    at_the_end, augmentation_text, interrupted_flag, logged_epoch, parameter_checksum, resume_from,
    trajectory,
};

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

fn run(mut a: Args, comm: Option<Arc<dyn Communicator>>) -> Result<()> {
    check_args(&a, comm.is_some())?;
    // An ImageFolder's classes are the model's unless --num-classes says otherwise.
    let folder = data::image_folder(&a)?;
    if let Some((train, _)) = &folder {
        let n = train.classes().len();
        match a.model.num_classes {
            None => a.model.num_classes = Some(n),
            Some(k) if k != n => anyhow::bail!(
                "--num-classes {k}, but {} has {n} classes (its subfolders): drop --num-classes or give {n}",
                train.root().display()
            ),
            Some(_) => {}
        }
    }
    a.model.apply_threads()?;
    wick::prepare_process();
    // An engine that fixes the device (NCCL: the GPU LOCAL_RANK names) chooses it.
    let device = match comm.as_ref().and_then(|c| c.device()) {
        Some(d) => d,
        None => a.model.device()?,
    };
    let config = a.model.config("resnet18")?;
    if a.data.is_none() {
        // Before gigabytes of synthetic images are made for a size that cannot train.
        Session::check_fits(config, a.batch_size, a.image_size)?;
    }
    let data = open_data(&a, config.num_classes(), folder)?;
    let plan = Plan::new(&a, &config, &data, comm.as_ref())?;
    a.profile.check_timed_steps(plan.steps)?;
    let passes = a.model.passes(PassSet::default());
    // One run at a time writes a checkpoint folder.
    let _lock = match (&plan.checkpoints, plan.lead()) {
        (Some(dir), true) => Some(common::lock_checkpoints(dir)?),
        _ => None,
    };
    if let Some(dir) = &plan.checkpoints {
        resume::check_dir(dir)?;
    }
    let mut session = training_session(&a, config, &plan, passes, comm.as_ref(), &device)?;
    if let Some(classes) = &data.classes {
        session.set_class_names(classes.clone());
    }
    let resumed = resume_from(&a, &plan, &mut session)?;
    let start = resumed.as_ref().map_or(0, |r| r.step as usize);
    if start >= plan.steps {
        return at_the_end(&a, &plan, start, &session);
    }
    if plan.lead() {
        print_header(&a, &plan, &config, &device);
    }
    let mut evaluator = Session::inference_with(
        config,
        plan.batch,
        plan.size,
        (passes, a.model.precision),
        &device,
    )?;
    if plan.lead() {
        common::log_passes(&evaluator);
    }
    let batches = Prefetcher::ordered(data.train, a.loader_threads, 2, start as u64);
    let mut run = TrainLoop::new(&a, &plan, resumed.as_ref());
    for epoch in (start / plan.per_epoch + 1)..=plan.epochs {
        let epoch_start = Instant::now();
        let (train, train_secs) = run.epoch(epoch, &mut session, &batches)?;
        if plan.lead() {
            // Rank 0 evaluates, logs and keeps the best checkpoint; the replicas hold the
            // same weights.
            evaluator.copy_weights_from(&session)?;
            let test = evaluate_on(&mut evaluator, &data.test, plan.batch)?;
            run.end_epoch(epoch, &session, train, train_secs, test, epoch_start)?;
        }
    }
    finish(&a, &plan, &session, run)?;
    Ok(())
}

/// The run's first lines: the ranks, the model and every setting.
fn print_header(a: &Args, plan: &Plan, config: &ModelConfig, device: &wick::candle_core::Device) {
    if plan.ranks > 1 {
        println!(
            "data-parallel over {} ranks ({}): {} of every {} images per rank",
            plan.ranks, a.dist, plan.shard, plan.batch
        );
    }
    println!(
        "training {} on {:?} in {}: batch {}, {} (width x height), {} epochs of {} steps ({} steps), {:?}, lr {} ({:?}), {}, weight decay {}, augmentation: {}",
        config.describe(), device.location(), common::precision_label(a.model.precision),
        plan.batch, plan.size, plan.epochs, plan.per_epoch, plan.steps,
        a.optimizer, a.lr(), a.lr_schedule, momentum_text(a), a.weight_decay, augmentation_text(a)
    );
}

/// SGD's momentum, or Adam's betas.
fn momentum_text(a: &Args) -> String {
    match a.optimizer {
        OptimizerKind::Sgd => format!("momentum {}", a.momentum()),
        OptimizerKind::Adam | OptimizerKind::Adamw => "betas (0.9, 0.999)".into(),
    }
}

/// After the last epoch: every rank's checksum; rank 0 gathers the ranks' timings (a
/// collective), prints the rates and the profile, and saves the weights.
fn finish(a: &Args, plan: &Plan, session: &Session, run: TrainLoop) -> Result<()> {
    if plan.ranks > 1 {
        println!(
            "rank {} of {}: parameter checksum {:.17e}",
            plan.rank,
            plan.ranks,
            parameter_checksum(session)?
        );
    }
    // Every rank's step times and all-reduce timings, gathered to rank 0 (a collective).
    let distributed = match (
        session.data_parallel(),
        session.executor().hook::<wick::profiler::TimeProfiler>(),
    ) {
        (Some(dp), Some(profiler)) => Some(
            wick::profiler::DistProfile::gather(&profiler.profile(), dp)
                .map_err(anyhow::Error::msg)?,
        ),
        _ => None,
    };
    if !plan.lead() {
        return Ok(());
    }
    run.print_rate();
    if let Some(scale) = session.loss_scale()? {
        println!(
            "loss scaling: scale {scale} after {} steps, {} skipped (a non-finite gradient)",
            session.steps(),
            session.skipped_steps()
        );
    }
    a.profile.report_with(session, distributed)?;
    if let Some(path) = &a.save {
        session.save_checkpoint(path)?;
        println!("saved {}", path.display());
    }
    Ok(())
}

/// The run's shape: batches, this rank's shard, epochs and steps, checkpoints.
struct Plan {
    rank: usize,
    ranks: usize,
    batch: usize,
    shard: usize,
    size: ImageSize,
    per_epoch: usize,
    epochs: usize,
    steps: usize,
    checkpoints: Option<PathBuf>,
    checkpoint_every: usize,
    /// Whether evaluation reports top-5 accuracy (100+ classes).
    top5: bool,
    /// The settings a checkpoint records and a resumed run must share.
    trajectory: Vec<(String, String)>,
}

impl Plan {
    fn new(
        a: &Args,
        config: &ModelConfig,
        data: &Data,
        comm: Option<&Arc<dyn Communicator>>,
    ) -> Result<Plan> {
        let (rank, ranks) = comm.map_or((0, 1), |c| (c.rank(), c.size()));
        let batch = data.batch;
        anyhow::ensure!(
            batch.is_multiple_of(ranks),
            "--batch-size {batch} does not split over {ranks} ranks"
        );
        let per_epoch = data.steps_per_epoch.unwrap_or(a.steps_per_epoch);
        let (epochs, steps) = match (a.epochs, a.steps) {
            (Some(e), _) => (e, e * per_epoch),
            (None, s) => {
                let s = s.unwrap_or(150);
                (s.div_ceil(per_epoch), s)
            }
        };
        common::at_least_one("--steps/--epochs", steps)?;
        let checkpoint_every = a.checkpoint_every.unwrap_or(per_epoch);
        common::at_least_one("--checkpoint-every", checkpoint_every)?;
        let mut plan = Plan {
            rank,
            ranks,
            batch,
            shard: batch / ranks,
            size: data.size,
            per_epoch,
            epochs,
            steps,
            checkpoints: a
                .checkpoint_dir
                .clone()
                .or_else(|| a.resume.as_deref().map(resume::run_folder_of)),
            checkpoint_every,
            top5: config.num_classes() >= 100,
            trajectory: Vec::new(),
        };
        plan.trajectory = trajectory(a, config, &plan);
        Ok(plan)
    }

    /// Rank 0 prints, logs, evaluates and writes checkpoints.
    fn lead(&self) -> bool {
        self.rank == 0
    }
}

/// The optimizer phase the flags ask for.
fn optimizer_config(a: &Args) -> OptimizerConfig {
    let optimizer = match a.optimizer {
        OptimizerKind::Sgd => Optimizer::Sgd(SgdParams {
            lr: a.lr(),
            momentum: a.momentum(),
            weight_decay: a.weight_decay,
            ..Default::default()
        }),
        OptimizerKind::Adam | OptimizerKind::Adamw => Optimizer::Adam(AdamParams {
            weight_decay: a.weight_decay,
            decoupled: a.optimizer == OptimizerKind::Adamw,
            ..AdamParams::adam(a.lr())
        }),
    };
    let mut config = OptimizerConfig::from(optimizer);
    if a.no_decay_1d {
        config = config.no_weight_decay_on(ParamSelector::OneDimensional);
    }
    // PyTorch's clip_grad_norm_ with max_norm inf clips nothing.
    config.clip_grad_norm = a.clip_grad_norm.filter(|n| *n != f64::INFINITY);
    config
}

/// The training session: this rank's shard of each batch, its gradients averaged over the
/// ranks when there are several.
fn training_session(
    a: &Args,
    config: ModelConfig,
    plan: &Plan,
    passes: PassSet,
    comm: Option<&Arc<dyn Communicator>>,
    device: &wick::candle_core::Device,
) -> Result<Session> {
    let options = TrainOptions {
        passes,
        precision: a.model.precision,
        ..optimizer_config(a).into()
    };
    let mut session = match comm {
        Some(c) => {
            let dp = DataParallelOptions {
                bucket_bytes: (a.bucket_mb * (1 << 20) as f64) as u64,
                sync_batch_norm: a.sync_bn,
            };
            let (shard, size) = (plan.shard, plan.size);
            Session::training_data_parallel(config, shard, size, options, c.clone(), &dp, device)?
        }
        None => Session::training(config, plan.batch, plan.size, options, device)?,
    };
    if plan.lead() {
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
    Ok(session)
}

/// The training loop's state across epochs.
struct TrainLoop<'a> {
    a: &'a Args,
    plan: &'a Plan,
    start: usize,
    step: usize,
    lr: f64,
    /// Steps before this one are warm-up: images/s counts the steps after it (--skip, at
    /// most all but one step).
    warmup: usize,
    timed_secs: f64,
    /// Wall-clock seconds of the steps after the warm-up, input wait and the loop's own
    /// work included.
    wall_secs: f64,
    best: f64,
    /// The metrics log so far (kept when resuming).
    log: String,
    stop: &'static std::sync::atomic::AtomicBool,
}

impl<'a> TrainLoop<'a> {
    fn new(a: &'a Args, plan: &'a Plan, resumed: Option<&resume::TrainingState>) -> Self {
        let start = resumed.map_or(0, |r| r.step as usize);
        // Resumed: the log keeps the epochs the checkpoint had finished, no later ones
        // (a run resumed from an older checkpoint redoes them).
        let log = match (&a.log, resumed) {
            (Some(path), Some(r)) => std::fs::read_to_string(path)
                .unwrap_or_default()
                .lines()
                .filter(|l| logged_epoch(l).is_some_and(|e| e <= r.epoch))
                .map(|l| format!("{l}\n"))
                .collect(),
            _ => String::new(),
        };
        let best = run_state::carried_best(resumed, plan.checkpoints.as_deref());
        TrainLoop {
            a,
            plan,
            start,
            step: start,
            lr: f64::NAN,
            warmup: a.profile.skip().min(plan.steps - 1),
            timed_secs: 0.0,
            wall_secs: 0.0,
            best,
            log,
            stop: interrupted_flag(),
        }
    }

    /// What a checkpoint records beside the weights.
    fn state(&self) -> resume::TrainingState {
        let mut fields: std::collections::BTreeMap<String, String> = [
            ("seed", self.a.seed.to_string()),
            ("best_accuracy", self.best.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        for (name, value) in &self.plan.trajectory {
            fields.insert(format!("run.{name}"), value.clone());
        }
        resume::TrainingState {
            step: self.step as u64,
            epoch: (self.step / self.plan.per_epoch) as u64,
            fields,
        }
    }

    /// Trains the steps of `epoch`; returns the training scores, the seconds in training
    /// steps and the seconds end to end (waiting for data and the loop's own work included).
    fn epoch(
        &mut self,
        epoch: usize,
        session: &mut Session,
        batches: &Prefetcher,
    ) -> Result<(Scores, (f64, f64))> {
        let (plan, a) = (self.plan, self.a);
        let bar = match plan.lead() {
            true => ProgressBar::new(plan.per_epoch.min(plan.steps - self.step) as u64),
            false => ProgressBar::hidden(),
        };
        bar.set_style(ProgressStyle::with_template(
            "{bar:30} {pos}/{len} [{elapsed_precise}] {msg}",
        )?);
        let (mut train, mut train_secs, mut wall_secs) = (Scores::default(), 0.0, 0.0);
        while self.step < plan.steps && self.step < epoch * plan.per_epoch {
            let next = a.lr_schedule.lr(a.lr(), self.step, plan.per_epoch);
            if next != self.lr {
                self.lr = next;
                session.executor_mut().set_learning_rate(next)?;
            }
            let waiting = Instant::now();
            let step_started = waiting;
            let ((images, labels), work) = batches.next_batch_timed()?;
            if let Some(work) = &work {
                session.report_loader_work(work);
            }
            // This rank's shard of the batch (the whole batch on one process).
            let (images, labels) = (
                images.narrow(0, plan.rank * plan.shard, plan.shard)?,
                labels.narrow(0, plan.rank * plan.shard, plan.shard)?,
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
            train_secs += secs;
            if self.step >= self.warmup {
                self.timed_secs += secs;
            }
            let scoring = Instant::now();
            let logits = session
                .logits()
                .ok_or_else(|| anyhow::anyhow!("the logits were not kept"))?;
            train = add(train, score(logits, &labels, plan.shard)?);
            let scoring = scoring.elapsed().as_secs_f64();
            session
                .executor_mut()
                .report_step_part(StepPart::Metrics, scoring);
            self.step += 1;
            bar.set_message(format!("loss {loss:.4}, lr {:.4}", self.lr));
            bar.inc(1);
            let saving = Instant::now();
            if let Err(e) = self.checkpoint(session) {
                bar.abandon();
                return Err(e);
            }
            let saving = saving.elapsed().as_secs_f64();
            session
                .executor_mut()
                .report_step_part(StepPart::Checkpoint, saving);
            let step_wall = step_started.elapsed().as_secs_f64();
            wall_secs += step_wall;
            if self.step > self.warmup {
                self.wall_secs += step_wall;
            }
        }
        bar.finish_and_clear();
        Ok((train, (train_secs, wall_secs)))
    }

    /// Writes the periodic checkpoint when one is due, and after SIGINT stops the run
    /// with an error saying where the checkpoint is.
    fn checkpoint(&self, session: &Session) -> Result<()> {
        let (plan, step) = (self.plan, self.step);
        let interrupted = self.stop.load(std::sync::atomic::Ordering::Relaxed);
        if let Some(dir) = plan.checkpoints.as_ref().filter(|_| plan.lead()) {
            if step % plan.checkpoint_every == 0 || interrupted {
                resume::save(session, &self.state(), dir, &format!("step-{step}"))?;
                resume::prune(dir, self.a.keep)?;
            }
        }
        if interrupted {
            let saved = match &plan.checkpoints {
                Some(dir) => format!(
                    "checkpoint saved in {}; continue with --resume {}",
                    dir.display(),
                    dir.display()
                ),
                None => "no --checkpoint-dir, nothing saved".into(),
            };
            anyhow::bail!("interrupted at step {step}: {saved}");
        }
        Ok(())
    }

    /// Keeps the best checkpoint, prints the epoch's line and appends it to the log.
    fn end_epoch(
        &mut self,
        epoch: usize,
        session: &Session,
        train: Scores,
        (train_secs, train_wall_secs): (f64, f64),
        test: Scores,
        epoch_start: Instant,
    ) -> Result<()> {
        let (a, plan, step, lr) = (self.a, self.plan, self.step, self.lr);
        // A model whose logits are not finite has diverged, even when its weights are
        // finite (a running variance of 1e10): it replaces no checkpoint.
        if test.non_finite > 0 || !test.loss().is_finite() {
            let kept = match &a.save {
                Some(path) => format!("nothing saved, {} is untouched", path.display()),
                None => "nothing saved".into(),
            };
            anyhow::bail!(
                "epoch {epoch}: the model diverged: its logits hold a NaN or an infinity for {} of {} test images (test loss {}); {kept}",
                test.non_finite,
                test.images,
                test.loss()
            );
        }
        if let Some(dir) = &plan.checkpoints {
            if test.top1_accuracy() > self.best {
                self.best = test.top1_accuracy();
                resume::save(session, &self.state(), dir, "best")?;
            }
        }
        // Every rank trains on as many images as rank 0 did. Both rates, named: a run
        // that waits for its loader is slower end to end than its training steps say.
        let images = (train.images * plan.ranks) as f64;
        let rate = images / train_secs.max(f64::MIN_POSITIVE);
        let end_to_end = images / train_wall_secs.max(f64::MIN_POSITIVE);
        let top5 = plan.top5;
        let top5_text = if top5 {
            format!(", top-5 {:.1}%", 100.0 * test.top5_accuracy())
        } else {
            String::new()
        };
        let seconds = epoch_start.elapsed().as_secs_f64();
        println!(
            "epoch {epoch}/{}  lr {lr:.5}  train loss {:.4} acc {:.1}%  test loss {:.4} acc {:.1}%{top5_text} ({} images)  {end_to_end:.1} images/s end to end, {rate:.1} in training steps  {seconds:.1} s",
            plan.epochs, train.loss(), 100.0 * train.top1_accuracy(), test.loss(),
            100.0 * test.top1_accuracy(), test.images
        );
        if let Some(path) = &a.log {
            self.log.push_str(&format!(
                "{{\"epoch\":{epoch},\"step\":{step},\"lr\":{lr},\"train_loss\":{},\"train_accuracy\":{},\"test_loss\":{},\"test_accuracy\":{},\"test_top5\":{},\"test_images\":{},\"images_per_sec\":{end_to_end},\"images_per_sec_in_steps\":{rate},\"seconds\":{seconds}}}\n",
                train.loss(), train.top1_accuracy(), test.loss(), test.top1_accuracy(),
                if top5 { test.top5_accuracy().to_string() } else { "null".into() }, test.images,
            ));
            wick::graph::atomic_write::write_bytes_atomically(path, self.log.as_bytes())?;
        }
        Ok(())
    }

    /// Training images/s over the steps after the warm-up.
    fn print_rate(&self) {
        let steps = self.plan.steps;
        let warmup = self.warmup.max(self.start).min(steps - 1);
        let timed_images = (steps - warmup) * self.plan.batch;
        let rate = |secs: f64| timed_images as f64 / secs.max(f64::MIN_POSITIVE);
        println!(
            "{:.1} images/s end to end over {} training steps after {warmup} warm-up ({:.2} s, waiting for data and the loop's own work included); {:.1} images/s in the training steps alone ({:.2} s in Session::step: the graph, the batch copy, the loss read-back and the non-finite check)",
            rate(self.wall_secs),
            steps - warmup,
            self.wall_secs,
            rate(self.timed_secs),
            self.timed_secs
        );
    }
}
