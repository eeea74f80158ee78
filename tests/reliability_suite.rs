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
mod reliability_cases;

use reliability_cases::{Case, Expect, PROFILE, TRAIN};

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

/// The scratch folder's inputs: a checkpoint, a data batch, a profile, a read-only file,
/// a regular file, garbage, an empty file, an empty folder and a FIFO.
fn prepare(dir: &Path) {
    let mut train: Vec<&str> = TRAIN.to_vec();
    train.extend(["--save", "good.safetensors"]);
    common::run_ok(dir, "train_resnet", &train);
    let mut profile: Vec<&str> = PROFILE.to_vec();
    profile.extend(["--json", "prof.json"]);
    common::run_ok(dir, "profile_resnet", &profile);
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
    mkfifo(&dir.join("fifo"));
    std::os::unix::fs::symlink("link_loop", dir.join("link_loop")).unwrap();
    std::os::unix::fs::symlink("nowhere", dir.join("link_dangling")).unwrap();
    prepare_datasets(dir);
}

fn mkfifo(path: &Path) {
    let fifo = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.path().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// A broken copy of the good folder: its name, and how it is broken.
type Breakage<'a> = (&'a str, &'a dyn Fn(&Path));

/// The ImageFolders of `reliability_cases/data.rs`: a good one (`img_good`, 2 classes of
/// 4 + 2 JPEGs), its training part alone (`img_flat`), copies each broken one way, and a
/// text that is not UTF-8.
fn prepare_datasets(dir: &Path) {
    common::run_ok(
        dir,
        "make_image_folder",
        &[
            "--out",
            "img_good",
            "--classes",
            "2",
            "--train-per-class",
            "4",
            "--val-per-class",
            "2",
            "--size",
            "20x16",
            "--jpeg-only",
        ],
    );
    copy_tree(&dir.join("img_good/train"), &dir.join("img_flat"));
    let broken: [Breakage; 9] = [
        ("img_fifo", &|d| mkfifo(&d.join("train/circle/zz.jpg"))),
        ("img_truncated", &|d| {
            let f = d.join("val/circle/0000.jpg");
            let bytes = std::fs::read(&f).unwrap();
            std::fs::write(&f, &bytes[..bytes.len() / 3]).unwrap();
        }),
        ("img_text", &|d| {
            std::fs::write(d.join("val/circle/0000.jpg"), "hello").unwrap()
        }),
        ("img_empty_file", &|d| {
            std::fs::write(d.join("val/circle/0000.jpg"), "").unwrap()
        }),
        ("img_empty_class", &|d| {
            std::fs::create_dir(d.join("train/empty")).unwrap()
        }),
        ("img_bmp", &|d| {
            std::fs::write(d.join("train/circle/x.bmp"), "BM").unwrap()
        }),
        ("img_classes_differ", &|d| {
            std::fs::rename(d.join("val/cross"), d.join("val/kross")).unwrap()
        }),
        ("img_no_classes", &|d| {
            std::fs::remove_dir_all(d).unwrap();
            std::fs::create_dir(d).unwrap();
        }),
        ("img_loop", &|d| {
            std::os::unix::fs::symlink(".", d.join("train/circle/loop")).unwrap()
        }),
    ];
    for (name, break_it) in broken {
        copy_tree(&dir.join("img_good"), &dir.join(name));
        break_it(&dir.join(name));
    }
    let mut latin1 = b"caf\xe9 ".repeat(200);
    latin1.extend(b"end");
    std::fs::write(dir.join("latin1.txt"), latin1).unwrap();
}

#[test]
fn the_reliability_suite_has_no_panic_hang_silent_wrong_result_or_data_loss() {
    let d = common::scratch("wick-reliability-");
    prepare(d.path());
    let cases = reliability_cases::all();
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
