//! The reliability suite (issue #31): every command wick ships, run as a hostile but
//! realistic user would, on several hundred cases. Each case is classified by what
//! happened, and the suite prints the count per outcome:
//! - **clear error**: refused with a one-line `error:` naming the flag, file or value;
//! - **worked**: a valid run that did what it should (its output exists);
//! - **unclear error**: refused, but without naming what was wrong, or with a backtrace;
//! - **wrongly refused**: a valid run that failed;
//! - **silent wrong**: exit 0 where the input had to be refused;
//! - **data loss**: a file that was there before (a checkpoint, the data, a profile, a
//!   read-only file) changed or vanished;
//! - **panic**: a Rust panic, an abort or a signal;
//! - **hang**: still running after 60 s.
//!
//! The test fails unless every case is a clear error or worked, and lists the others.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    ClearError,
    Worked,
    UnclearError,
    WronglyRefused,
    SilentWrong,
    DataLoss,
    Panic,
    Hang,
}

/// What a case must do.
enum Expect {
    /// Be refused with an error containing one of these.
    Refused(Vec<String>),
    /// Succeed and write this file (in the scratch folder).
    Works(&'static str),
}

struct Case {
    program: &'static str,
    args: Vec<String>,
    expect: Expect,
}

/// The files every case must leave as they were.
const PROTECTED: [&str; 7] = [
    "good.safetensors",
    "batch.safetensors",
    "prof.json",
    "ro.json",
    "afile",
    "garbage.bin",
    "empty.bin",
];

fn program_path(program: &str) -> PathBuf {
    if program == "wick-prof" {
        PathBuf::from(env!("CARGO_BIN_EXE_wick-prof"))
    } else {
        common::example(program)
    }
}

/// The protected files' contents (missing ones as `None`).
fn snapshot(dir: &Path) -> Vec<Option<Vec<u8>>> {
    PROTECTED
        .iter()
        .map(|f| std::fs::read(dir.join(f)).ok())
        .collect()
}

fn run_case(dir: &Path, case: &Case, index: usize) -> (Outcome, String) {
    let before = snapshot(dir);
    let (out_path, err_path) = (
        dir.join(format!("case{index}.out")),
        dir.join(format!("case{index}.err")),
    );
    let mut child = Command::new(program_path(case.program))
        .args(&case.args)
        .current_dir(dir)
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    let _ = std::fs::remove_file(&out_path);
    let _ = std::fs::remove_file(&err_path);
    let Some(status) = status else {
        return (Outcome::Hang, err);
    };
    if snapshot(dir) != before {
        // Put them back, so that the next cases start from the same files.
        for (name, content) in PROTECTED.iter().zip(&before) {
            let path = dir.join(name);
            let _ = std::fs::remove_file(&path);
            if let Some(bytes) = content {
                std::fs::write(&path, bytes).unwrap();
            }
        }
        return (Outcome::DataLoss, err);
    }
    let panicked =
        err.contains("panicked") || err.contains("stack backtrace") || status.code() == Some(101);
    if panicked || status.code().is_none() {
        return (Outcome::Panic, err);
    }
    let error_lines: Vec<&str> = err.lines().filter(|l| l.starts_with("error")).collect();
    let outcome = match (&case.expect, status.success()) {
        (Expect::Refused(_), true) => Outcome::SilentWrong,
        (Expect::Refused(needles), false) => {
            let named = needles.iter().any(|n| err.contains(n.as_str()));
            if named && !error_lines.is_empty() {
                Outcome::ClearError
            } else {
                Outcome::UnclearError
            }
        }
        (Expect::Works(file), true) if dir.join(file).exists() || file.is_empty() => {
            Outcome::Worked
        }
        (Expect::Works(_), true) => Outcome::SilentWrong,
        (Expect::Works(_), false) => Outcome::WronglyRefused,
    };
    (outcome, err)
}

/// What an error about `flag` may say: the flag, its name with underscores, or its last
/// word (`--num-classes`: `num_classes`, `classes`).
fn names_of(flag: &str) -> Vec<String> {
    let bare = flag.trim_start_matches('-');
    let mut v = vec![flag.to_string(), bare.replace('-', "_")];
    if let Some(last) = bare.rsplit('-').next() {
        v.push(last.to_string());
    }
    v
}

fn refused(
    program: &'static str,
    base: &[&str],
    flag: &str,
    value: &str,
    needles: Vec<String>,
) -> Case {
    // The flag replaces its value in the base arguments, if there.
    let mut args: Vec<String> = Vec::new();
    let mut skip = false;
    for a in base {
        if skip {
            skip = false;
            continue;
        }
        if *a == flag {
            skip = true;
            continue;
        }
        args.push(a.to_string());
    }
    args.push(format!("{flag}={value}"));
    Case {
        program,
        args,
        expect: Expect::Refused(needles),
    }
}

const TRAIN: &[&str] = &[
    "--stem",
    "cifar",
    "--image-size",
    "8",
    "--batch-size",
    "4",
    "--steps",
    "1",
];
const INFER: &[&str] = &[
    "--model",
    "resnet18",
    "--stem",
    "cifar",
    "--image-size",
    "8",
    "--batch-size",
    "2",
];
const PROFILE: &[&str] = &[
    "--model",
    "resnet18",
    "--stem",
    "cifar",
    "--image-size",
    "8",
    "--batch-size",
    "2",
    "--iterations",
    "2",
    "--skip",
    "1",
];
const OPS: &[&str] = &[
    "--batch",
    "1",
    "--channels",
    "2",
    "--size",
    "4",
    "--reps",
    "1",
];

/// Values no count accepts, and what no float setting accepts.
const NOT_A_COUNT: [&str; 8] = [
    "abc",
    "",
    "-1",
    "1.5",
    "1e3",
    "18446744073709551616",
    "nan",
    "0x10",
];
const NOT_A_NUMBER: [&str; 4] = ["abc", "", "nan", "1,5"];

fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    // Counts (at least 1) and other integers.
    let counts: [(&'static str, &[&str], &[&str]); 4] = [
        (
            "train_resnet",
            TRAIN,
            &[
                "--steps",
                "--steps-per-epoch",
                "--batch-size",
                "--synthetic-classes",
                "--loader-threads",
                "--checkpoint-every",
                "--keep",
                "--threads",
                "--num-classes",
            ],
        ),
        (
            "infer_resnet",
            INFER,
            &[
                "--batch-size",
                "--threads",
                "--num-classes",
                "--reps",
                "--warmup",
            ],
        ),
        (
            "profile_resnet",
            PROFILE,
            &[
                "--batch-size",
                "--threads",
                "--num-classes",
                "--iterations",
                "--skip",
            ],
        ),
        (
            "ops_tour",
            OPS,
            &["--batch", "--channels", "--size", "--reps"],
        ),
    ];
    for (program, base, flags) in counts {
        for flag in flags {
            for value in NOT_A_COUNT {
                v.push(refused(program, base, flag, value, names_of(flag)));
            }
        }
    }
    // Zero where at least one is needed.
    for (program, base, flags) in [
        (
            "train_resnet",
            TRAIN,
            &[
                "--steps",
                "--steps-per-epoch",
                "--batch-size",
                "--synthetic-classes",
                "--loader-threads",
                "--checkpoint-every",
                "--keep",
                "--threads",
                "--num-classes",
            ][..],
        ),
        (
            "infer_resnet",
            INFER,
            &["--batch-size", "--threads", "--num-classes"][..],
        ),
        (
            "profile_resnet",
            PROFILE,
            &["--batch-size", "--threads", "--num-classes", "--iterations"][..],
        ),
        (
            "ops_tour",
            OPS,
            &["--batch", "--channels", "--size", "--reps"][..],
        ),
    ] {
        for flag in flags {
            v.push(refused(program, base, flag, "0", names_of(flag)));
        }
    }
    // Floating-point settings: not numbers, and values out of their range.
    let floats: [(&'static str, &[&str], &str, &[&str]); 12] = [
        ("train_resnet", TRAIN, "--lr", &["inf", "-1", "-inf"]),
        ("train_resnet", TRAIN, "--momentum", &["inf", "-1", "-0.5"]),
        (
            "train_resnet",
            TRAIN,
            "--weight-decay",
            &["inf", "-1", "-1e-5"],
        ),
        ("train_resnet", TRAIN, "--dropout", &["inf", "-1", "1.5"]),
        (
            "train_resnet",
            TRAIN,
            "--stochastic-depth",
            &["inf", "-1", "1.5"],
        ),
        (
            "train_resnet",
            TRAIN,
            "--clip-grad-norm",
            &["inf", "-1", "0"],
        ),
        ("train_resnet", TRAIN, "--bucket-mb", &["inf", "-1", "0"]),
        ("infer_resnet", INFER, "--dropout", &["inf", "-1", "1.5"]),
        ("profile_resnet", PROFILE, "--lr", &["inf", "-1", "-inf"]),
        (
            "profile_resnet",
            PROFILE,
            "--dropout",
            &["inf", "-1", "1.5"],
        ),
        (
            "profile_resnet",
            PROFILE,
            "--stochastic-depth",
            &["inf", "-1", "1.5"],
        ),
        (
            "infer_resnet",
            INFER,
            "--stochastic-depth",
            &["inf", "-1", "1.5"],
        ),
    ];
    for (program, base, flag, out_of_range) in floats {
        for value in NOT_A_NUMBER.iter().chain(out_of_range) {
            v.push(refused(program, base, flag, value, names_of(flag)));
        }
    }
    // Names and lists that mean nothing.
    let words: [(&'static str, &[&str], &[&str]); 3] = [
        (
            "train_resnet",
            TRAIN,
            &[
                "--model",
                "--stem",
                "--device",
                "--passes",
                "--optimizer",
                "--lr-schedule",
                "--augmentation",
                "--dist",
                "--schedule",
                "--verbosity",
                "--image-size",
            ],
        ),
        (
            "infer_resnet",
            INFER,
            &[
                "--model",
                "--stem",
                "--device",
                "--passes",
                "--image-size",
                "--verbosity",
            ],
        ),
        (
            "profile_resnet",
            PROFILE,
            &[
                "--model",
                "--stem",
                "--device",
                "--passes",
                "--schedule",
                "--image-size",
                "--verbosity",
            ],
        ),
    ];
    for (program, base, flags) in words {
        for flag in flags {
            for value in ["bogus", "cuda:x,", "?"] {
                v.push(refused(program, base, flag, value, names_of(flag)));
            }
        }
    }
    // Output paths: a folder, below a regular file, a read-only file, an input, the
    // same file twice, an empty name.
    let outputs: [(&'static str, &[&str], &[&str]); 3] = [
        (
            "train_resnet",
            TRAIN,
            &["--save", "--log", "--json", "--report", "--checkpoint-dir"],
        ),
        ("infer_resnet", INFER, &["--output", "--json", "--report"]),
        (
            "profile_resnet",
            PROFILE,
            &["--json", "--report", "--trace"],
        ),
    ];
    for (program, base, flags) in outputs {
        for flag in flags {
            for target in [
                "adir",
                "afile/x.out",
                "ro.json",
                "good.safetensors",
                "batch.safetensors",
            ] {
                if program == "profile_resnet" && target.ends_with(".safetensors") {
                    continue; // no input of profile_resnet: replacing the file is what was asked
                }
                let mut needles = names_of(flag);
                needles.push(target.to_string());
                let mut c = refused(program, base, flag, target, needles);
                // Inputs named so that an output on them would destroy them.
                c.args.extend(["--verbosity".into(), "2".into()]);
                if program == "train_resnet" {
                    c.args
                        .extend(["--weights".into(), "good.safetensors".into()]);
                    c.args.extend(["--data".into(), "batch.safetensors".into()]);
                } else if program == "infer_resnet" {
                    c.args
                        .extend(["--weights".into(), "good.safetensors".into()]);
                    c.args
                        .extend(["--input".into(), "batch.safetensors".into()]);
                }
                if flag == &"--checkpoint-dir" && target == "adir" {
                    continue; // a folder is what --checkpoint-dir takes
                }
                v.push(c);
            }
        }
    }
    for (program, base, a, b) in [
        ("train_resnet", TRAIN, "--json", "--report"),
        ("train_resnet", TRAIN, "--log", "--save"),
        ("train_resnet", TRAIN, "--json", "--save"),
        ("infer_resnet", INFER, "--output", "--json"),
        ("profile_resnet", PROFILE, "--json", "--report"),
        ("profile_resnet", PROFILE, "--json", "--trace"),
    ] {
        let mut c = refused(
            program,
            base,
            a,
            "o1.out",
            vec!["o1.out".into(), a.into(), b.into()],
        );
        c.args.push(format!("{b}=o1.out"));
        c.args.extend(["--verbosity".into(), "2".into()]);
        v.push(c);
    }
    // Input files: missing, a folder, empty, garbage, a FIFO, a profile for a model.
    let inputs: [(&'static str, &[&str], &[&str]); 2] = [
        ("train_resnet", TRAIN, &["--weights", "--data", "--resume"]),
        ("infer_resnet", INFER, &["--weights", "--input"]),
    ];
    for (program, base, flags) in inputs {
        for flag in flags {
            for source in [
                "missing.bin",
                "adir",
                "empty.bin",
                "garbage.bin",
                "fifo",
                "prof.json",
            ] {
                let mut needles = names_of(flag);
                needles.push(source.to_string());
                if flag == &"--resume" && source == "adir" {
                    continue; // an empty folder: see the resume tests
                }
                v.push(refused(program, base, flag, source, needles));
            }
        }
    }
    // wick-prof on files that are not profiles.
    for sub in [
        &["report"][..],
        &["diff", "prof.json"][..],
        &["predict"][..],
    ] {
        for source in [
            "missing.json",
            "adir",
            "empty.bin",
            "garbage.bin",
            "fifo",
            "good.safetensors",
        ] {
            let mut args: Vec<String> = sub.iter().map(|s| s.to_string()).collect();
            args.push(source.into());
            if sub[0] == "report" {
                args.extend(["-o".into(), format!("r-{source}.html")]);
            }
            v.push(Case {
                program: "wick-prof",
                args,
                expect: Expect::Refused(vec![source.into()]),
            });
        }
    }
    for (args, needle) in [
        (vec!["report", "prof.json", "-o", "prof.json"], "prof.json"),
        (vec!["report", "prof.json", "-o", "ro.json"], "ro.json"),
        (
            vec!["diff", "prof.json", "prof.json", "--json", "prof.json"],
            "prof.json",
        ),
        (
            vec!["diff", "prof.json", "prof.json", "--confidence", "0.99999"],
            "--confidence",
        ),
        (
            vec!["diff", "prof.json", "prof.json", "--min-share", "nan"],
            "--min-share",
        ),
        (vec!["predict", "prof.json", "--device", "tpu"], "tpu"),
        (
            vec!["predict", "prof.json", "--device", "garbage.bin"],
            "garbage.bin",
        ),
        (
            vec!["predict", "prof.json", "--json", "prof.json"],
            "prof.json",
        ),
    ] {
        v.push(Case {
            program: "wick-prof",
            args: args.into_iter().map(String::from).collect(),
            expect: Expect::Refused(vec![needle.into()]),
        });
    }
    // The round-two cases of issue #31 that are not one of the classes above.
    for (program, args, needle) in [
        (
            "train_resnet",
            vec![
                "--lr",
                "1e3",
                "--steps",
                "2",
                "--save",
                "good.safetensors",
                "--replace-read-only",
            ],
            "diverged",
        ),
        ("train_resnet", vec!["--threads", "1000"], "--threads"),
        (
            "infer_resnet",
            vec!["--bench", "--warmup", "18446744073709551615"],
            "--warmup",
        ),
        ("ops_tour", vec!["--size", "4000000000"], "GiB"),
        ("ops_tour", vec!["--batch", "100000000"], "GiB"),
        (
            "train_resnet",
            vec!["--image-size", "20000", "--batch-size", "64"],
            "GiB",
        ),
        ("train_resnet", vec!["--checkpoint-dir", "afile"], "afile"),
        (
            "train_resnet",
            vec!["--checkpoint-dir", "ck", "--save", "ck"],
            "ck",
        ),
    ] {
        let mut c = Case {
            program,
            args: TRAIN.iter().map(|s| s.to_string()).collect(),
            expect: Expect::Refused(vec![needle.into()]),
        };
        if program != "train_resnet" {
            c.args = if program == "ops_tour" {
                vec![]
            } else {
                INFER.iter().map(|s| s.to_string()).collect()
            };
        }
        let flags: Vec<&str> = args
            .iter()
            .copied()
            .filter(|a| a.starts_with("--"))
            .collect();
        c.args = refused(
            program,
            &c.args.iter().map(String::as_str).collect::<Vec<_>>(),
            "--none",
            "",
            vec![],
        )
        .args
        .into_iter()
        .filter(|a| a != "--none=")
        .collect();
        // Drop base flags the case sets itself.
        let mut kept = Vec::new();
        let mut it = c.args.into_iter();
        while let Some(a) = it.next() {
            if flags.contains(&a.as_str()) {
                it.next();
            } else {
                kept.push(a);
            }
        }
        kept.extend(args.into_iter().map(String::from));
        c.args = kept;
        v.push(c);
    }
    // Valid runs: each must work and write its output.
    for (program, args, file) in [
        (
            "train_resnet",
            vec!["--save", "w1.safetensors"],
            "w1.safetensors",
        ),
        (
            "train_resnet",
            vec![
                "--weights",
                "good.safetensors",
                "--save",
                "w2.safetensors",
                "--verbosity",
                "1",
                "--skip",
                "0",
                "--json",
                "w2.json",
            ],
            "w2.json",
        ),
        (
            "infer_resnet",
            vec![
                "--weights",
                "good.safetensors",
                "--input",
                "batch.safetensors",
                "--output",
                "l.safetensors",
            ],
            "l.safetensors",
        ),
        (
            "infer_resnet",
            vec![
                "--bench",
                "--reps",
                "2",
                "--verbosity",
                "2",
                "--json",
                "b.json",
            ],
            "b.json",
        ),
        (
            "profile_resnet",
            vec!["--json", "p2.json", "--report", "p2.html"],
            "p2.html",
        ),
        ("ops_tour", vec![], ""),
        (
            "wick-prof",
            vec!["report", "prof.json", "-o", "r.html"],
            "r.html",
        ),
        ("wick-prof", vec!["diff", "prof.json", "prof.json"], ""),
        (
            "wick-prof",
            vec![
                "predict",
                "prof.json",
                "--device",
                "a100",
                "--json",
                "pr.json",
            ],
            "pr.json",
        ),
    ] {
        let base: &[&str] = match program {
            "train_resnet" => TRAIN,
            "infer_resnet" => INFER,
            "profile_resnet" => PROFILE,
            "ops_tour" => OPS,
            _ => &[],
        };
        let mut a: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        a.extend(args.into_iter().map(String::from));
        v.push(Case {
            program,
            args: a,
            expect: Expect::Works(file),
        });
    }
    v
}

/// The scratch folder's inputs: a checkpoint, a data batch, a profile, a read-only file,
/// a regular file, garbage, an empty file, an empty folder and a FIFO.
fn prepare(dir: &Path) {
    let ok = |out: std::process::Output, what: &str| {
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let mut train: Vec<&str> = TRAIN.to_vec();
    train.extend(["--save", "good.safetensors"]);
    ok(
        common::run(dir, "train_resnet", &train, &[]),
        "making the checkpoint",
    );
    let mut profile: Vec<&str> = PROFILE.to_vec();
    profile.extend(["--json", "prof.json"]);
    ok(
        common::run(dir, "profile_resnet", &profile, &[]),
        "making the profile",
    );
    use candle_core::{DType, Device, Tensor};
    let images = Tensor::rand(0f32, 1f32, (2, 3, 8, 8), &Device::Cpu).unwrap();
    let labels = Tensor::new(&[1i64, 3], &Device::Cpu)
        .unwrap()
        .to_dtype(DType::I64)
        .unwrap();
    candle_core::safetensors::save(
        &[
            ("images".to_string(), images),
            ("labels".to_string(), labels),
        ]
        .into_iter()
        .collect(),
        dir.join("batch.safetensors"),
    )
    .unwrap();
    std::fs::write(dir.join("ro.json"), "{}").unwrap();
    let mut perm = std::fs::metadata(dir.join("ro.json"))
        .unwrap()
        .permissions();
    perm.set_readonly(true);
    std::fs::set_permissions(dir.join("ro.json"), perm).unwrap();
    std::fs::write(dir.join("afile"), "a regular file").unwrap();
    std::fs::write(
        dir.join("garbage.bin"),
        b"\x07\x00\x00\x00\x00\x00\x00\x00{not json",
    )
    .unwrap();
    std::fs::write(dir.join("empty.bin"), b"").unwrap();
    std::fs::create_dir(dir.join("adir")).unwrap();
    let fifo = std::ffi::CString::new(dir.join("fifo").to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
}

#[test]
fn the_reliability_suite_has_no_panic_hang_silent_wrong_result_or_data_loss() {
    let d = common::scratch("wick-reliability-");
    prepare(d.path());
    let cases = cases();
    let mut counts: BTreeMap<Outcome, usize> = BTreeMap::new();
    let mut bad = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let (outcome, err) = run_case(d.path(), case, i);
        *counts.entry(outcome).or_default() += 1;
        if !matches!(outcome, Outcome::ClearError | Outcome::Worked) {
            let first = err
                .lines()
                .find(|l| l.starts_with("error"))
                .or(err.lines().next())
                .unwrap_or("");
            bad.push(format!(
                "{outcome:?}: {} {}\n    {first}",
                case.program,
                case.args.join(" ")
            ));
        }
    }
    let total: usize = counts.values().sum();
    println!("reliability suite: {total} cases");
    for (outcome, n) in &counts {
        println!("  {outcome:?}: {n}");
    }
    assert!(total >= 400, "the suite has {total} cases, fewer than 400");
    assert!(
        bad.is_empty(),
        "{} of {total} cases went wrong:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
