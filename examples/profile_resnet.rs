//! Trains a ResNet on synthetic data for a few iterations and prints wick's time profile:
//! SINGA's documented lines, then the per-op-type table and the step breakdown.
//!
//! CPU default (about a minute on 2 cores):
//!   cargo run --release --example profile_resnet
//! SINGA's documented setting (ResNet-50, batch 32, 224x224, skip 5), for a GPU:
//!   cargo run --release --features cuda --example profile_resnet -- --device cuda

use anyhow::Result;
use clap::Parser;
use wick::file_roles::FileRoles;
use wick::graph::PassSet;
use wick::models::data::{BatchSource, SyntheticImages};
use wick::models::{ImageSize, Session, TrainOptions, WeightInit};
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
    /// Image size: 64 for 64x64, or WIDTHxHEIGHT such as 96x64 [default: 64 on cpu, 224
    /// on cuda].
    #[arg(long)]
    image_size: Option<ImageSize>,
    /// Iterations to run, skipped ones included.
    #[arg(long, default_value_t = 10)]
    iterations: usize,
    /// SGD learning rate (SINGA's documented run: 0.1, momentum 0.9, weight decay 1e-5).
    #[arg(long, default_value_t = 0.1)]
    lr: f64,
    /// Run the graph without passes and with --passes (default: every pass) alternately,
    /// and print per op type, per phase and per step the time before, after and the ratio.
    #[arg(long)]
    compare_passes: bool,
    #[command(flatten)]
    profile: common::ProfileArgs,
}

fn main() -> std::process::ExitCode {
    common::exit_on_error(run())
}

/// The batch and image size (SINGA's GPU setting on a GPU, a small one on a CPU), and
/// the iterations checked against the schedule.
fn batch_and_size(a: &Args, gpu: bool) -> Result<(usize, ImageSize)> {
    let batch = a.batch_size.unwrap_or(if gpu { 32 } else { 2 });
    common::at_least_one("--batch-size", batch)?;
    let size = a
        .image_size
        .unwrap_or(ImageSize::square(if gpu { 224 } else { 64 }));
    let schedule = a.profile.schedule();
    common::at_most_repeats("--iterations", a.iterations)?;
    anyhow::ensure!(
        (0..a.iterations).any(|i| schedule.is_timed(i)),
        "--iterations ({}) leaves no iteration timed by the schedule ({schedule})",
        a.iterations
    );
    Ok((batch, size))
}

fn run() -> Result<()> {
    let mut a = Args::parse();
    a.profile.default_verbosity(2);
    a.model.apply_threads()?;
    wick::prepare_process();
    let device = a.model.device()?;
    let gpu = !device.is_cpu();
    let config = a.model.config("resnet50")?;
    if a.compare_passes {
        a.profile.refuse_outputs_beside_compare_passes()?;
    }
    a.profile.check(&mut FileRoles::default())?;
    let (batch, size) = batch_and_size(&a, gpu)?;

    let sgd = SgdParams {
        lr: a.lr,
        momentum: 0.9,
        weight_decay: 1e-5,
        ..Default::default()
    };
    Session::check_fits(config, batch, size)?;
    let (images, labels) =
        SyntheticImages::new(config.num_classes().min(10), batch, size, 1)?.next_batch()?;
    let images = images.to_device(&device)?;
    if a.compare_passes {
        let mut sessions = Vec::new();
        for passes in [PassSet::NONE, a.model.passes(PassSet::default())] {
            let options = TrainOptions {
                passes,
                precision: a.model.precision,
                ..sgd.into()
            };
            let mut s = Session::training(config, batch, size, options, &device)?;
            common::log_passes(&s);
            s.init_weights(WeightInit::Torchvision(0))?;
            sessions.push(s);
        }
        let [mut plain, mut fused] = <[Session; 2]>::try_from(sessions).expect("two sessions");
        return common::compare_passes(
            &mut plain,
            &mut fused,
            a.iterations,
            a.profile.schedule(),
            |s| s.step(&images, &labels).map(|_| ()).map_err(Into::into),
        );
    }
    // SINGA's op list by default: no pass unless --passes asks for one.
    let options = TrainOptions {
        passes: a.model.passes(PassSet::NONE),
        precision: a.model.precision,
        ..sgd.into()
    };
    let mut session = Session::training(config, batch, size, options, &device)?;
    common::log_passes(&session);
    session.init_weights(WeightInit::Torchvision(0))?;
    a.profile.attach(&mut session)?;

    println!(
        "{}, batch {batch}, {size} (width x height), {}, {} ops per iteration, {:?}, {} CPU threads; {} iterations, {}",
        config.describe(),
        common::precision_label(a.model.precision),
        session.executor().graph().nodes().len(),
        device.location(),
        common::threads(),
        a.iterations,
        match a.profile.schedule {
            Some(s) => format!("schedule {s}"),
            None => format!("{} skipped", a.profile.skip()),
        }
    );
    for _ in 0..a.iterations {
        session.step(&images, &labels)?;
    }
    a.profile.report(&session)?;
    Ok(())
}
