//! Runs a ResNet checkpoint on a batch file and writes the logits, or classifies JPEG and
//! PNG files (top-5, named by the checkpoint's classes); with `--bench`, measures latency:
//! warm-up runs, device synchronisation before each clock read, mean, spread and the
//! percentiles the sample count supports.
//!
//!   cargo run --release --example infer_resnet -- --weights W.safetensors --image a.jpg b.png
//!   cargo run --release --example infer_resnet -- --model resnet50 --num-classes 1000 \
//!       --weights W.safetensors --input B.safetensors --output O.safetensors
//!   cargo run --release --example infer_resnet -- --model resnet50 --bench

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use candle_core::{Device, Tensor};
use clap::Parser;
use wick::file_roles::FileRoles;
use wick::graph::PassSet;
use wick::models::data::decode::RgbImage;
use wick::models::data::transforms::ImageTransform;
use wick::models::data::{BatchFile, BatchSource, SyntheticImages};
use wick::models::{checkpoint, ImageSize, Session, WeightInit};
use wick::profiler::Schedule;

/// Transparent huge pages under every big block (see `wick::allocator`).
#[global_allocator]
static ALLOC: wick::allocator::HugePageAlloc = wick::allocator::HugePageAlloc;

mod common;

#[derive(Parser)]
#[command(about = "Run a ResNet with wick: logits for a batch, or a latency benchmark")]
struct Args {
    #[command(flatten)]
    model: common::ModelArgs,
    /// Safetensors checkpoint with torchvision names (fresh torchvision init if absent).
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Batch file with `images` f32 [N, 3, H, W] (random images if absent).
    #[arg(long)]
    input: Option<PathBuf>,
    /// Classify these JPEG or PNG files: torchvision's evaluation transform (the shorter
    /// side resized to --image-size x 256/224, CenterCrop(--image-size), ImageNet's
    /// normalisation), then each file's top-5 classes, named when the checkpoint carries
    /// its classes (a train_resnet run on an ImageFolder).
    #[arg(long, num_args = 1.., conflicts_with = "input")]
    image: Vec<PathBuf>,
    /// Write the logits here as a safetensors file with one tensor, `logits`.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Batch size of the random images (without --input).
    #[arg(long, default_value_t = 1)]
    batch_size: usize,
    /// Size of the random images (without --input): 224 for 224x224, or WIDTHxHEIGHT such
    /// as 320x224.
    #[arg(long, default_value = "224")]
    image_size: ImageSize,
    /// Write logits that hold a NaN or an infinity (refused by default: they come from
    /// broken weights or input).
    #[arg(long)]
    allow_non_finite: bool,
    /// Measure latency: warm-up runs, then timed repetitions and their statistics.
    #[arg(long)]
    bench: bool,
    /// Run the graph without passes and with --passes (default: every pass) alternately,
    /// --warmup + --reps runs each, and print per op type, per phase and per run the
    /// time before, after and the ratio.
    #[arg(long)]
    compare_passes: bool,
    /// Untimed warm-up runs for --bench and --compare-passes.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Timed repetitions for --bench and --compare-passes.
    #[arg(long, default_value_t = 20)]
    reps: usize,
    #[command(flatten)]
    profile: common::ProfileArgs,
}

fn main() -> std::process::ExitCode {
    common::exit_on_error(run())
}

