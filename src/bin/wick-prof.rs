//! `wick-prof`: compare two wick profiles, or render one as an HTML report.
//!
//!   wick-prof diff A.json B.json            # exit 1 on a regression, 3 if inconclusive
//!   wick-prof report P.json -o report.html  # one self-contained file
//!   wick-prof report B.json --diff A.json   # with the diff view against A
//!   wick-prof predict P.json --device h200  # the step predicted on a GPU
//!   wick-prof import-torch trace.json -o torch.json  # a PyTorch trace, to diff

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use wick::file_roles::FileRoles;
use wick::profiler::compare::predict::predict;
use wick::profiler::compare::torch_import::import_torch_trace;
use wick::profiler::Profile;
use wick::profiler::{diff, diff_runs, views::html, DeviceSheet, DiffOptions, Outcome};

#[derive(Parser)]
#[command(
    name = "wick-prof",
    about = "Compare wick profiles (--json files) and render them as HTML reports",
    after_help = "Exit status: 0 when nothing regressed, 1 when `diff` flags a significant regression, 2 on errors, 3 when `diff` is inconclusive (a slowdown flagged while a run shared its cores or the machine's peaks moved; --fail-on-inconclusive makes that 1)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Replace output files that are read-only (refused by default, as `cp` refuses).
    #[arg(long, global = true)]
    replace_read_only: bool,
}

#[derive(Subcommand)]
enum Command {
    /// B against A: per phase, op type and layer, the time ratio with a bootstrap
    /// confidence interval from the per-iteration samples. Flags changes whose interval
    /// excludes 1 and whose size reaches --threshold; exits 1 when one is a slowdown, 3
    /// when that slowdown came while the machine moved (inconclusive).
    Diff(DiffArgs),
    /// Renders a profile as one self-contained HTML file (no network; inline SVG).
    Report(ReportArgs),
    /// Predicts the training step on a GPU from a profile taken on any device: per op
    /// type its FLOPs and bytes against the GPU's datasheet, and its kernel launches with
    /// wick's CUDA kernels and with candle's generic tensor ops.
    Predict(PredictArgs),
    /// Reads a PyTorch profiler trace (`prof.export_chrome_trace`, recorded as
    /// scripts/torch_trace.py records it) as a wick profile, its ops named as wick's
    /// kernels and its layers by state-dict prefix: `wick-prof diff` then compares the
    /// PyTorch run with a wick run of the same model.
    ImportTorch(ImportArgs),
}

// The arguments of `wick-prof import-torch`.
#[derive(Args)]
struct ImportArgs {
    /// The trace (Chrome trace JSON).
    trace: PathBuf,
    /// Where to write the profile.
    #[arg(short, long)]
    output: PathBuf,
}

