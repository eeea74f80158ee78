//! What the examples share: the model and device flags, the device helper, and the
//! figures every report states (thread count, supported percentiles).
// Each example uses its own part of this module.
#![allow(dead_code)]

use anyhow::Result;
use candle_core::Device;
use wick::file_roles::FileRoles;
use wick::models::{ModelConfig, Stem};

/// The device flag.
#[derive(clap::Args, Debug, Clone)]
pub struct DeviceArgs {
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

impl DeviceArgs {
    /// The device asked for, or a clear error (no CUDA in this build, no driver, no GPU).
    pub fn device(&self) -> Result<Device> {
        wick::device::select(&self.device).map_err(anyhow::Error::msg)
    }
}

/// The model flags every ResNet example takes.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// resnet18, resnet34, resnet50, resnet101, resnet152, mobilenet_v2,
    /// mobilenet_v3_small, mobilenet_v3_large, efficientnet_b0, densenet121,
    /// convnext_tiny, vgg11_bn or vgg16_bn [default: resnet18 for train_resnet, resnet50
    /// otherwise].
    #[arg(long)]
    pub model: Option<String>,
    /// imagenet or cifar (ResNets only).
    #[arg(long, default_value = "imagenet")]
    pub stem: String,
    /// Output classes [default: 1000; 10 for a ResNet with the cifar stem].
    #[arg(long)]
    pub num_classes: Option<usize>,
    /// The classifier's dropout probability (zoo models) [default: torchvision's].
    #[arg(long)]
    pub dropout: Option<f64>,
    /// Stochastic depth of the last block (efficientnet_b0, convnext_tiny) [default:
    /// torchvision's]; 0 with --dropout 0 makes a training step deterministic.
    #[arg(long)]
    pub stochastic_depth: Option<f64>,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// CPU threads for wick's kernels [default: RAYON_NUM_THREADS, else every core].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Graph passes: default, all, none, or a comma-separated list (fold_batch_norm,
    /// conv_epilogue, max_pool_values, batch_norm_relu, add_relu, multi_tensor_update);
    /// default is all but multi_tensor_update, which CUDA adds [default: none for
    /// profile_resnet, default otherwise].
    #[arg(long)]
    pub passes: Option<wick::graph::PassSet>,
    /// The products' precision: f32, bf16 or f16 (autocast: convolutions, linear layers,
    /// matmuls and attention with 16-bit operands and f32 sums; weights, optimizer state
    /// and checkpoints f32; f16 trains with dynamic loss scaling).
    #[arg(long, default_value = "f32")]
    pub precision: wick::graph::Precision,
}

impl ModelArgs {
    /// The model's configuration, with `default_model` when `--model` is not given.
    pub fn config(&self, default_model: &str) -> Result<ModelConfig> {
        let stem: Stem = self.stem.parse()?;
        let name = self.model.as_deref().unwrap_or(default_model);
        let mut config = ModelConfig::by_name(name, stem, self.num_classes)?;
        if let Some(p) = self.dropout {
            config = config
                .with_dropout(p)
                .map_err(|e| anyhow::anyhow!("--dropout: {e}"))?;
        }
        if let Some(p) = self.stochastic_depth {
            config = config
                .with_stochastic_depth(p)
                .map_err(|e| anyhow::anyhow!("--stochastic-depth: {e}"))?;
        }
        Ok(config)
    }

    /// Sizes the CPU thread pool to --threads; call it first, before anything starts
    /// the pool (`wick::prepare_process` does).
    pub fn apply_threads(&self) -> Result<()> {
        // RAYON_NUM_THREADS sets what --threads sets, so it is checked as --threads is.
        if self.threads.is_none() {
            if let Ok(v) = std::env::var("RAYON_NUM_THREADS") {
                let n: usize = v.trim().parse().map_err(|_| {
                    anyhow::anyhow!("RAYON_NUM_THREADS={v}: a count of threads is needed")
                })?;
                // 0 is rayon's "as if unset": every core.
                return if n == 0 {
                    Ok(())
                } else {
                    check_threads("RAYON_NUM_THREADS", n)
                };
            }
        }
        if let Some(n) = self.threads {
            check_threads("--threads", n)?;
            rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build_global()
                .map_err(|e| anyhow::anyhow!("--threads {n}: {e}"))?;
        }
        Ok(())
    }

    /// The device asked for.
    pub fn device(&self) -> Result<Device> {
        self.device.device()
    }

    /// The passes asked for, or `default`.
    pub fn passes(&self, default: wick::graph::PassSet) -> wick::graph::PassSet {
        self.passes.unwrap_or(default)
    }
}