fn run() -> Result<()> {
    let mut a = Args::parse();
    a.profile.default_verbosity(0);
    check_args(&mut a)?;
    a.model.apply_threads()?;
    wick::prepare_process();
    let device = a.model.device()?;
    // A checkpoint that names its classes sets their number.
    let names = match &a.weights {
        Some(w) => checkpoint::read_class_names(w)?,
        None => None,
    };
    if let (Some(names), None) = (&names, a.model.num_classes) {
        a.model.num_classes = Some(names.len());
    }
    let config = a.model.config("resnet50")?;
    let images = match &a.input {
        Some(path) => BatchFile::open(path)?.images,
        None if !a.image.is_empty() => image_batch(&a.image, a.image_size)?,
        None => {
            SyntheticImages::new(10, a.batch_size, a.image_size, 7)?
                .next_batch()?
                .0
        }
    };
    let (n, size) = (
        images.dim(0)?,
        ImageSize::new(images.dim(3)?, images.dim(2)?),
    );
    let passes = a.model.passes(PassSet::default());
    let mut session =
        Session::inference_with(config, n, size, (passes, a.model.precision), &device)?;
    common::log_passes(&session);
    a.profile.attach(&mut session)?;
    match &a.weights {
        Some(w) => session.load_checkpoint(w)?,
        None => {
            eprintln!("no --weights given: using a fresh torchvision initialisation");
            session.init_weights(WeightInit::Torchvision(0))?
        }
    }
    // The input is moved to the device once, outside any timed region.
    let images = images.to_device(&device)?;
    if a.compare_passes {
        anyhow::ensure!(
            a.profile.verbosity.unwrap_or(0) == 0,
            "--compare-passes prints its own profile: leave --verbosity out"
        );
        let plain_passes = (PassSet::NONE, a.model.precision);
        let mut plain = Session::inference_with(config, n, size, plain_passes, &device)?;
        plain.copy_weights_from(&session)?;
        return common::compare_passes(
            &mut plain,
            &mut session,
            a.warmup + a.reps,
            Schedule::skip(a.warmup),
            |s| s.forward(&images).map(|_| ()).map_err(Into::into),
        );
    }
    let logits = logits(&mut session, &images, a.allow_non_finite)?;
    if !a.image.is_empty() {
        print_top5(&a.image, &logits, names.as_deref())?;
    } else if a.output.is_none() && !a.bench {
        println!(
            "logits {:?} computed; --output FILE writes them, --image FILE... names each file's top-5 classes, --bench measures latency",
            logits.dims()
        );
    }
    if let Some(path) = &a.output {
        let out = HashMap::from([("logits".to_string(), logits.to_device(&Device::Cpu)?)]);
        checkpoint::write_safetensors(&out, path)?;
        println!("logits {:?} written to {}", logits.dims(), path.display());
    }
    if a.bench {
        bench(&mut session, &images, &device, &a)?;
    }
    a.profile.report(&session)?;
    Ok(())
}

/// Every file of the command and the bench's flags, before any work: no output may be an
/// input or another output, however its path is spelled.
fn check_args(a: &mut Args) -> Result<()> {
    let mut files = FileRoles::default();
    wick::graph::atomic_write::allow_read_only_replacement(a.profile.replace_read_only);
    for (flag, path) in [("--weights", &a.weights), ("--input", &a.input)] {
        if let Some(path) = path {
            files.input(flag, path)?;
        }
    }
    for path in &a.image {
        files.input("--image", path)?;
    }
    if let Some(path) = &a.output {
        files.output("--output", path)?;
    }
    common::at_least_one("--batch-size", a.batch_size)?;
    if a.bench {
        common::at_least_one("--reps", a.reps)?;
        common::at_most_repeats("--reps", a.reps)?;
        common::at_most_repeats("--warmup", a.warmup)?;
        // The profile times exactly the bench's repetitions: the first run (the logits)
        // and the warm-up runs are skipped.
        anyhow::ensure!(
            a.profile.skip.is_none() && a.profile.schedule.is_none(),
            "--bench times its --reps after --warmup: leave --skip and --schedule out"
        );
        a.profile.skip = Some(1 + a.warmup);
    }
    if a.compare_passes {
        a.profile.refuse_outputs_beside_compare_passes()?;
        anyhow::ensure!(
            a.output.is_none(),
            "--compare-passes prints its comparison and writes no logits: --output would not be written; drop it, or run once without --compare-passes"
        );
    }
    a.profile.check(&mut files)?;
    Ok(())
}

