//! Issue #16: `train_resnet` killed (SIGKILL) at random moments, or interrupted (SIGINT,
//! which saves a checkpoint first), and resumed with `--resume`, ends with the same final
//! weights, byte for byte, as the uninterrupted run with the same seed.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{assert_mentions, run, run_ok, spawn, succeeded};

/// ResNet-18 (CIFAR stem) on 8x8 synthetic images, batch 4, 12 steps, seed 3.
#[rustfmt::skip]
const RUN: [&str; 10] = ["--stem", "cifar", "--image-size", "8", "--batch-size", "4", "--steps", "12", "--seed", "3"];

/// Checkpoints into `ck` every `every` steps, and the final weights into
/// `final.safetensors`.
fn checkpointed(every: &'static str) -> [&'static str; 6] {
    [
        "--checkpoint-dir",
        "ck",
        "--checkpoint-every",
        every,
        "--save",
        "final.safetensors",
    ]
}

fn train(dir: &Path, extra: &[&str]) -> std::process::Output {
    let args: Vec<&str> = RUN.iter().copied().chain(extra.iter().copied()).collect();
    let out = run(dir, "train_resnet", &args, &[]);
    succeeded(&out, "train_resnet");
    out
}

fn reference(dir: &Path) -> Vec<u8> {
    train(dir, &["--save", "reference.safetensors"]);
    std::fs::read(dir.join("reference.safetensors")).unwrap()
}

/// Resumes from `ck` (or starts over when no checkpoint was written yet) to the end.
fn finish(dir: &Path) -> Vec<u8> {
    let resumable = !wick::models::resume::periodic(&dir.join("ck"))
        .unwrap()
        .is_empty();
    let mut args = checkpointed("2").to_vec();
    if resumable {
        args.extend(["--resume", "ck"]);
    }
    train(dir, &args);
    std::fs::read(dir.join("final.safetensors")).unwrap()
}

#[test]
fn killed_runs_resume_to_the_uninterrupted_weights() {
    let d = common::scratch("wick-kill-");
    let expected = reference(d.path());
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let trials = 4;
    let mut killed_mid_run = 0;
    for trial in 0..trials {
        let dir = d.path().join(format!("trial{trial}"));
        std::fs::create_dir(&dir).unwrap();
        let args: Vec<&str> = RUN.iter().copied().chain(checkpointed("2")).collect();
        let mut child = spawn(&dir, "train_resnet", &args);
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(300 + rng % 1500));
        if child.try_wait().unwrap().is_none() {
            killed_mid_run += 1;
        }
        // SIGKILL.
        child.kill().unwrap();
        child.wait().unwrap();
        // Whatever the kill cut short (or not), resuming writes the final weights: a kill
        // after the last checkpoint leaves nothing to train but the --save to write.
        let _ = std::fs::remove_file(dir.join("final.safetensors"));
        assert_eq!(
            finish(&dir),
            expected,
            "trial {trial}: different final weights"
        );
    }
    println!("kill test: {trials} trials, {killed_mid_run} killed mid-run, all resumed to the same weights");
    assert!(
        killed_mid_run > 0,
        "no trial was killed mid-run: lengthen the run"
    );
}

#[test]
fn sigint_saves_a_checkpoint_and_the_resumed_run_ends_the_same() {
    let d = common::scratch("wick-sigint-");
    let long = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut args: Vec<&str> = RUN.to_vec();
        args[7] = "60"; // --steps 60: long enough to interrupt
        args.extend_from_slice(extra);
        args
    };
    run_ok(
        d.path(),
        "train_resnet",
        &long(&["--save", "reference.safetensors"]),
    );
    let expected = std::fs::read(d.path().join("reference.safetensors")).unwrap();
    let dir = d.path().join("run");
    std::fs::create_dir(&dir).unwrap();
    let args = long(&checkpointed("5"));
    let child = spawn(&dir, "train_resnet", &args);
    // Interrupt once training is under way: its first periodic checkpoint exists.
    let first = dir.join("ck").join("step-5");
    for _ in 0..3000 {
        if first.join("training.safetensors").exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the run finished before SIGINT: {err}"
    );
    assert_mentions(&err, &["interrupted at step", "--resume"]);
    let step: u64 = err
        .split("interrupted at step ")
        .nth(1)
        .and_then(|r| r.split(':').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no step in {err}"));
    let saved = wick::models::resume::periodic(&dir.join("ck")).unwrap();
    assert_eq!(
        saved.last().unwrap().0,
        step,
        "SIGINT saved the step it stopped at"
    );
    assert!(
        !dir.join("final.safetensors").exists(),
        "no final weights after an interrupt"
    );
    let mut resume = long(&checkpointed("5"));
    resume.extend(["--resume", "ck"]);
    run_ok(&dir, "train_resnet", &resume);
    assert_eq!(
        std::fs::read(dir.join("final.safetensors")).unwrap(),
        expected
    );
    println!("SIGINT at step {step}: checkpoint saved, resumed to the same weights");
}

#[test]
fn loader_threads_and_resume_with_them_give_the_same_weights() {
    let d = common::scratch("wick-loader-");
    let expected = reference(d.path());
    // Three loader threads: the same batches in the same order.
    train(
        d.path(),
        &["--loader-threads", "3", "--save", "threads.safetensors"],
    );
    assert_eq!(
        std::fs::read(d.path().join("threads.safetensors")).unwrap(),
        expected,
        "--loader-threads 3 changed the run"
    );
    // Stop at step 7 (checkpoint at 6), then resume with two loader threads.
    let dir = d.path().join("resumed");
    std::fs::create_dir(&dir).unwrap();
    let mut args: Vec<&str> = RUN.to_vec();
    args[7] = "7";
    args.extend(["--checkpoint-dir", "ck", "--checkpoint-every", "3"]);
    run_ok(&dir, "train_resnet", &args);
    train(
        &dir,
        &[
            "--loader-threads",
            "2",
            "--checkpoint-dir",
            "ck",
            "--checkpoint-every",
            "3",
            "--resume",
            "ck",
            "--save",
            "final.safetensors",
        ],
    );
    assert_eq!(
        std::fs::read(dir.join("final.safetensors")).unwrap(),
        expected,
        "resumed with 2 loader threads: different final weights"
    );
}