/// How a run's header names its precision: `f32`, `bf16 autocast (f32 weights)`, ...
pub fn precision_label(p: wick::graph::Precision) -> &'static str {
    match p {
        wick::graph::Precision::F32 => "f32",
        wick::graph::Precision::Bf16Autocast => "bf16 autocast (f32 weights)",
        wick::graph::Precision::F16Autocast => "f16 autocast (f32 weights, loss scaling)",
    }
}

/// What a profile records about the run: model, sizes, passes, device and machine.
pub fn run_info(session: &wick::models::Session) -> wick::profiler::RunInfo {
    wick::profiler::RunInfo {
        wick_version: env!("CARGO_PKG_VERSION").to_string(),
        model: session.config().describe(),
        batch: session.batch_size(),
        image_size: session.image_size().to_string(),
        passes: session
            .executor()
            .graph()
            .passes()
            .iter()
            .filter(|r| r.subgraphs > 0)
            .map(|r| format!("{} ({} subgraphs)", r.pass.as_str(), r.subgraphs))
            .collect(),
        dtype: session.executor().graph().precision().profile_name().into(),
        device_name: format!("{:?}", session.executor().device().location()),
        ..wick::profiler::RunInfo::detect()
    }
}

/// Refuses a thread count (`--threads` or `RAYON_NUM_THREADS`, named by `source`) of 0,
/// or past a few threads per core, where they only contend (1000 on 2 cores made no
/// progress in minutes).
fn check_threads(source: &str, n: usize) -> Result<()> {
    at_least_one(source, n)?;
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    anyhow::ensure!(
        n <= MAX_THREADS_PER_CORE * cores,
        "{source} {n}: this machine has {cores} cores; more than {} threads ({MAX_THREADS_PER_CORE} per core) only contend",
        MAX_THREADS_PER_CORE * cores
    );
    Ok(())
}

/// Refuses to start a fresh run (not `--resume`) in a checkpoint folder that holds another
/// wick run's checkpoints, which its own would replace one by one.
pub fn refuse_another_runs_checkpoints(dir: &std::path::Path) -> Result<()> {
    let mut found: Vec<String> = wick::models::resume::periodic(dir)?
        .into_iter()
        .map(|(step, _)| format!("step-{step}"))
        .collect();
    if wick::models::resume::is_checkpoint(&dir.join("best")) {
        found.push("best".into());
    }
    anyhow::ensure!(
        found.is_empty(),
        "--checkpoint-dir {}: it holds another run's checkpoints ({}): --resume {} continues that run; to start a new one, choose another folder or remove them",
        dir.display(),
        found.join(", "),
        dir.display()
    );
    Ok(())
}

/// `--compare-passes`: runs `plain` (the graph as recorded) and `fused` (after the passes)
/// alternately, `iterations` times each with a per-op profiler timing the iterations
/// `schedule` names, and prints the per-op-type, per-phase and step comparison.
pub fn compare_passes(
    plain: &mut wick::models::Session,
    fused: &mut wick::models::Session,
    iterations: usize,
    schedule: wick::profiler::Schedule,
    mut run: impl FnMut(&mut wick::models::Session) -> Result<()>,
) -> Result<()> {
    for s in [&mut *plain, &mut *fused] {
        let per_op = wick::profiler::RecordLevel::PerOp;
        let profiler = wick::profiler::TimeProfiler::with_schedule(schedule, per_op)
            .with_run_info(run_info(s));
        s.executor_mut().add_hook(profiler)?;
    }
    for _ in 0..iterations {
        run(plain)?;
        run(fused)?;
    }
    let profile = |s: &wick::models::Session| -> Result<wick::profiler::Profile> {
        Ok(s.executor()
            .hook::<wick::profiler::TimeProfiler>()
            .ok_or_else(|| anyhow::anyhow!("no profiler attached"))?
            .profile())
    };
    let (before, after) = (profile(plain)?, profile(fused)?);
    print!(
        "{}",
        wick::profiler::compare::pass_comparison::compare_passes(&before, &after)
    );
    Ok(())
}

/// Prints the passes that rewrote the session's graph, Paddle-style
/// (`--- Running IR pass [NAME] --- detected N subgraphs`).
pub fn log_passes(session: &wick::models::Session) {
    for record in session.executor().graph().passes() {
        println!("{record}");
    }
}

/// The most kernel threads per core `--threads` accepts.
pub const MAX_THREADS_PER_CORE: usize = 4;

