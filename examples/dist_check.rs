//! Data-parallel training over MPI, checked against one process:
//! 1. every rank trains a small conv net (no batch norm) on its shard of each batch, with
//!    gradients averaged by `DistAllReduce` nodes over MPI, and also the same net on the
//!    whole batch alone; the two sets of weights must agree to float32 rounding;
//! 2. ResNet-18 (CIFAR stem, the resnet18-formula fixture's weights and SGD settings):
//!    each rank takes one step on its shard of a batch of 16 with synchronised batch norm;
//!    every updated tensor, batch-norm statistics included, must match one process on the
//!    whole batch within the fixture's float32 tolerances. The same with per-rank batch
//!    norm (PyTorch DDP's default) is printed for comparison.
//!
//! Prints the small net's data-parallel profile on rank 0 and exits 1 on a mismatch.
//!
//!   cargo build --release --features mpi --example dist_check
//!   mpirun -np 2 target/release/examples/dist_check [--fail-rank R | --stall-rank R]
//!
//! `--fail-rank R`: rank R fails its second step (the job must end, non-zero).
//! `--stall-rank R`: rank R hangs in its second step; the others' collectives time out
//! after `WICK_DIST_TIMEOUT_S` seconds (default 300) and end the job.

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use wick::graph::collective::{Communicator, MpiCommunicator};
use wick::graph::passes::data_parallel::{DataParallelOptions, DEFAULT_BUCKET_BYTES};
use wick::graph::{Executor, Graph, GraphBuilder, Mode, ValueKind};
use wick::models::init::formula::{self, uniform};
use wick::models::{Depth, ResNetConfig, Session, Stem, WeightInit};
use wick::ops::{Conv2dParams, KernelPath, SgdParams};
use wick::profiler::TimeProfiler;

const BATCH: usize = 8;
const STEPS: u64 = 3;
const PARAMS: [&str; 3] = ["conv.weight", "fc.weight", "fc.bias"];

/// conv 3->8, ReLU, global average pool, linear 8->4, cross-entropy, SGD with momentum.
fn graph(batch: usize) -> Result<Graph> {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let images = b.input("images", &[batch, 3, 16, 16], DType::F32)?;
    let labels = b.input("labels", &[batch], DType::U32)?;
    let w = b.param("conv.weight", &[8, 3, 3, 3])?;
    let h = b.conv2d(images, w, None, Conv2dParams::new(1, 1))?;
    let h = b.relu(h)?;
    let h = b.global_avg_pool(h)?;
    let h = b.flatten(h)?;
    let (fw, fb) = (b.param("fc.weight", &[4, 8])?, b.param("fc.bias", &[4])?);
    let logits = b.linear(h, fw, Some(fb))?;
    let loss = b.cross_entropy(logits, labels)?;
    b.output(loss);
    let grads = b.backward(loss)?;
    let sgd = SgdParams {
        lr: 0.5,
        momentum: 0.9,
        ..Default::default()
    };
    b.sgd(&grads, sgd)?;
    Ok(b.finish())
}

/// Values in [-1, 1) of the stream `name` (the fixture formula's generator).
fn values(name: &str, n: usize) -> Vec<f32> {
    uniform(name, n)
        .iter()
        .map(|u| (2.0 * u - 1.0) as f32)
        .collect()
}

fn executor(graph: Graph) -> Result<Executor> {
    let mut exec = Executor::new(graph, &Device::Cpu);
    let params: Vec<_> = exec.graph().values_of(ValueKind::Param).collect();
    for p in params {
        let info = exec.graph().value(p).clone();
        let n = info.shape.iter().product();
        exec.set(
            &info.name,
            &Tensor::from_vec(values(&info.name, n), info.shape, &Device::Cpu)?,
        )?;
    }
    Ok(exec)
}

/// Images `from..to` of step `step`'s whole batch, and their labels.
fn feed(exec: &mut Executor, step: u64, from: usize, to: usize) -> Result<()> {
    let per = 3 * 16 * 16;
    let all = values(&format!("images {step}"), BATCH * per);
    let images = Tensor::from_vec(
        all[from * per..to * per].to_vec(),
        (to - from, 3, 16, 16),
        &Device::Cpu,
    )?;
    let labels: Vec<u32> = (from..to)
        .map(|i| (i as u32 * 3 + step as u32) % 4)
        .collect();
    exec.set("images", &images)?;
    exec.set("labels", &Tensor::new(labels, &Device::Cpu)?)?;
    Ok(())
}

fn main() -> std::process::ExitCode {
    let comm = match MpiCommunicator::init() {
        Ok(c) => Arc::new(c),
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match run(&comm) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "error: rank {} of {}: {}",
                comm.rank(),
                comm.size(),
                wick::error_chain(e.as_ref())
            );
            // The other ranks wait in a collective for this one: end them all.
            comm.abort(1)
        }
    }
}