// The arguments of `wick-prof diff`.
#[derive(Args)]
struct DiffArgs {
    /// The baseline profile.
    a: PathBuf,
    /// The profile to compare with it.
    b: PathBuf,
    /// More baseline runs of the same graph (repeatable): the bootstrap then resamples
    /// runs too, so drift between processes is not flagged. Interleave the runs.
    #[arg(long = "base-run", value_name = "FILE")]
    base_runs: Vec<PathBuf>,
    /// More runs to compare (repeatable), as --base-run.
    #[arg(long = "new-run", value_name = "FILE")]
    new_runs: Vec<PathBuf>,
    #[command(flatten)]
    rules: DiffRules,
    /// Exit 1, as a regression, when the verdict is inconclusive (exit 3 otherwise).
    #[arg(long)]
    fail_on_inconclusive: bool,
    /// Also print every layer's row (A's longest first).
    #[arg(long)]
    layers: bool,
    /// Also write the diff as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

// What `wick-prof diff` flags and how it matches and scales the runs.
#[derive(Args)]
struct DiffRules {
    /// The smallest relative change to flag (0.05 is 5%).
    #[arg(long, default_value_t = 0.05)]
    threshold: f64,
    /// Rows below this share of A's iteration are shown but never flagged.
    #[arg(long, default_value_t = 0.02)]
    min_share: f64,
    /// The family-wise confidence: the chance that an unchanged build gets no flag
    /// (Bonferroni over the rows that may be flagged).
    #[arg(long, default_value_t = 0.95)]
    confidence: f64,
    /// Compare profiles of different graphs, matching phases, op types and layers by name.
    #[arg(long)]
    allow_different_graphs: bool,
    /// Put B's times on A's machine: each op type scaled by its run's measured peak
    /// over A's (GEMM for compute-bound types, copy for memory-bound ones), so that a
    /// loaded or slower machine is not read as a slower build.
    #[arg(long)]
    normalize_by_peak: bool,
    /// Compare seconds per image: each run's times divided by its batch, so that runs
    /// of one model at different batch sizes compare (batch 8 against batch 16).
    #[arg(long)]
    per_image: bool,
}

impl DiffRules {
    /// The diff's options, each checked.
    fn options(&self) -> Result<DiffOptions> {
        let (threshold, min_share, confidence) = (self.threshold, self.min_share, self.confidence);
        anyhow::ensure!(
            (0.0..=10.0).contains(&threshold),
            "--threshold {threshold}: a relative change from 0 to 10 (0.05 is 5%) is needed"
        );
        anyhow::ensure!(
            (0.0..1.0).contains(&min_share),
            "--min-share {min_share}: a share of the iteration in [0, 1) is needed"
        );
        anyhow::ensure!(
            (0.5..=0.999).contains(&confidence),
            "--confidence {confidence}: a level from 0.5 to 0.999 is needed (beyond, the bootstrap cannot read its tails in bounded work)"
        );
        Ok(DiffOptions {
            threshold,
            min_share,
            confidence,
            allow_different_graphs: self.allow_different_graphs,
            normalize_by_peak: self.normalize_by_peak,
            per_image: self.per_image,
            ..Default::default()
        })
    }
}

// The arguments of `wick-prof report`.
#[derive(Args)]
struct ReportArgs {
    /// The profile.
    profile: PathBuf,
    /// Where to write the report [default: the profile's name with .html].
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// A baseline profile: adds the diff view (this profile against the baseline).
    #[arg(long)]
    diff: Option<PathBuf>,
}

// The arguments of `wick-prof predict`.
#[derive(Args)]
struct PredictArgs {
    /// The profile.
    profile: PathBuf,
    /// h200, h100, a100 or v100, or a datasheet JSON file (the fields of
    /// crates/profiler/src/compare/gpu_datasheets.json, one object).
    #[arg(long, default_value = "h200")]
    device: String,
    /// Also write the prediction as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn read(path: &Path) -> Result<Profile> {
    // Only regular files: reading a FIFO or a device would wait forever or never end.
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    anyhow::ensure!(
        meta.is_file(),
        "{}: not a regular file (a profile is a JSON file written by --json)",
        path.display()
    );
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Profile::from_json(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

fn run() -> Result<ExitCode> {
    let cli = Cli::parse();
    wick::graph::atomic_write::allow_read_only_replacement(cli.replace_read_only);
    match cli.command {
        Command::Diff(args) => run_diff(args),
        Command::Report(args) => run_report(args),
        Command::Predict(args) => run_predict(args),
        Command::ImportTorch(args) => run_import(args),
    }
}

/// `wick-prof diff`: exit 1 when B regressed against A.
fn run_diff(args: DiffArgs) -> Result<ExitCode> {
    let DiffArgs {
        a,
        b,
        base_runs,
        new_runs,
        rules,
        fail_on_inconclusive,
        layers,
        json,
    } = args;
    let opts = rules.options()?;
    let mut files = FileRoles::default();
    for (flag, path) in [("A", &a), ("B", &b)]
        .into_iter()
        .chain(base_runs.iter().map(|p| ("--base-run", p)))
        .chain(new_runs.iter().map(|p| ("--new-run", p)))
    {
        files.input(flag, path)?;
    }
    if let Some(path) = &json {
        files.output("--json", path)?;
    }
    let side = |first: &Path, more: &[PathBuf]| -> Result<Vec<Profile>> {
        std::iter::once(first)
            .chain(more.iter().map(|p| p.as_path()))
            .map(read)
            .collect()
    };
    let d = diff_runs(&side(&a, &base_runs)?, &side(&b, &new_runs)?, &opts)?;
    print!("{}", d.text());
    if layers {
        print!("{}", d.layers_text());
    }
    if let Some(path) = &json {
        let text = serde_json::to_string_pretty(&d)?;
        wick::graph::atomic_write::write_bytes_atomically(path, text.as_bytes())?;
    }
    Ok(match d.outcome() {
        Outcome::NoRegression => ExitCode::SUCCESS,
        Outcome::Regression => ExitCode::from(1),
        Outcome::Inconclusive if fail_on_inconclusive => ExitCode::from(1),
        Outcome::Inconclusive => ExitCode::from(3),
    })
}

/// `wick-prof report`: one self-contained HTML file.
fn run_report(args: ReportArgs) -> Result<ExitCode> {
    let ReportArgs {
        profile,
        output,
        diff: baseline,
    } = args;
    let mut files = FileRoles::default();
    files.input("PROFILE", &profile)?;
    if let Some(base) = &baseline {
        files.input("--diff", base)?;
    }
    let flag = if output.is_some() {
        "-o"
    } else {
        "the default output (the profile's name with .html)"
    };
    let output = output.unwrap_or_else(|| profile.with_extension("html"));
    files.output(flag, &output)?;
    let p = read(&profile)?;
    let d = match &baseline {
        Some(base) => {
            let opts = DiffOptions {
                allow_different_graphs: true,
                ..Default::default()
            };
            Some(diff(&read(base)?, &p, &opts)?)
        }
        None => None,
    };
    let page = html::report(&p, d.as_ref());
    wick::graph::atomic_write::write_bytes_atomically(&output, page.as_bytes())?;
    println!("report written to {}", output.display());
    Ok(ExitCode::SUCCESS)
}

/// `wick-prof predict`: the step on a GPU from a profile.
fn run_predict(args: PredictArgs) -> Result<ExitCode> {
    let PredictArgs {
        profile,
        device,
        json,
    } = args;
    let mut files = FileRoles::default();
    files.input("PROFILE", &profile)?;
    if let Some(path) = &json {
        files.output("--json", path)?;
    }
    let sheet = datasheet(&device)?;
    let p = read(&profile)?;
    anyhow::ensure!(
        !p.ops.is_empty(),
        "{}: the profile has no per-op rows; take it at --verbosity 2",
        profile.display()
    );
    let prediction = predict(&p, &sheet);
    print!("{prediction}");
    if let Some(path) = &json {
        let text = serde_json::to_string_pretty(&prediction)?;
        wick::graph::atomic_write::write_bytes_atomically(path, text.as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A known datasheet by name, or one read from a JSON file.
fn datasheet(device: &str) -> Result<DeviceSheet> {
    if let Some(sheet) = DeviceSheet::named(device) {
        return Ok(sheet);
    }
    let path = Path::new(device);
    anyhow::ensure!(
        path.is_file(),
        "--device {device}: neither a known GPU ({}) nor a datasheet file",
        DeviceSheet::known()
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    anyhow::ensure!(
        std::fs::metadata(path).is_ok_and(|m| m.is_file()),
        "--device {device}: not a regular file"
    );
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {device}"))?;
    let sheet: DeviceSheet =
        serde_json::from_str(&text).with_context(|| format!("{device}: not a datasheet"))?;
    sheet.validate().map_err(anyhow::Error::msg)?;
    Ok(sheet)
}

/// `wick-prof import-torch`: a PyTorch trace as a profile.
fn run_import(args: ImportArgs) -> Result<ExitCode> {
    let mut files = FileRoles::default();
    files.input("TRACE", &args.trace)?;
    files.output("-o", &args.output)?;
    anyhow::ensure!(
        std::fs::metadata(&args.trace).is_ok_and(|m| m.is_file()),
        "{}: not a regular file (a trace is the JSON of prof.export_chrome_trace)",
        args.trace.display()
    );
    let text = std::fs::read_to_string(&args.trace)
        .with_context(|| format!("reading {}", args.trace.display()))?;
    let p = import_torch_trace(&text).with_context(|| args.trace.display().to_string())?;
    let types = p.by_type().len();
    wick::graph::atomic_write::write_bytes_atomically(&args.output, p.to_json().as_bytes())?;
    println!(
        "{}: {} ops of {} types over {} steps ({:.3} ms per step) written to {}",
        args.trace.display(),
        p.ops.len(),
        types,
        p.timed_iterations,
        p.iteration_sec * 1e3,
        args.output.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            let message = wick::error_chain(e.as_ref());
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
    }
}