/// The logits of `images`; non-finite ones are an error unless `allow_non_finite`.
fn logits(session: &mut Session, images: &Tensor, allow_non_finite: bool) -> Result<Tensor> {
    let logits = session.forward(images)?;
    if let Some((i, v)) = wick::ops::first_non_finite(&logits)? {
        let classes = logits.dim(1)?;
        let where_ = format!("image {}, class {}", i / classes, i % classes);
        anyhow::ensure!(
            allow_non_finite,
            "the logits hold {v} at {where_}: the weights or the input are broken; nothing written (--allow-non-finite writes them anyway)"
        );
        eprintln!("warning: the logits hold {v} at {where_} (written: --allow-non-finite)");
    }
    Ok(logits)
}

/// `files` decoded and transformed for evaluation at `size`, as one batch.
fn image_batch(files: &[PathBuf], size: ImageSize) -> Result<Tensor> {
    let transform = ImageTransform::eval(size);
    let per = 3 * size.pixels();
    let mut data = vec![0f32; files.len() * per];
    let mut scratch = Vec::new();
    // Evaluation draws nothing at random.
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(0);
    for (file, out) in files.iter().zip(data.chunks_exact_mut(per)) {
        let image = RgbImage::open(file)?;
        transform.apply(&image, &mut rng, out, &mut scratch);
    }
    Ok(Tensor::from_vec(
        data,
        (files.len(), 3, size.height, size.width),
        &Device::Cpu,
    )?)
}

/// Each file's five likeliest classes (softmax), by name when `names` has them.
fn print_top5(files: &[PathBuf], logits: &Tensor, names: Option<&[String]>) -> Result<()> {
    let rows = logits.to_dtype(candle_core::DType::F64)?.to_vec2::<f64>()?;
    for (file, row) in files.iter().zip(rows) {
        let top = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row.iter().map(|v| (v - top).exp()).sum();
        let mut ranked: Vec<(usize, f64)> = row
            .iter()
            .map(|v| (v - top).exp() / sum)
            .enumerate()
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
        let shown: Vec<String> = ranked
            .iter()
            .take(5)
            .map(|(class, p)| {
                let name = names
                    .and_then(|n| n.get(*class))
                    .cloned()
                    .unwrap_or_else(|| format!("class {class}"));
                format!("{name} {:.1}%", 100.0 * p)
            })
            .collect();
        println!("{}: {}", file.display(), shown.join(", "));
    }
    Ok(())
}

/// Latency: warm-up, then repetitions each ending with a device synchronisation before
/// the clock is read, so queued GPU work is inside the measurement.
fn bench(session: &mut Session, images: &Tensor, device: &Device, a: &Args) -> Result<()> {
    anyhow::ensure!(a.reps > 0, "--reps must be at least 1");
    for _ in 0..a.warmup {
        session.forward(images)?;
        device.synchronize()?;
    }
    let mut ms = Vec::with_capacity(a.reps);
    for _ in 0..a.reps {
        device.synchronize()?;
        let start = Instant::now();
        session.forward(images)?;
        device.synchronize()?;
        ms.push(start.elapsed().as_secs_f64() * 1e3);
    }
    let mean = ms.iter().sum::<f64>() / ms.len() as f64;
    let std = (ms.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / ms.len() as f64).sqrt();
    let mut sorted = ms.clone();
    sorted.sort_by(f64::total_cmp);
    let pct = |p: f64| sorted[((p / 100.0) * (sorted.len() - 1) as f64).round() as usize];
    println!(
        "latency of {} on {:?}: batch {}, {} (width x height), {}, {} CPU threads, {} warm-up + {} timed runs; input already on the device",
        session.config().name(),
        device.location(),
        session.batch_size(),
        session.image_size(),
        common::precision_label(session.executor().graph().precision()),
        common::threads(),
        a.warmup,
        a.reps
    );
    println!("method: host clock (std::time::Instant) around each run, device synchronised before reading it");
    // Only the percentiles with at least one sample above them (p99 needs 100 runs).
    let percentiles: String = common::supported_percentiles(sorted.len())
        .into_iter()
        .map(|p| format!("p{p} {:.3} ms, ", pct(p)))
        .collect();
    println!(
        "mean {mean:.3} ms, std {std:.3} ms, {percentiles}min {:.3} ms, max {:.3} ms",
        sorted[0],
        sorted[sorted.len() - 1]
    );
    Ok(())
}
