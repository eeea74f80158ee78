//! Train a GPT-2 or a LLaMA (Hugging Face's `GPT2LMHeadModel`, `LlamaForCausalLM`) on a
//! text file, byte by byte, then write text with it.
//!
//!   cargo run --release --example train_gpt -- --steps 200 --generate 200
//!
//! The text (default: Shakespeare's sonnets, shipped in `examples/data`) is split into
//! the first 90% for training and the last 10% held out. Each step trains on `--batch-size`
//! windows of `--context + 1` bytes drawn from the training part (seeded by `--seed` and
//! the step); each epoch ends with the held-out loss. `--config` takes a Hugging Face
//! `config.json`, whose `model_type` picks the architecture (default: a 4-layer, 128-wide
//! byte-level GPT-2); `--weights` and `--save`
//! read and write safetensors under Hugging Face's names. `--verbosity 2` profiles the
//! training steps: SINGA's per-op lines and every view.

mod checkpoints;
#[path = "../common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use candle_core::{DType, Device, Tensor};
use clap::Parser;
use wick::file_roles::FileRoles;
use wick::graph::nodes::optim::{Optimizer, OptimizerConfig, ParamSelector};
use wick::graph::{Executor, GraphBuilder, Mode, PassSet, ValueId};
use wick::models::checkpoint::{read_safetensors, write_safetensors};
use wick::models::data::text::{ByteTokenizer, CharTokenizer, TextCorpus, Tokenizer};
use wick::models::gpt2::{Gpt2, Gpt2Config};
use wick::models::nn::{self, Layers};
use wick::models::resume;
use wick::models::{CausalLm, LanguageModel, Sampling};

use checkpoints::{weights_of, Checkpoints, GptTraining};
use wick::ops::{AdamParams, SgdParams};

/// Huge pages under big blocks, and the allocation counter the profiler's memory view reads.
#[global_allocator]
static ALLOC: wick::allocator::HugePageAlloc = wick::allocator::HugePageAlloc;