fn run(comm: &Arc<MpiCommunicator>) -> Result<()> {
    let (mut fail_rank, mut stall_rank) = (None, None);
    match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [] => {}
        [flag, r] if flag == "--fail-rank" => {
            fail_rank = Some(r.parse::<usize>().context("--fail-rank takes a rank")?)
        }
        [flag, r] if flag == "--stall-rank" => {
            stall_rank = Some(r.parse::<usize>().context("--stall-rank takes a rank")?)
        }
        other => bail!(
            "unexpected arguments {other:?} (usage: dist_check [--fail-rank R | --stall-rank R])"
        ),
    }
    let (rank, size) = (comm.rank(), comm.size());
    if !BATCH.is_multiple_of(size) {
        bail!("{size} ranks do not divide the batch of {BATCH}");
    }
    let shard = BATCH / size;
    let mut parallel = graph(shard)?;
    let buckets = parallel.apply_data_parallel(comm.clone(), DEFAULT_BUCKET_BYTES)?;
    let mut dp = executor(parallel)?;
    dp.add_hook(TimeProfiler::new(2, 1))?;
    let mut alone = executor(graph(BATCH)?)?;
    for step in 0..STEPS {
        if fail_rank == Some(rank) && step == 1 {
            bail!("failing step {step} on purpose (--fail-rank)");
        }
        if stall_rank == Some(rank) && step == 1 {
            // A hung rank: the others' collectives time out (WICK_DIST_TIMEOUT_S).
            eprintln!("rank {rank} of {size}: stalling at step {step} on purpose (--stall-rank)");
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
        feed(&mut dp, step, rank * shard, (rank + 1) * shard)?;
        dp.run()
            .with_context(|| format!("rank {rank} of {size}, step {step}"))?;
        feed(&mut alone, step, 0, BATCH)?;
        alone.run()?;
    }
    let mut worst = 0f32;
    for p in PARAMS {
        let (a, b) = (dp.get(p)?.context(p)?, alone.get(p)?.context(p)?);
        let (a, b): (Vec<f32>, Vec<f32>) =
            (a.flatten_all()?.to_vec1()?, b.flatten_all()?.to_vec1()?);
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        let err = a
            .iter()
            .zip(&b)
            .fold(0f32, |m, (x, y)| m.max((x - y).abs()))
            / scale;
        worst = worst.max(err);
    }
    println!(
        "rank {rank} of {size} (mpi): {shard} of {BATCH} images per step, {} bucket(s), {STEPS} steps; weights within {worst:.1e} of one process on the whole batch",
        buckets.buckets.len()
    );
    if rank == 0 {
        if let Some(profiler) = dp.hook::<TimeProfiler>() {
            print!("{}", profiler.profile().singa_lines());
        }
    }
    if worst > 1e-5 {
        bail!("rank {rank}: data-parallel weights differ from the whole batch's by {worst:.2e}");
    }
    resnet18_check(&(comm.clone() as Arc<dyn Communicator>))
}

/// Step 2 of the check (see the file's comment); prints the errors and fails when the
/// synchronised run is further from one process than float32 rounding allows.
fn resnet18_check(comm: &Arc<dyn Communicator>) -> Result<()> {
    let (rank, size) = (comm.rank(), comm.size());
    if !RESNET_BATCH.is_multiple_of(size) {
        bail!("{size} ranks do not divide the batch of {RESNET_BATCH}");
    }
    let start = state_of(&resnet18(RESNET_BATCH, None)?)?;
    let mut one = resnet18(RESNET_BATCH, None)?;
    resnet18_step(&mut one, 0, RESNET_BATCH)?;
    let one = state_of(&one)?;
    // Float32's own spread: the same process on candle's device-generic kernels instead
    // of wick's CPU kernels (other summation orders, the same arithmetic).
    let mut generic = resnet18(RESNET_BATCH, None)?;
    KernelPath::Generic.scope(|| resnet18_step(&mut generic, 0, RESNET_BATCH))?;
    let floor = update_errors(&start, &state_of(&generic)?, &one);
    let shard = RESNET_BATCH / size;
    let mut errors = Vec::new();
    for sync in [true, false] {
        let mut dp = resnet18(shard, Some((comm.clone(), sync)))?;
        resnet18_step(&mut dp, rank * shard, shard)?;
        errors.push(update_errors(&start, &state_of(&dp)?, &one));
    }
    let line = |what: &str, e: &UpdateErrors| {
        format!(
            "{what}: weights median {:.1e}, worst {:.1e} ({}); batch-norm statistics median {:.1e}, worst {:.1e} ({})",
            e.weights.0, e.weights.1, e.weights.2, e.statistics.0, e.statistics.1, e.statistics.2
        )
    };
    println!(
        "rank {rank} of {size} (mpi): ResNet-18 CIFAR, {shard} of {RESNET_BATCH} images, 1 step; per-tensor update errors against one process on the whole batch:"
    );
    println!("  {}", line("synchronised batch norm", &errors[0]));
    println!(
        "  {}",
        line("per-rank batch norm (DDP's default)", &errors[1])
    );
    println!(
        "  {}",
        line("float32 spread (one process, generic kernels)", &floor)
    );
    for (what, got, spread) in [
        ("weights", &errors[0].weights, &floor.weights),
        (
            "batch-norm statistics",
            &errors[0].statistics,
            &floor.statistics,
        ),
    ] {
        let (median_limit, worst_limit) = (2.0 * spread.0 + 1e-6, 2.0 * spread.1 + 1e-6);
        if got.0 > median_limit || got.1 > worst_limit {
            bail!(
                "rank {rank}: with synchronised batch norm, the {what}' updates differ from one process's by more than twice float32's spread: median {:.2e} (limit {median_limit:.2e}), worst {:.2e} (limit {worst_limit:.2e}, {})",
                got.0, got.1, got.2
            );
        }
    }
    Ok(())
}

