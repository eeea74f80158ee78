//! A CNN of your own, not from the zoo, trained and profiled through wick's public API:
//! the module layer names and initialises each layer's parameters from one path, a custom
//! op (Mish, with its own backward) joins the graph beside the built-in ones, and AdamW
//! (no weight decay on biases and norm weights, gradients clipped to norm 1) runs in the
//! graph's optimizer phase. The profiler times the custom op like any other.
//!
//! cargo run --release --example custom_cnn -- --steps 30

use anyhow::Result;
use candle_core::{DType, Device, Tensor};
use clap::Parser;
use wick::graph::nodes::optim::{Optimizer, OptimizerConfig, ParamSelector};
use wick::graph::{
    arg, args, one, BackwardCtx, Executor, GraphBuilder, Inputs, KernelResult, Mode, NodeOp,
    ValueId,
};
use wick::models::data::{BatchSource, SyntheticImages};
use wick::models::nn::{self, Conv, Init, Layers};
use wick::ops::{AdamParams, CustomKernel, Kernel, KernelClass, KernelPhase, OpError};
use wick::profiler::TimeProfiler;
use wick::profiler::{RecordLevel, Schedule};

#[derive(Parser, Debug)]
#[command(about = "Train and profile a user-defined CNN with a custom op and AdamW")]
struct Args {
    /// Training steps.
    #[arg(long, default_value_t = 30)]
    steps: usize,
    /// Images per batch.
    #[arg(long, default_value_t = 16)]
    batch_size: usize,
    /// Image side.
    #[arg(long, default_value_t = 32)]
    image_size: usize,
    /// AdamW's learning rate.
    #[arg(long, default_value_t = 3e-3)]
    lr: f64,
}

const CLASSES: usize = 10;

/// Mish, `x · tanh(softplus(x))`: a custom op. in: x; out: y.
#[derive(Debug)]
struct Mish;

/// Mish's gradient. in: grad_y, x; out: grad_x.
#[derive(Debug)]
struct MishBackward;

fn candle(e: candle_core::Error) -> OpError {
    OpError::candle("mish", e)
}

/// `(tanh(softplus(x)), sigmoid(x))`.
fn mish_parts(x: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
    let softplus = (x.exp()? + 1.0)?.log()?;
    let sigmoid = (x.neg()?.exp()? + 1.0)?.recip()?;
    Ok((softplus.tanh()?, sigmoid))
}

/// The forward's kernel: the name the profiler prints, how it classes and times it.
const MISH_FORWARD: CustomKernel = CustomKernel {
    name: "MishForward",
    class: KernelClass::Elementwise,
    phase: KernelPhase::Forward,
};

/// The gradient's kernel, counted in the backward phase.
const MISH_BACKWARD: CustomKernel = CustomKernel {
    phase: KernelPhase::Backward,
    name: "MishBackward",
    ..MISH_FORWARD
};