#[derive(Parser)]
#[command(about = "Train a GPT-2 or a LLaMA on a text file with wick, then generate text")]
struct Args {
    /// The text to train on; its last 10% is held out.
    #[arg(long, default_value = "examples/data/sonnets.txt")]
    text: PathBuf,
    /// How the text becomes tokens: bytes (256 tokens, any file) or chars (one token per
    /// distinct character of a UTF-8 text, in code point order).
    #[arg(long, value_enum, default_value = "bytes")]
    tokenizer: TokenizerKind,
    /// A Hugging Face config.json, GPT-2's or LLaMA's by its model_type [default: a GPT-2
    /// of the tokenizer's vocabulary, 4 layers, 128 wide, 4 heads, n_positions 256 or
    /// --context].
    #[arg(long)]
    config: Option<PathBuf>,
    /// Tokens each sequence predicts (at most the model's positions).
    #[arg(long, default_value_t = 64)]
    context: usize,
    /// Train on this batch every step: a safetensors file with `tokens` [N, T+1] (int64).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Start from these weights (safetensors, Hugging Face's names).
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Write the trained weights here (safetensors, Hugging Face's names), and the
    /// config.json beside them.
    #[arg(long)]
    save: Option<PathBuf>,
    /// Keep training checkpoints (weights, optimizer state, counters) in this folder:
    /// `step-<N>` every --checkpoint-every steps, and `best` by held-out loss.
    #[arg(long)]
    checkpoint_dir: Option<PathBuf>,
    /// Steps between checkpoints [default: --steps-per-epoch].
    #[arg(long)]
    checkpoint_every: Option<usize>,
    /// Periodic checkpoints to keep (the newest).
    #[arg(long, default_value_t = 3)]
    keep: usize,
    /// Continue from the newest checkpoint in this folder (or from this checkpoint) toward
    /// the same --steps; checkpoints keep going there unless --checkpoint-dir says else.
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Resume even when this run's settings (model, batch, context, text, seed, optimizer,
    /// learning rate, weight decay, steps per epoch) differ from the checkpoint's.
    #[arg(long)]
    resume_override: bool,
    /// Training steps.
    #[arg(long, default_value_t = 200)]
    steps: usize,
    /// Steps per epoch (each epoch ends with the held-out loss).
    #[arg(long, default_value_t = 50)]
    steps_per_epoch: usize,
    /// Sequences per batch.
    #[arg(long, default_value_t = 8)]
    batch_size: usize,
    /// Learning rate.
    #[arg(long, default_value_t = 3e-3)]
    lr: f64,
    /// sgd (momentum 0.9), adam or adamw, PyTorch's update rules.
    #[arg(long, default_value = "adamw")]
    optimizer: String,
    /// Weight decay (AdamW's decoupled; none on biases and layer norms).
    #[arg(long, default_value_t = 0.01)]
    weight_decay: f64,
    /// Seed of the initialisation, the batches and the dropout.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Tokens to generate after training, from --prompt.
    #[arg(long, default_value_t = 0)]
    generate: usize,
    /// The text generation starts from.
    #[arg(long, default_value = "Shall I compare thee")]
    prompt: String,
    /// Sampling temperature (seeded by --seed); 0 picks the most likely token.
    #[arg(long, default_value_t = 0.8)]
    temperature: f64,
    /// Graph passes: default, all, none, or a comma-separated list (bias_activation fuses
    /// each MLP's bias add and GELU, forward and backward).
    #[arg(long, default_value = "default")]
    passes: PassSet,
    /// The products' precision: f32, bf16 or f16 (autocast: linear layers, matmuls and
    /// attention with 16-bit operands and f32 sums; weights, optimizer state and
    /// checkpoints f32; f16 trains with dynamic loss scaling).
    #[arg(long, default_value = "f32")]
    precision: wick::graph::Precision,
    #[command(flatten)]
    profile: common::ProfileArgs,
}

/// The default model: GPT-2's architecture at byte level, small enough for a laptop.
/// The tokenizers `--tokenizer` chooses from.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum TokenizerKind {
    /// Every byte a token.
    Bytes,
    /// Every distinct character of the text a token.
    Chars,
}

impl TokenizerKind {
    /// The tokenizer for the text at `path`.
    fn open(self, path: &Path) -> Result<Box<dyn Tokenizer>> {
        Ok(match self {
            TokenizerKind::Bytes => Box::new(ByteTokenizer),
            TokenizerKind::Chars => {
                let bytes = std::fs::read(path)
                    .with_context(|| format!("reading the text {}", path.display()))?;
                let text = std::str::from_utf8(&bytes).map_err(|e| {
                    anyhow::anyhow!(
                        "{}: not UTF-8 at byte {}: --tokenizer chars needs UTF-8 text (bytes reads any file)",
                        path.display(),
                        e.valid_up_to()
                    )
                })?;
                Box::new(CharTokenizer::of_text(text))
            }
        })
    }
}

fn default_model(context: usize, vocab_size: usize) -> LanguageModel {
    LanguageModel::Gpt2(Gpt2::new(Gpt2Config {
        vocab_size,
        n_positions: context.max(256),
        n_embd: 128,
        n_layer: 4,
        n_head: 4,
        n_inner: 512,
        ..Gpt2Config::small()
    }))
}

