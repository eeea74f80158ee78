//! Data-parallel training over MPI, checked against one process: every rank trains a
//! small conv net (no batch norm) on its shard of each batch, with gradients averaged by
//! `DistAllReduce` nodes over MPI. Each rank also trains the same net on the whole batch
//! alone. After the steps, the two sets of weights must agree to float32 rounding.
//! Prints the data-parallel graph's profile on rank 0 and exits 1 on a mismatch.
//!
//!   cargo build --release --features mpi --example dist_check
//!   mpirun -np 2 target/release/examples/dist_check [--fail-rank R]

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use wick::graph::dist::{Communicator, MpiCommunicator};
use wick::graph::passes::data_parallel::DEFAULT_BUCKET_BYTES;
use wick::graph::{Executor, Graph, GraphBuilder, Mode, TimeProfiler, ValueKind};
use wick::models::init::formula::uniform;
use wick::ops::{Conv2dParams, SgdParams};

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
            eprintln!("error: rank {} of {}: {e:#}", comm.rank(), comm.size());
            // The other ranks wait in a collective for this one: end them all.
            comm.abort(1)
        }
    }
}

fn run(comm: &Arc<MpiCommunicator>) -> Result<()> {
    let fail_rank: Option<usize> = match std::env::args().skip(1).collect::<Vec<_>>().as_slice() {
        [] => None,
        [flag, r] if flag == "--fail-rank" => Some(r.parse().context("--fail-rank takes a rank")?),
        other => bail!("unexpected arguments {other:?} (usage: dist_check [--fail-rank R])"),
    };
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
        buckets.len()
    );
    if rank == 0 {
        if let Some(profiler) = dp.hook::<TimeProfiler>() {
            print!("{}", profiler.profile().singa_lines());
        }
    }
    if worst > 1e-5 {
        bail!("rank {rank}: data-parallel weights differ from the whole batch's by {worst:.2e}");
    }
    Ok(())
}
