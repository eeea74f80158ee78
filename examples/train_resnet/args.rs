//! train_resnet's command line.

use std::path::PathBuf;

use anyhow::Result;
use clap::Parser;
use wick::file_roles::FileRoles;
use wick::models::{ImageSize, LrSchedule};

use crate::common;

#[derive(Parser)]
#[command(about = "Train a ResNet with wick")]
pub struct Args {
    #[command(flatten)]
    pub model: common::ModelArgs,
    /// Start from this safetensors checkpoint (torchvision names) instead of a fresh init.
    #[arg(long)]
    pub weights: Option<PathBuf>,
    /// Train on this batch file (`images` f32 NCHW, `labels` integers) every step.
    #[arg(long, conflicts_with = "data_dir")]
    pub data: Option<PathBuf>,
    /// Train on this folder, evaluated on its whole validation set after every epoch:
    /// CIFAR-10's binary files (data_batch_*.bin, test_batch.bin), or an ImageFolder of
    /// JPEG and PNG images (one subfolder per class, or train/ and val/ holding them),
    /// with torchvision's RandomResizedCrop(--image-size) and flip for training and
    /// Resize + CenterCrop for validation.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// An ImageFolder without train/ and val/: the share of its images held out for
    /// validation, drawn by --seed.
    #[arg(long, default_value_t = 0.1)]
    pub val_split: f64,
    /// An ImageFolder's unreadable images (corrupt, truncated, not an image) are skipped
    /// and counted, the next image in order taken instead; without it the first stops
    /// the run, naming the file.
    #[arg(long)]
    pub skip_bad_images: bool,
    /// Training steps [default: 150], or use --epochs.
    #[arg(long, conflicts_with = "epochs")]
    pub steps: Option<usize>,
    /// Epochs: passes over the CIFAR training set, or of --steps-per-epoch steps otherwise.
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Steps per epoch for synthetic data and batch files (CIFAR's is its size / batch).
    #[arg(long, default_value_t = 50)]
    pub steps_per_epoch: usize,
    /// Images per batch (a batch file sets its own).
    #[arg(long, default_value_t = 16)]
    pub batch_size: usize,
    /// Image size: 32 for 32x32, or WIDTHxHEIGHT such as 48x32: synthetic images', or an
    /// ImageFolder's crops (CIFAR-10 is 32x32; a batch file sets its own).
    #[arg(long, default_value = "32")]
    pub image_size: ImageSize,
    /// Classes of the synthetic data, at most --num-classes [default: 10, or
    /// --num-classes when fewer].
    #[arg(long)]
    pub synthetic_classes: Option<usize>,
    /// Base learning rate [default: 0.05 for sgd, 0.001 for adam and adamw].
    #[arg(long)]
    pub lr: Option<f64>,
    /// Schedule (PyTorch's definitions), counted in epochs, or in steps with a /step
    /// suffix: constant, step:MILESTONES[:GAMMA] (step:30,60:0.1) or
    /// cosine:TOTAL[:WARMUP[:MIN_LR]] (linear warm-up from lr/3, then cosine annealing).
    #[arg(long, default_value = "constant")]
    pub lr_schedule: LrSchedule,
    /// The optimizer, with PyTorch's update rules: sgd (with --momentum), adam or adamw
    /// (betas 0.9, 0.999, eps 1e-8).
    #[arg(long, value_enum, default_value = "sgd")]
    pub optimizer: OptimizerKind,
    /// SGD momentum [default: 0.9]; adam and adamw use betas 0.9, 0.999 instead.
    #[arg(long)]
    pub momentum: Option<f64>,
    /// Weight decay (an L2 penalty for sgd and adam, decoupled for adamw).
    #[arg(long, default_value_t = 5e-4)]
    pub weight_decay: f64,
    /// No weight decay on biases and normalisation weights (every parameter of at most one
    /// dimension), as torchvision's recipes do with --norm-weight-decay 0.
    #[arg(long)]
    pub no_decay_1d: bool,
    /// Clip the gradients to this global L2 norm before each update (clip_grad_norm_; inf,
    /// as in PyTorch, clips nothing).
    #[arg(long)]
    pub clip_grad_norm: Option<f64>,
    /// Threads preparing training batches (each with its own copy of the data; the batches
    /// come out in the same order whatever the count).
    #[arg(long, default_value_t = 1)]
    pub loader_threads: usize,
    /// Turn the training augmentation (CIFAR: 4-pixel padded random crop and flip; an
    /// ImageFolder: RandomResizedCrop and flip) off; the same as --augmentation none.
    #[arg(long, conflicts_with = "augmentation")]
    pub no_augmentation: bool,
    /// The training augmentation: crop,flip (the default), crop, flip (CIFAR only) or
    /// none (horizontal flips are wrong for digits and text).
    #[arg(long)]
    pub augmentation: Option<String>,
    /// Write one JSON line of metrics per epoch here (rewritten atomically each epoch).
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Save the trained weights here (safetensors, torchvision names).
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Keep training checkpoints (model, momentum buffers, counters) in this folder:
    /// `step-<N>` every --checkpoint-every steps and at SIGINT, and `best` by test accuracy.
    #[arg(long)]
    pub checkpoint_dir: Option<PathBuf>,
    /// Steps between checkpoints [default: one epoch].
    #[arg(long)]
    pub checkpoint_every: Option<usize>,
    /// Periodic checkpoints to keep (the newest).
    #[arg(long, default_value_t = 3)]
    pub keep: usize,
    /// Continue from the newest checkpoint in this folder toward the same --steps or
    /// --epochs target (checkpoints keep going there unless --checkpoint-dir says else).
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Resume even when this run's settings (model, batch, image size, seed, optimizer,
    /// learning rate and schedule, steps per epoch, augmentation) differ from the
    /// checkpoint's; without it such a resume is refused, naming the setting.
    #[arg(long)]
    pub resume_override: bool,
    /// Check every op's output for NaN and infinity and name the first op that made one
    /// (PyTorch's detect_anomaly; slow, for debugging a diverging run).
    #[arg(long)]
    pub detect_anomaly: bool,
    #[command(flatten)]
    pub profile: common::ProfileArgs,
    /// Seed for the initialisation, the data order, the augmentation and synthetic data.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Data-parallel engine: none, mpi (run under `mpirun -np N`, a build with
    /// `--features mpi`) or nccl (one process per GPU under torchrun or any launcher that
    /// sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; `--features nccl`).
    /// Each rank trains on its 1/N of every --batch-size batch; rank 0 prints, logs and
    /// writes checkpoints.
    #[arg(long, default_value = "none")]
    pub dist: String,
    /// With --dist: batch-norm statistics over every rank's shard (PyTorch's
    /// SyncBatchNorm), so N ranks train as one process on the whole batch. Without it
    /// they stay per rank, as in PyTorch DDP.
    #[arg(long)]
    pub sync_bn: bool,
    /// With --dist: gradient bucket size in MiB (PyTorch DDP's default, 25).
    #[arg(long, default_value_t = 25.0)]
    pub bucket_mb: f64,
}

/// The optimizers `--optimizer` chooses from.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptimizerKind {
    /// torch.optim.SGD.
    Sgd,
    /// torch.optim.Adam.
    Adam,
    /// torch.optim.AdamW.
    Adamw,
}