/// A graph of the model's next-token loss on batches of `shape`: the training graph
/// (backward and the optimizer) or the evaluation one.
fn graph(
    model: &LanguageModel,
    shape: &[usize],
    train: Option<&OptimizerConfig>,
    (passes, precision): (PassSet, wick::graph::Precision),
) -> Result<(Executor, ValueId, Vec<nn::TensorSpec>)> {
    let mode = if train.is_some() {
        Mode::Train
    } else {
        Mode::Eval
    };
    let mut b = GraphBuilder::new(mode, DType::F32);
    b.set_precision(precision);
    let tokens = b.input("tokens", shape, DType::I64)?;
    let mut layers = Layers::new(&mut b);
    let out = model.next_token_loss(&mut layers, tokens)?;
    let specs = layers.into_specs();
    b.output(out.loss);
    if let Some(optimizer) = train {
        if precision == wick::graph::Precision::F16Autocast {
            b.set_grad_scaler(wick::graph::nodes::optim::GradScaler::default())?;
        }
        let grads = b.backward(out.loss)?;
        b.optimize(&grads, optimizer)?;
    }
    let mut graph = b.finish();
    graph.apply_passes(passes);
    Ok((Executor::new(graph, &Device::Cpu), out.loss, specs))
}

fn loss_of(exec: &Executor, loss: ValueId) -> Result<f32> {
    let t = exec.get_id(loss)?.context("the loss was not kept")?;
    Ok(t.to_dtype(DType::F32)?.reshape(())?.to_scalar()?)
}

/// config.json beside `weights`, unless one is there already with other contents.
fn write_config(weights: &Path, model: &LanguageModel) -> Result<()> {
    let path = weights.with_file_name("config.json");
    let text = model.to_json();
    if let Ok(old) = std::fs::read_to_string(&path) {
        ensure!(
            LanguageModel::from_json(&old).ok().as_ref() == Some(model),
            "{} exists and describes another model: move it, or --save elsewhere",
            path.display()
        );
    }
    wick::graph::atomic_write::write_bytes_atomically(&path, text.as_bytes())?;
    Ok(())
}

/// Every file argument, with one writer per file and no output over an input.
fn check_files(a: &Args) -> Result<()> {
    let mut files = FileRoles::default();
    for (flag, path) in [("--text", Some(&a.text)), ("--config", a.config.as_ref())] {
        if let Some(p) = path {
            files.input(flag, p)?;
        }
    }
    for (flag, path) in [("--data", &a.data), ("--weights", &a.weights)] {
        if let Some(p) = path {
            files.input(flag, p)?;
        }
    }
    a.profile.check(&mut files)?;
    a.profile.check_timed_steps(a.steps)?;
    if let Some(p) = &a.save {
        files.output("--save", p)?;
    }
    match (&a.checkpoint_dir, &a.resume) {
        (Some(dir), resume) => {
            files.output_dir("--checkpoint-dir", dir)?;
            if resume.is_none() {
                common::refuse_another_runs_checkpoints(dir)?;
            }
        }
        (None, Some(dir)) => files.output_dir("--resume", dir)?,
        (None, None) => {}
    }
    Ok(())
}

/// The model's configuration, with every setting checked before any work.
fn read_model(a: &Args, tokenizer: &dyn Tokenizer) -> Result<LanguageModel> {
    let model = match &a.config {
        Some(p) => LanguageModel::from_json(
            &std::fs::read_to_string(p).with_context(|| format!("{}", p.display()))?,
        )?,
        None => default_model(a.context, tokenizer.vocab_size()),
    };
    let (positions_field, positions) = model.max_positions();
    ensure!(
        a.context >= 1 && a.context <= positions,
        "--context {} must be 1..={positions_field} ({positions})",
        a.context,
    );
    ensure!(
        model.vocab_size() >= tokenizer.vocab_size(),
        "the text's tokens ({}) need a vocabulary of at least {}, the config has {}",
        tokenizer.describe(),
        tokenizer.vocab_size(),
        model.vocab_size()
    );
    ensure!(
        a.steps_per_epoch > 0 && a.batch_size > 0,
        "--steps-per-epoch and --batch-size must be at least 1"
    );
    let prompt = tokenizer
        .encode(a.prompt.as_bytes())
        .map_err(|e| anyhow::anyhow!("--prompt: {e}"))?;
    let room = positions.saturating_sub(prompt.len());
    ensure!(
        a.generate <= room,
        "--generate {}: the prompt's {} tokens leave room for {room} in {positions_field} = {positions}",
        a.generate,
        prompt.len(),
    );
    Ok(model)
}