/// The ResNet-18 check's whole batch.
const RESNET_BATCH: usize = 16;
/// Per-tensor relative errors of one step's updates: (median, worst, worst tensor).
struct UpdateErrors {
    weights: (f64, f64, String),
    statistics: (f64, f64, String),
}

/// A ResNet-18 CIFAR training session for `batch` images with the formula weights and the
/// resnet18-formula fixture's SGD settings; data-parallel over `dp` (communicator, sync
/// batch norm) when given.
fn resnet18(batch: usize, dp: Option<(Arc<dyn Communicator>, bool)>) -> Result<Session> {
    let config = ResNetConfig::new(Depth::R18, Stem::Cifar, 10)?;
    let sgd = SgdParams {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 5e-4,
        ..Default::default()
    };
    let cpu = Device::Cpu;
    let mut s = match dp {
        Some((comm, sync)) => {
            let options = DataParallelOptions {
                sync_batch_norm: sync,
                ..Default::default()
            };
            Session::training_data_parallel(config, batch, 32, sgd.into(), comm, &options, &cpu)?
        }
        None => Session::training(config, batch, 32, sgd.into(), &cpu)?,
    };
    s.init_weights(WeightInit::Formula)?;
    Ok(s)
}

/// One step on images `from..from + n` of the formula batch of 16.
fn resnet18_step(s: &mut Session, from: usize, n: usize) -> Result<()> {
    let (images, labels) = formula::batch(RESNET_BATCH, 32, 10)?;
    s.step(&images.narrow(0, from, n)?, &labels.narrow(0, from, n)?)?;
    Ok(())
}

/// Every floating-point state-dict tensor, in f64.
fn state_of(s: &Session) -> Result<Vec<(String, Vec<f64>)>> {
    let mut out = Vec::new();
    for (name, t) in s.state_dict()? {
        if t.dtype().is_float() {
            out.push((name, t.to_dtype(DType::F64)?.flatten_all()?.to_vec1()?));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Per-tensor relative errors of `got`'s one-step updates from `start` against `want`'s,
/// `max |Δ_got - Δ_want| / max |Δ_want|`, split into weights and batch-norm statistics.
fn update_errors(
    start: &[(String, Vec<f64>)],
    got: &[(String, Vec<f64>)],
    want: &[(String, Vec<f64>)],
) -> UpdateErrors {
    let (mut weights, mut statistics) = (Vec::new(), Vec::new());
    for ((name, w0), ((_, g), (_, w))) in start.iter().zip(got.iter().zip(want)) {
        let (mut diff, mut scale) = (0f64, f64::MIN_POSITIVE);
        for ((a, b), s) in g.iter().zip(w).zip(w0) {
            diff = diff.max(((a - s) - (b - s)).abs());
            scale = scale.max((b - s).abs());
        }
        let target = if name.contains("running_") {
            &mut statistics
        } else {
            &mut weights
        };
        target.push((diff / scale, name.clone()));
    }
    let summary = |mut v: Vec<(f64, String)>| {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        let median = v.get(v.len() / 2).map_or(0.0, |x| x.0);
        let (worst, name) = v.pop().unwrap_or((0.0, String::new()));
        (median, worst, name)
    };
    UpdateErrors {
        weights: summary(weights),
        statistics: summary(statistics),
    }
}