impl Args {
    /// The base learning rate: --lr, or the optimizer's usual one.
    pub fn lr(&self) -> f64 {
        self.lr.unwrap_or(match self.optimizer {
            OptimizerKind::Sgd => 0.05,
            OptimizerKind::Adam | OptimizerKind::Adamw => 1e-3,
        })
    }

    /// The synthetic data's classes for a model of `num_classes`: --synthetic-classes,
    /// refused above `num_classes`, or 10 (fewer if the model has fewer).
    pub fn synthetic_classes(&self, num_classes: usize) -> anyhow::Result<usize> {
        match self.synthetic_classes {
            Some(k) if k > num_classes => anyhow::bail!(
                "--synthetic-classes {k}: the model has {num_classes} classes (--num-classes), so at most {num_classes}"
            ),
            Some(k) => Ok(k),
            None => Ok(10.min(num_classes)),
        }
    }

    /// SGD's momentum: --momentum, or 0.9.
    pub fn momentum(&self) -> f64 {
        self.momentum.unwrap_or(0.9)
    }

    /// The augmentation asked for: (random crop, horizontal flip).
    pub fn augmentation(&self) -> anyhow::Result<(bool, bool)> {
        if self.no_augmentation {
            return Ok((false, false));
        }
        match self.augmentation.as_deref().unwrap_or("crop,flip") {
            "crop,flip" | "flip,crop" => Ok((true, true)),
            "crop" => Ok((true, false)),
            "flip" => Ok((false, true)),
            "none" => Ok((false, false)),
            other => {
                anyhow::bail!("--augmentation {other}: expected crop,flip, crop, flip or none")
            }
        }
    }
}

/// Refuses, before any work, flags that cannot be honoured.
pub fn check_args(a: &Args, distributed: bool) -> Result<()> {
    for (flag, v) in [
        ("--batch-size", a.batch_size),
        ("--steps-per-epoch", a.steps_per_epoch),
        ("--loader-threads", a.loader_threads),
        ("--keep", a.keep),
    ] {
        common::at_least_one(flag, v)?;
    }
    // Every file of the command, before any work: no output may be an input or another
    // output, however its path is spelled, and the checkpoint folder must take files.
    let mut files = FileRoles::default();
    wick::graph::atomic_write::allow_read_only_replacement(a.profile.replace_read_only);
    for (flag, path) in [
        ("--weights", &a.weights),
        ("--data", &a.data),
        ("--data-dir", &a.data_dir),
    ] {
        if let Some(path) = path {
            files.input(flag, path)?;
        }
    }
    for (flag, path) in [("--save", &a.save), ("--log", &a.log)] {
        if let Some(path) = path {
            files.output(flag, path)?;
        }
    }
    if let Some(dir) = &a.checkpoint_dir {
        files.output_dir("--checkpoint-dir", dir)?;
        if a.resume.is_none() {
            common::refuse_another_runs_checkpoints(dir)?;
        }
    } else if let Some(dir) = &a.resume {
        // Resuming writes its checkpoints back into the folder it resumes from.
        files.output_dir("--resume", dir)?;
    }
    a.profile.check(&mut files)?;
    a.augmentation()?;
    anyhow::ensure!(
        a.weights.is_none() || a.resume.is_none(),
        "--weights and --resume both set the starting weights: --resume continues a run from its checkpoint's; drop --weights"
    );
    anyhow::ensure!(
        a.momentum.is_none() || a.optimizer == OptimizerKind::Sgd,
        "--momentum is SGD's; {:?} uses betas 0.9, 0.999 instead",
        a.optimizer
    );
    anyhow::ensure!(
        a.bucket_mb.is_finite() && a.bucket_mb > 0.0,
        "--bucket-mb must be a positive number of MiB, got {}",
        a.bucket_mb
    );
    anyhow::ensure!(
        !a.sync_bn || distributed,
        "--sync-bn synchronises batch norm over data-parallel ranks: it needs --dist mpi"
    );
    Ok(())
}
