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