/// `--optimizer` with `--lr` and `--weight-decay` (none on biases and norm weights).
fn optimizer(a: &Args) -> Result<OptimizerConfig> {
    let optimizer = match a.optimizer.as_str() {
        "sgd" => Optimizer::Sgd(SgdParams {
            lr: a.lr,
            momentum: 0.9,
            weight_decay: a.weight_decay,
            ..Default::default()
        }),
        "adam" => Optimizer::Adam(AdamParams::adam(a.lr).with_weight_decay(a.weight_decay)),
        "adamw" => Optimizer::Adam(AdamParams::adamw(a.lr).with_weight_decay(a.weight_decay)),
        other => anyhow::bail!("--optimizer {other}: expected sgd, adam or adamw"),
    };
    Ok(OptimizerConfig::from(optimizer).no_weight_decay_on(ParamSelector::OneDimensional))
}

/// `--weights` (or a fresh, seeded initialisation) into the training graph.
fn load_weights(train: &mut Executor, specs: &[nn::TensorSpec], a: &Args) -> Result<()> {
    let (weights, from) = match &a.weights {
        Some(p) => (read_safetensors(p)?, p.display().to_string()),
        None => (
            nn::initial_state(specs, a.seed)?,
            "the initialisation".into(),
        ),
    };
    checkpoints::set_weights(train, specs, weights, &from)
}

/// The mean loss over the held-out text's non-overlapping windows (up to 16), with the
/// training graph's current weights; and how many windows.
fn held_out_loss(
    (eval, loss): (&mut Executor, ValueId),
    weights: &HashMap<String, Tensor>,
    corpus: &TextCorpus,
    len: usize,
) -> Result<(f64, usize)> {
    for (name, w) in weights {
        eval.set(name, w)?;
    }
    let mut losses = Vec::new();
    for window in corpus.held_out_windows(len, 16)? {
        eval.set("tokens", &window)?;
        eval.run()?;
        losses.push(loss_of(eval, loss)? as f64);
    }
    Ok((
        losses.iter().sum::<f64>() / losses.len() as f64,
        losses.len(),
    ))
}

/// What the profile records about the run.
fn run_info(model: &LanguageModel, shape: &[usize]) -> wick::profiler::RunInfo {
    wick::profiler::RunInfo {
        wick_version: env!("CARGO_PKG_VERSION").into(),
        model: model.describe(),
        batch: shape[0],
        image_size: format!("{} tokens", shape[1] - 1),
        dtype: "F32".into(),
        device_name: "Cpu".into(),
        ..wick::profiler::RunInfo::detect()
    }
}

/// Trains on `batches(step)` for each of `steps`, writing the checkpoints that fall due;
/// returns the sum of their losses.
fn train_steps(
    (run, loss): (&mut GptTraining, ValueId),
    steps: std::ops::Range<usize>,
    batches: impl Fn(usize) -> Result<Tensor>,
    ckpts: &Checkpoints,
    steps_per_epoch: usize,
) -> Result<f64> {
    let mut total = 0.0;
    for step in steps {
        run.exec.set("tokens", &batches(step)?)?;
        run.exec
            .set("step", &Tensor::new(step as i64, &Device::Cpu)?)?;
        run.exec.run()?;
        let l = loss_of(run.exec, loss)?;
        ensure!(l.is_finite(), "step {step}: the loss is {l}; lower --lr");
        total += l as f64;
        ckpts.after_step(run, step + 1, (step + 1) / steps_per_epoch)?;
    }
    Ok(total)
}

