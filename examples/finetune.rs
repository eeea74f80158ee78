//! Fine-tuning with a frozen backbone: a zoo ResNet-18 whose every layer but the
//! classifier is frozen (no gradient, no update) and in eval mode (batch norm with its
//! running statistics), next to the same model trained whole. Backward prunes what only
//! the frozen layers needed, so the fine-tuning step runs a fraction of the nodes; the
//! two are timed side by side (alternating, medians) and the fine-tuned loss falls on a
//! fixed batch.
//!
//! cargo run --release --example finetune -- --steps 8

use std::time::Instant;

use anyhow::Result;
use candle_core::{DType, Device};
use clap::Parser;
use wick::graph::{Executor, GraphBuilder, Mode, ParamSelector, ValueId};
use wick::models::data::{BatchSource, SyntheticImages};
use wick::models::nn::{self, Layers};
use wick::models::{ModelConfig, Stem};
use wick::ops::SgdParams;

#[derive(Parser, Debug)]
#[command(
    about = "Fine-tune a zoo model's classifier with its backbone frozen, timed beside a full step"
)]
struct Args {
    /// A zoo model (`wick::models::registry::names()`).
    #[arg(long, default_value = "resnet18")]
    model: String,
    /// Timed steps of each kind (alternating).
    #[arg(long, default_value_t = 8)]
    steps: usize,
    /// Images per batch.
    #[arg(long, default_value_t = 8)]
    batch_size: usize,
    /// Image side.
    #[arg(long, default_value_t = 32)]
    image_size: usize,
}

const CLASSES: usize = 10;

/// A training step of `config`; with `frozen`, everything but `fc` is frozen and in eval
/// mode. Returns the executor and the loss.
fn step_graph(config: &ModelConfig, args: &Args, frozen: bool) -> Result<(Executor, ValueId)> {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let (n, s) = (args.batch_size, args.image_size);
    let images = b.input("images", &[n, 3, s, s], DType::F32)?;
    let labels = b.input("labels", &[n], DType::I64)?;
    let mut layers = Layers::new(&mut b);
    let logits = if frozen {
        layers.eval(|nn| config.record(nn, images))?
    } else {
        config.record(&mut layers, images)?
    };
    let loss = b.cross_entropy(logits, labels)?;
    b.output(loss);
    if frozen {
        b.freeze(&!ParamSelector::InLayer("fc".into()))?;
    }
    let grads = b.backward(loss)?;
    b.sgd(
        &grads,
        SgdParams {
            lr: 0.05,
            momentum: 0.9,
            ..Default::default()
        },
    )?;
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    for (name, t) in nn::initial_state(&config.state_spec()?, 0)? {
        exec.set(&name, &t)?;
    }
    Ok((exec, loss))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let args = Args::parse();
    let config = ModelConfig::by_name(&args.model, Stem::Cifar, Some(CLASSES))?;
    let (x, y) =
        SyntheticImages::new(CLASSES, args.batch_size, args.image_size, 0)?.next_batch()?;
    let y = y.to_dtype(DType::I64)?;
    let mut runs = Vec::new();
    for frozen in [false, true] {
        let (mut exec, loss) = step_graph(&config, &args, frozen)?;
        exec.set("images", &x)?;
        exec.set("labels", &y)?;
        exec.run()?; // warm-up
        runs.push((exec, loss, Vec::new(), Vec::new()));
    }
    for _ in 0..args.steps {
        for (exec, loss, times, losses) in runs.iter_mut() {
            let start = Instant::now();
            exec.run()?;
            times.push(start.elapsed().as_secs_f64());
            losses.push(exec.get_id(*loss)?.expect("an output").to_scalar::<f32>()?);
        }
    }
    println!(
        "{} (CIFAR stem), batch {} at {}x{}, {} steps each, alternating",
        config.name(),
        args.batch_size,
        args.image_size,
        args.image_size,
        args.steps
    );
    let full = median(runs[0].2.clone());
    for (name, (exec, _, times, losses)) in ["full step", "frozen backbone"].iter().zip(&runs) {
        let t = median(times.clone());
        let nodes = exec.graph().nodes().len();
        println!(
            "{name:<16} {nodes:>4} nodes  median {:>7.1} ms  ({:.2}x the full step)  loss {:.4} -> {:.4}",
            t * 1e3,
            t / full,
            losses[0],
            losses[losses.len() - 1]
        );
    }
    Ok(())
}
