//! What the command-line tests share: the examples cargo built, run as a user would.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The example `name`, built by cargo beside this test binary (`target/<profile>/examples`).
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let path = profile_dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} not built (cargo test builds the examples)",
        path.display()
    );
    path
}

/// Runs `name` with `args` in `dir`, killing it after 120 s (a hang fails the case).
pub fn run(dir: &Path, name: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(example(name))
        .args(args)
        .current_dir(dir)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(120) {
            child.kill().unwrap();
            panic!("{name} {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// [`run`] without extra environment, asserting that it succeeded; returns its stdout.
pub fn run_ok(dir: &Path, name: &str, args: &[&str]) -> String {
    succeeded(&run(dir, name, args, &[]), &format!("{name} {args:?}"))
}

/// Asserts that the command `what` succeeded, its stdout and stderr in the message;
/// returns its stdout.
pub fn succeeded(out: &Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what}: {stdout}{stderr}");
    stdout
}

/// Runs the `wick-prof` binary with `args` in `dir`.
pub fn wick_prof(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wick-prof"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// Asserts that `out` exited with `code` and that its stderr contains each of `needles`
/// (`case` names the case in a failure); returns the stderr.
pub fn assert_fails(out: &Output, code: i32, needles: &[&str], case: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{case}: {err}");
    for n in needles {
        assert!(err.contains(n), "{case}: no {n:?} in: {err}");
    }
    err
}

/// Starts `name` with `args` in `dir`, its output discarded.
pub fn spawn(dir: &Path, name: &str, args: &[&str]) -> Child {
    Command::new(example(name))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A scratch folder named `<prefix>...`, removed when dropped (also when a test fails).
pub fn scratch(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(prefix).tempdir().unwrap()
}

/// A real profile's JSON: a ReLU (layer `act`) and a softmax (layer `head`) on a
/// `side` x `side` input of ones, `runs` runs under `TimeProfiler::new(2, 1)`.
pub fn relu_softmax_profile(side: usize, runs: usize) -> serde_json::Value {
    use candle_core::{DType, Device, Tensor};
    use wick::graph::{Executor, GraphBuilder, Mode};
    use wick::profiler::TimeProfiler;
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let x = b.input("x", &[side, side], DType::F32).unwrap();
    let y = b.in_layer("act", |b| b.relu(x)).unwrap();
    let y = b.in_layer("head", |b| b.softmax(y, 1)).unwrap();
    b.output(y);
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    exec.add_hook(TimeProfiler::new(2, 1)).unwrap();
    let ones = Tensor::ones((side, side), DType::F32, &Device::Cpu).unwrap();
    exec.set("x", &ones).unwrap();
    for _ in 0..runs {
        exec.run().unwrap();
    }
    let json = exec.hook::<TimeProfiler>().unwrap().profile().to_json();
    serde_json::from_str(&json).unwrap()
}

/// Asserts that `text` (an error message) mentions each of `words`, naming those missing.
#[track_caller]
pub fn assert_mentions(text: &str, words: &[&str]) {
    let missing: Vec<&&str> = words.iter().filter(|w| !text.contains(**w)).collect();
    assert!(missing.is_empty(), "{missing:?} missing from: {text}");
}