/// The settings that define a run's trajectory, as a checkpoint records them: a resumed
/// run with other values would not continue the same run.
fn trajectory(
    a: &Args,
    model: &LanguageModel,
    shape: &[usize],
    text_len: usize,
    tokenizer: &dyn Tokenizer,
) -> Vec<(&'static str, String)> {
    let data = match &a.data {
        Some(p) => format!("batch file {}", p.display()),
        None if a.tokenizer == TokenizerKind::Bytes => {
            format!("{} ({text_len} bytes)", a.text.display())
        }
        None => format!(
            "{} ({text_len} tokens of {})",
            a.text.display(),
            tokenizer.describe()
        ),
    };
    vec![
        ("model", model.to_json()),
        ("batch", format!("{} x {} tokens", shape[0], shape[1] - 1)),
        ("data", data),
        ("seed", a.seed.to_string()),
        ("optimizer", a.optimizer.clone()),
        ("lr", a.lr.to_string()),
        ("weight decay", a.weight_decay.to_string()),
        ("steps per epoch", a.steps_per_epoch.to_string()),
    ]
}

/// Where checkpoints go (--checkpoint-dir, else the run --resume continues), and the
/// step a resumed run starts from (0 for a fresh one), and the folder's lock.
fn checkpoints(
    a: &Args,
    run: &mut GptTraining,
    trajectory: Vec<(&'static str, String)>,
) -> Result<(Checkpoints, usize, Option<resume::DirLock>)> {
    let resumed_dir = a.resume.as_deref().map(resume::run_folder_of);
    let every = a.checkpoint_every.unwrap_or(a.steps_per_epoch);
    common::at_least_one("--checkpoint-every", every)?;
    common::at_least_one("--keep", a.keep)?;
    let mut ckpts = Checkpoints {
        dir: a.checkpoint_dir.clone().or(resumed_dir),
        every,
        keep: a.keep,
        last: a.steps,
        trajectory,
        best: f64::INFINITY,
    };
    // One run at a time writes a checkpoint folder.
    let lock = ckpts
        .dir
        .as_deref()
        .map(common::lock_checkpoints)
        .transpose()?;
    if let Some(dir) = &ckpts.dir {
        resume::check_dir(dir)?;
    }
    let start = match &a.resume {
        Some(from) => ckpts.resume(from, run, a.resume_override)?.0,
        None => 0,
    };
    Ok((ckpts, start, lock))
}

/// `--generate` tokens after `--prompt`, printed between `---` lines.
fn print_generation(
    a: &Args,
    model: &LanguageModel,
    trained: &HashMap<String, Tensor>,
    tokenizer: &dyn Tokenizer,
) -> Result<()> {
    let prompt = tokenizer
        .encode(a.prompt.as_bytes())
        .map_err(|e| anyhow::anyhow!("--prompt: {e}"))?;
    let sampling = if a.temperature > 0.0 {
        Sampling::Temperature {
            temperature: a.temperature,
            seed: a.seed,
        }
    } else {
        Sampling::Greedy
    };
    let start = std::time::Instant::now();
    let out = model.generate(trained, &prompt, a.generate, sampling, &Device::Cpu)?;
    let sec = start.elapsed().as_secs_f64();
    println!("---\n{}\n---", tokenizer.decode(&out));
    let per_sec = a.generate as f64 / sec;
    println!(
        "generated {} tokens in {sec:.2} s ({per_sec:.1} tokens/s)",
        a.generate
    );
    Ok(())
}

/// The text as tokens, the --data batch if one is given, and the training batches' shape.
fn read_data(
    a: &Args,
    tokenizer: &dyn Tokenizer,
) -> Result<(TextCorpus, Option<Tensor>, Vec<usize>)> {
    let len = a.context + 1;
    let text = TextCorpus::open(&a.text, tokenizer, 10, len)?;
    let batch_file = match &a.data {
        Some(p) => Some(
            read_safetensors(p)?
                .remove("tokens")
                .with_context(|| format!("{}: no `tokens` tensor", p.display()))?,
        ),
        None => None,
    };
    let shape = batch_file
        .as_ref()
        .map_or(vec![a.batch_size, len], |t| t.dims().to_vec());
    Ok((text, batch_file, shape))
}

fn main() -> std::process::ExitCode {
    common::exit_on_error(run())
}

fn run() -> Result<()> {
    let mut a = Args::parse();
    a.profile.default_verbosity(0);
    wick::prepare_process();
    check_files(&a)?;
    let tokenizer = a.tokenizer.open(&a.text)?;
    let model = read_model(&a, tokenizer.as_ref())?;
    let (corpus, batch_file, shape) = read_data(&a, tokenizer.as_ref())?;
    let (text_len, len) = (corpus.train.len() + corpus.held_out.len(), a.context + 1);
    let settings = (a.passes, a.precision);
    let (mut train, loss, specs) = graph(&model, &shape, Some(&optimizer(&a)?), settings)?;
    let (mut eval, eval_loss, _) = graph(&model, &[1, len], None, settings)?;
    load_weights(&mut train, &specs, &a)?;
    let params: usize = specs
        .iter()
        .map(|s| s.shape.iter().product::<usize>())
        .sum();
    a.profile.attach_to(&mut train, run_info(&model, &shape))?;
    println!(
        "training a {} of {params} parameters on {} ({text_len} tokens of {}, {} held out): batch {} x {} tokens, {} steps, {}, lr {}",
        model.describe(), a.text.display(), tokenizer.describe(), corpus.held_out.len(), shape[0], shape[1] - 1, a.steps, a.optimizer, a.lr
    );

    let trajectory = trajectory(&a, &model, &shape, text_len, tokenizer.as_ref());
    let mut run = GptTraining {
        exec: &mut train,
        specs: &specs,
    };
    let (mut ckpts, start, _lock) = checkpoints(&a, &mut run, trajectory)?;
    if start >= a.steps {
        println!(
            "--resume: the checkpoint is at step {start}, the run has {} steps: nothing to train",
            a.steps
        );
    }
    let epochs = a.steps.div_ceil(a.steps_per_epoch);
    for epoch in start / a.steps_per_epoch..epochs {
        let started = Instant::now();
        let first = (epoch * a.steps_per_epoch).max(start);
        let steps = first..((epoch + 1) * a.steps_per_epoch).min(a.steps);
        let batches = |step: usize| match &batch_file {
            Some(t) => Ok(t.clone()),
            None => Ok(corpus.windows(a.batch_size, len, a.seed, step as u64)?),
        };
        let total = train_steps(
            (&mut run, loss),
            steps.clone(),
            batches,
            &ckpts,
            a.steps_per_epoch,
        )?;
        let weights = weights_of(run.exec, &specs)?;
        let (test_loss, windows) = held_out_loss((&mut eval, eval_loss), &weights, &corpus, len)?;
        let best = ckpts.after_epoch(&run, test_loss, steps.end, epoch + 1)?;
        let secs = started.elapsed().as_secs_f64();
        println!(
            "epoch {}/{epochs}  lr {:.5}  train loss {:.4}  test loss {test_loss:.4}{} ({windows} held-out windows)  {:.0} tokens/s  {secs:.1} s",
            epoch + 1,
            a.lr,
            total / steps.len() as f64,
            if best { " (best)" } else { "" },
            (steps.len() * shape[0] * (shape[1] - 1)) as f64 / secs
        );
    }
    let trained = weights_of(&train, &specs)?;
    if let Some(path) = &a.save {
        write_config(path, &model)?;
        write_safetensors(&trained, path)?;
        println!(
            "weights written to {} (config.json beside them)",
            path.display()
        );
    }
    a.profile.report_executor(&train, None)?;
    if a.generate > 0 {
        print_generation(&a, &model, &trained, tokenizer.as_ref())?;
    }
    Ok(())
}