/// The most warm-up runs, repetitions or iterations a flag accepts: past it a run is a
/// typo, not a benchmark.
pub const MAX_REPEATS: usize = 1_000_000;

/// Refuses a repeat count above [`MAX_REPEATS`], naming the flag.
pub fn at_most_repeats(flag: &str, value: usize) -> Result<()> {
    anyhow::ensure!(
        value <= MAX_REPEATS,
        "{flag} {value}: at most {MAX_REPEATS} (a larger count never finishes)"
    );
    Ok(())
}

/// The threads wick's CPU kernels run on: rayon's pool (`RAYON_NUM_THREADS`), not the
/// machine's core count.
pub fn threads() -> usize {
    rayon::current_num_threads()
}

/// The percentiles (of 50, 90, 99) that `samples` measurements support: a p-th percentile
/// is only distinct from the maximum when at least one sample lies above it, which needs
/// `samples * (1 - p/100) >= 1`.
pub fn supported_percentiles(samples: usize) -> Vec<f64> {
    [50.0, 90.0, 99.0]
        .into_iter()
        .filter(|p| samples as f64 * (1.0 - p / 100.0) >= 1.0)
        .collect()
}

/// Runs an example's `run` and turns its error into a user message on stderr and exit
/// status 1: the cause chain on one line (a cause already quoted by the message before it
/// is not repeated), and no backtrace, whatever `RUST_BACKTRACE` says.
pub fn exit_on_error(result: Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let message = wick::error_chain(e.as_ref());
            eprintln!("error: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Refuses a zero count (`--steps 0`, `--batch-size 0`) with a message naming the flag.
pub fn at_least_one(flag: &str, value: usize) -> Result<()> {
    anyhow::ensure!(value >= 1, "{flag} must be at least 1 (got {value})");
    Ok(())
}

/// The profiling flags every training example takes (profile_resnet's, shared).
#[derive(clap::Args, Debug, Clone)]
pub struct ProfileArgs {
    /// Profiler verbosity: 0 off, 1 phases, 2 every op, 3 as 2 but SINGA's per-op lines
    /// only for the communication ops (DistAllReduce) [default: 2 for profile_resnet, 0
    /// for train_resnet].
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub verbosity: Option<u8>,
    /// Untimed warm-up iterations at the start (SINGA's default is 5) [default: 5;
    /// infer_resnet --bench: its own warm-up, so that exactly --reps are timed].
    #[arg(long)]
    pub skip: Option<usize>,
    /// Which iterations to time, as PyTorch's profiler schedule:
    /// `wait=W,warmup=U,active=A,repeat=R` (missing keys are 0; active=0 times every
    /// later iteration). Replaces --skip; recorded in the JSON.
    #[arg(long, conflicts_with = "skip")]
    pub schedule: Option<wick::profiler::Schedule>,
    /// Write a Chrome/Perfetto trace of every timed iteration here (needs verbosity 2).
    #[arg(long)]
    pub trace: Option<std::path::PathBuf>,
    /// Write the whole profile as JSON here.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Write a flame graph's folded stacks by module path here (`inferno-flamegraph <
    /// FILE > flame.svg`, or open it in speedscope; needs verbosity 2).
    #[arg(long)]
    pub folded: Option<std::path::PathBuf>,
    /// Also print the per-op-type table split by input shapes (needs verbosity 2).
    #[arg(long)]
    pub by_shape: bool,
    /// Write the HTML report here (one self-contained file; `wick-prof report` makes the
    /// same from a --json file).
    #[arg(long)]
    pub report: Option<std::path::PathBuf>,
    /// Replace output files that are read-only (refused by default, as `cp` refuses).
    #[arg(long)]
    pub replace_read_only: bool,
}

impl ProfileArgs {
    /// Sets this example's default verbosity where `--verbosity` was not given: called
    /// once, right after parsing, so the default lives in one place.
    pub fn default_verbosity(&mut self, default: u8) {
        self.verbosity.get_or_insert(default);
    }

    /// The verbosity (after [`default_verbosity`](Self::default_verbosity)).
    pub fn level(&self) -> u8 {
        self.verbosity.unwrap_or(0)
    }

    /// The schedule: `--schedule` if given, else SINGA's `--skip`.
    pub fn schedule(&self) -> wick::profiler::Schedule {
        self.schedule
            .unwrap_or(wick::profiler::Schedule::skip(self.skip()))
    }

    /// `--skip`, or SINGA's 5.
    pub fn skip(&self) -> usize {
        self.skip.unwrap_or(5)
    }

    /// Refuses, before any work, output requests that cannot be honoured: a trace without
    /// per-op timings, a profile file without a profile, a path that cannot be written,
    /// or one that is another of the command's files (`files`, by identity).
    pub fn check(&self, files: &mut FileRoles) -> Result<()> {
        wick::graph::atomic_write::allow_read_only_replacement(self.replace_read_only);
        if let Some(skip) = self.skip {
            at_most_repeats("--skip", skip)?;
        }
        let level = self.level();
        if self.trace.is_some() && level < 2 {
            anyhow::bail!("--trace needs per-op timings: use --verbosity 2 (got {level})");
        }
        if self.folded.is_some() && level < 2 {
            anyhow::bail!("--folded needs per-op timings: use --verbosity 2 (got {level})");
        }
        if self.by_shape && level < 2 {
            anyhow::bail!("--by-shape needs per-op timings: use --verbosity 2 (got {level})");
        }
        if (self.json.is_some() || self.report.is_some()) && level == 0 {
            anyhow::bail!("--json and --report need a profile: use --verbosity 1 or 2");
        }
        for (flag, path) in [
            ("--report", &self.report),
            ("--trace", &self.trace),
            ("--json", &self.json),
            ("--folded", &self.folded),
        ] {
            if let Some(path) = path {
                files.output(flag, path)?;
            }
        }
        Ok(())
    }

    /// Whether the profile gets the machine's peaks: with per-op timings (the roofline)
    /// or a JSON file (for `wick-prof diff`).
    fn wants_peaks(&self) -> bool {
        self.level() >= 2 || self.json.is_some()
    }

    /// Refuses profile files when the schedule times none of a run's `steps` (a profile
    /// file needs a timed step): known before training, not after it.
    pub fn check_timed_steps(&self, steps: usize) -> Result<()> {
        let wants_file = self.trace.is_some()
            || self.json.is_some()
            || self.report.is_some()
            || self.folded.is_some();
        let schedule = self.schedule();
        if wants_file && self.level() > 0 && !(0..steps).any(|i| schedule.is_timed(i)) {
            anyhow::bail!(
                "--trace, --json, --report and --folded need a timed step, and the schedule ({schedule}) times none of the {steps} steps: lower --skip or raise --steps"
            );
        }
        Ok(())
    }

    /// Refuses the profile's output files beside `--compare-passes`, which prints its
    /// comparison and writes none of them.
    pub fn refuse_outputs_beside_compare_passes(&self) -> Result<()> {
        let asked: Vec<&str> = [
            ("--json", self.json.is_some()),
            ("--report", self.report.is_some()),
            ("--trace", self.trace.is_some()),
            ("--folded", self.folded.is_some()),
            ("--by-shape", self.by_shape),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect();
        anyhow::ensure!(
            asked.is_empty(),
            "--compare-passes prints its comparison and writes no profile: {} would not be written; drop it, or profile each pass set on its own (--passes none, --passes default)",
            asked.join(", ")
        );
        Ok(())
    }

    /// Attaches wick's time profiler to `session` unless the verbosity is 0.
    pub fn attach(&self, session: &mut wick::models::Session) -> Result<()> {
        let info = run_info(session);
        self.attach_to(session.executor_mut(), info)
    }

    /// [`attach`](Self::attach) to any executor (a model built outside a `Session`).
    pub fn attach_to(
        &self,
        exec: &mut wick::graph::Executor,
        info: wick::profiler::RunInfo,
    ) -> Result<()> {
        let level = self.level();
        if level > 0 {
            let record = wick::profiler::RecordLevel::from_verbosity(level);
            let mut profiler = wick::profiler::TimeProfiler::with_schedule(self.schedule(), record)
                .reporting_at(level)
                .with_memory_counter(Box::new(wick::allocator::Counter))
                .with_run_info(info);
            // The roofline's peaks are measured before the run, between the schedule's
            // cycles, and after it (`report`).
            if self.wants_peaks() {
                profiler = profiler.with_peak_probes();
            }
            exec.add_hook(profiler)?;
        }
        Ok(())
    }

    /// Prints the profile (if one was attached) and writes the trace and JSON asked for.
    pub fn report(&self, session: &wick::models::Session) -> Result<()> {
        self.report_with(session, None)
    }

    /// [`report`](Self::report) with a data-parallel run's gathered figures (per rank,
    /// per bucket, overlap) in the text, the JSON and the trace.
    pub fn report_with(
        &self,
        session: &wick::models::Session,
        distributed: Option<wick::profiler::DistProfile>,
    ) -> Result<()> {
        self.report_executor(session.executor(), distributed)
    }

    /// [`report_with`](Self::report_with) for any executor.
    pub fn report_executor(
        &self,
        exec: &wick::graph::Executor,
        distributed: Option<wick::profiler::DistProfile>,
    ) -> Result<()> {
        let Some(profiler) = exec.hook::<wick::profiler::TimeProfiler>() else {
            return Ok(());
        };
        // The roofline's machine peaks: a GEMM and a streaming copy, about a second each
        // before and after the run. A JSON profile always carries them, so that
        // `wick-prof diff` can tell a loaded machine from a slower build.
        let mut profile = if self.wants_peaks() {
            let mut p = profiler.profile_with_peaks()?;
            // The probe's copy buffers raised the process's peak: the report gives both.
            if let Some(memory) = p.memory.as_mut() {
                memory.refresh_process_peak();
            }
            p
        } else {
            profiler.profile()
        };
        profile.distributed = distributed;
        print!("{profile}");
        if self.by_shape && !profile.ops.is_empty() {
            println!();
            print!("{}", profile.table_by_shape());
        }
        if let Some(path) = &self.trace {
            let trace = profile
                .chrome_trace_capped(wick::profiler::views::trace::MAX_EVENTS)
                .ok_or_else(|| {
                    anyhow::anyhow!("no per-op timings to trace (was any iteration timed?)")
                })?;
            wick::graph::atomic_write::write_bytes_atomically(path, trace.json.as_bytes())?;
            println!(
                "trace of {} timed iterations ({} events, {:.1} MB) written to {} (open in ui.perfetto.dev)",
                profile.timeline.len(),
                trace.events,
                trace.json.len() as f64 / 1e6,
                path.display()
            );
            if let Some(note) = &trace.note {
                println!("note: {note}");
            }
        }
        if let Some(path) = &self.folded {
            let folded = profile.folded_stacks();
            wick::graph::atomic_write::write_bytes_atomically(path, folded.as_bytes())?;
            println!(
                "folded stacks ({} lines) written to {} (inferno-flamegraph, speedscope)",
                folded.lines().count(),
                path.display()
            );
        }
        if let Some(path) = &self.json {
            wick::graph::atomic_write::write_bytes_atomically(path, profile.to_json().as_bytes())?;
            println!("profile written to {}", path.display());
        }
        if let Some(path) = &self.report {
            let page = wick::profiler::views::html::report(&profile, None);
            wick::graph::atomic_write::write_bytes_atomically(path, page.as_bytes())?;
            println!("HTML report written to {}", path.display());
        }
        Ok(())
    }
}

/// The `--dist` engine: `none` (one process), `mpi` (one process per rank under
/// `mpirun`; a build with the `mpi` feature) or `nccl` (one process per GPU, ranks from
/// torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; a build with the
/// `nccl` feature).
pub fn communicator(
    kind: &str,
) -> Result<Option<std::sync::Arc<dyn wick::graph::collective::Communicator>>> {
    match kind {
        "none" => Ok(None),
        "mpi" => {
            #[cfg(feature = "mpi")]
            {
                let comm =
                    wick::graph::collective::MpiCommunicator::init().map_err(anyhow::Error::msg)?;
                Ok(Some(std::sync::Arc::new(comm)))
            }
            #[cfg(not(feature = "mpi"))]
            anyhow::bail!(
                "--dist mpi needs a build with the mpi feature (cargo build --release --features mpi)"
            )
        }
        "nccl" => {
            #[cfg(feature = "nccl")]
            {
                let comm = wick::graph::collective::NcclCommunicator::from_env()
                    .map_err(anyhow::Error::msg)?;
                Ok(Some(std::sync::Arc::new(comm)))
            }
            #[cfg(not(feature = "nccl"))]
            anyhow::bail!(
                "--dist nccl needs a build with the nccl feature (cargo build --release --features nccl)"
            )
        }
        other => anyhow::bail!("--dist {other}: expected none, mpi or nccl"),
    }
}

/// Takes a checkpoint folder's lock, saying so when it takes over one a killed run left.
pub fn lock_checkpoints(dir: &std::path::Path) -> Result<wick::models::resume::DirLock> {
    let lock = wick::models::resume::DirLock::acquire(dir)?;
    if let Some(pid) = lock.taken_over() {
        eprintln!(
            "note: {} was locked by process {pid}, which is gone (killed or crashed): this run takes the folder over",
            dir.display()
        );
    }
    Ok(lock)
}