impl NodeOp for Mish {
    fn kernel(&self) -> Kernel {
        Kernel::Custom(MISH_FORWARD)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let x = arg(inputs, 0, "mish")?;
        let (t, _) = mish_parts(x).map_err(candle)?;
        one((x * t).map_err(candle)?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> wick::graph::Result<()> {
        let (gy, x) = (ctx.grad_y()?, ctx.input(0));
        let flops = 12 * ctx.shape(x).iter().product::<usize>() as u64;
        // One node computes x's gradient from gy and x; it is added to x's others.
        ctx.record_input_grad(MishBackward, vec![gy, x], "grad.mish", flops)
    }
}

impl NodeOp for MishBackward {
    fn kernel(&self) -> Kernel {
        Kernel::Custom(MISH_BACKWARD)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [gy, x] = args(inputs, "mish")?;
        // d/dx x·tanh(sp(x)) = tanh(sp) + x · (1 - tanh²(sp)) · sigmoid(x).
        let (t, s) = mish_parts(x).map_err(candle)?;
        let d = (&t
            + ((x * (1.0 - t.sqr().map_err(candle)?).map_err(candle)?).map_err(candle)? * s)
                .map_err(candle)?)
        .map_err(candle)?;
        one((gy * d).map_err(candle)?)
    }
}

/// Mish as a builder call, inside the current layer.
fn mish(b: &mut GraphBuilder, x: ValueId) -> wick::graph::Result<ValueId> {
    let shape = b.shape(x).to_vec();
    let flops = 8 * shape.iter().product::<usize>() as u64;
    Ok(b.custom_op(Mish, &[x], vec![("mish", shape, DType::F32)], flops)?[0])
}

/// The network: a conv stem, two depthwise-separable blocks with squeeze-excitation (the
/// second one residual), global average, dropout and a linear classifier.
fn network(nn: &mut Layers, images: ValueId) -> wick::graph::Result<ValueId> {
    let h = nn.conv2d(
        "stem.conv",
        images,
        Conv::new(3, 32, 3).stride(2).padding(1),
    )?;
    let h = nn.batch_norm("stem.bn", h, 32)?;
    let mut h = nn.scope("stem.act", |nn| mish(nn.builder(), h))?;
    for (i, stride) in [2, 1].into_iter().enumerate() {
        h = nn.scope(&format!("blocks.{i}"), |nn| {
            let y = nn.conv2d(
                "dw",
                h,
                Conv::new(32, 32, 3).stride(stride).padding(1).groups(32),
            )?;
            let y = nn.batch_norm("dw_bn", y, 32)?;
            let y = nn.scope("act", |nn| mish(nn.builder(), y))?;
            let s = nn.builder().global_avg_pool(y)?;
            let s = nn.conv2d("se.fc1", s, Conv::new(32, 8, 1).bias())?;
            let s = nn.builder().silu(s)?;
            let s = nn.conv2d("se.fc2", s, Conv::new(8, 32, 1).bias())?;
            let s = nn.builder().sigmoid(s)?;
            let y = nn.builder().mul(y, s)?;
            let y = nn.conv2d("pw", y, Conv::new(32, 32, 1))?;
            let y = nn.batch_norm("pw_bn", y, 32)?;
            if stride == 1 {
                nn.builder().add(y, h)
            } else {
                Ok(y)
            }
        })?;
    }
    let h = nn.builder().global_avg_pool(h)?;
    let h = nn.builder().flatten(h)?;
    let h = nn.builder().dropout(h, 0.1)?;
    nn.linear("classifier", h, 32, CLASSES, Init::LinearDefault)
}

mod common;

fn main() -> std::process::ExitCode {
    common::exit_on_error(run())
}

/// Refuses, before any work, flags that cannot be honoured.
fn check(a: &Args) -> Result<()> {
    for (flag, v) in [
        ("--steps", a.steps),
        ("--batch-size", a.batch_size),
        ("--image-size", a.image_size),
    ] {
        common::at_least_one(flag, v)?;
    }
    anyhow::ensure!(
        a.lr.is_finite() && a.lr >= 0.0,
        "--lr {}: a learning rate must be finite and non-negative",
        a.lr
    );
    Ok(())
}

/// The training step's graph: the network, its loss, backward and AdamW with clipping.
/// Returns the graph, its values (images, labels, loss, gradient norm) and the
/// parameters' specs.
fn build(a: &Args) -> Result<(wick::graph::Graph, [ValueId; 4], Vec<nn::TensorSpec>)> {
    let (n, side) = (a.batch_size, a.image_size);
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let images = b.input("images", &[n, 3, side, side], DType::F32)?;
    let labels = b.input("labels", &[n], DType::I64)?;
    let mut layers = Layers::new(&mut b);
    let logits = network(&mut layers, images)?;
    let specs = layers.into_specs();
    let loss = b.in_layer("loss", |b| b.cross_entropy(logits, labels))?;
    b.output(loss);
    let grads = b.backward(loss)?;
    let adamw = Optimizer::Adam(AdamParams::adamw(a.lr).with_weight_decay(0.05));
    let optimizer = OptimizerConfig::from(adamw)
        .no_weight_decay_on(ParamSelector::OneDimensional)
        .clip_grad_norm(1.0);
    let grad_norm = b
        .optimize(&grads, &optimizer)?
        .expect("clipping returns the norm");
    // The whole step's memory, before any of it is made.
    let graph = b.finish();
    wick::models::limits::check_allocation(
        &format!("custom_cnn's training step for batches of {n} at {side}x{side}"),
        graph.peak_bytes(),
    )?;
    Ok((graph, [images, labels, loss, grad_norm], specs))
}

fn run() -> Result<()> {
    wick::prepare_process();
    let a = Args::parse();
    check(&a)?;
    let (n, side) = (a.batch_size, a.image_size);
    let (graph, [images, labels, loss, grad_norm], specs) = build(&a)?;
    let mut exec = Executor::new(graph, &Device::Cpu);
    for (name, t) in nn::initial_state(&specs, 0)? {
        exec.set(&name, &t)?;
    }
    let schedule = Schedule {
        wait: a.steps.saturating_sub(5).min(5),
        warmup: 1,
        active: 3,
        repeat: 1,
    };
    exec.add_hook(TimeProfiler::with_schedule(schedule, RecordLevel::PerOp))?;
    println!(
        "{} parameters in {} tensors",
        specs
            .iter()
            .map(|s| s.shape.iter().product::<usize>())
            .sum::<usize>(),
        specs.len()
    );

    let mut data = SyntheticImages::new(CLASSES, n, side, 1)?;
    for step in 0..a.steps {
        let (x, y) = data.next_batch()?;
        exec.set_id(images, &x)?;
        exec.set_id(labels, &y.to_dtype(DType::I64)?)?;
        exec.set("step", &Tensor::new(step as i64, &Device::Cpu)?)?;
        exec.run()?;
        let value = |v| -> Result<f32> {
            let t = exec.get_id(v)?.ok_or_else(|| anyhow::anyhow!("not kept"))?;
            Ok(t.to_scalar::<f32>()?)
        };
        // A diverged run stops here: its weights are no longer usable.
        let (l, g) = (value(loss)?, value(grad_norm)?);
        anyhow::ensure!(
            l.is_finite() && g.is_finite(),
            "training step {step}: the loss is {l} and the gradient norm {g}; stopped (lower --lr)"
        );
        if step % 5 == 0 || step + 1 == a.steps {
            println!(
                "step {step:3}  loss {:.4}  gradient norm {:.3}",
                value(loss)?,
                value(grad_norm)?
            );
        }
    }
    let profile = exec
        .hook::<TimeProfiler>()
        .expect("attached above")
        .profile();
    let mish = profile
        .ops
        .iter()
        .filter(|o| o.name.starts_with("Mish"))
        .count();
    println!("{mish} Mish nodes timed by the profiler, forward and backward");
    print!("{profile}");
    Ok(())
}
