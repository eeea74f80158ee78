//! Issue #15's command-line cases: the examples, run as a user would, on bad input. Each
//! case asserts a clear one-line error naming the flag or file (and exit status 1), or a
//! refusal by clap (status 2), and that nothing was lost. `cargo test` builds the
//! examples; these tests run the release or debug binaries next to this test binary.

mod common;

use common::{run, run_ok, succeeded};
use std::process::Output;
use std::time::{Duration, Instant};

/// Asserts a clean failure: status `code`, stderr one `error:` line (no backtrace, no
/// panic) containing every one of `needles`; returns stderr.
fn fails(out: &Output, code: i32, needles: &[&str]) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "exit status; stderr: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("stack backtrace"),
        "{err}"
    );
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}: {err}");
    }
    err
}

fn dir() -> tempfile::TempDir {
    common::scratch("wick-cli-")
}

/// Small and fast: ResNet-18, CIFAR stem, 8x8 synthetic images.
const SMALL: [&str; 6] = ["--stem", "cifar", "--image-size", "8", "--batch-size", "4"];

#[test]
fn bad_numbers_are_refused_naming_the_flag() {
    let d = dir();
    let cases: [(&str, &[&str], i32, &str); 8] = [
        (
            "profile_resnet",
            &["--threads", "0"],
            1,
            "--threads must be at least 1",
        ),
        (
            "train_resnet",
            &["--steps", "0"],
            1,
            "--steps/--epochs must be at least 1",
        ),
        (
            "train_resnet",
            &["--batch-size", "0"],
            1,
            "--batch-size must be at least 1",
        ),
        (
            "train_resnet",
            &["--image-size", "4294967296"],
            1,
            "at 4294967296x4294967296: its size overflows",
        ),
        ("profile_resnet", &["--verbosity", "9"], 2, "0..=3"),
        (
            "ops_tour",
            &["--channels", "0"],
            1,
            "--channels must be at least 1",
        ),
        ("ops_tour", &["--reps", "0"], 1, "--reps must be at least 1"),
        (
            "infer_resnet",
            &["--bench", "--reps", "0"],
            1,
            "--reps must be at least 1",
        ),
    ];
    for (name, args, code, needle) in &cases {
        fails(&run(d.path(), name, args, &[]), *code, &[needle]);
    }
    println!("bad numbers: {} cases, all refused", cases.len());
}

#[test]
fn unusable_output_paths_are_refused_before_any_work() {
    let d = dir();
    let cases: [(&str, &str, &str); 5] = [
        ("train_resnet", "--save", "/dev/null"),
        ("train_resnet", "--save", "missing-folder/x.safetensors"),
        ("profile_resnet", "--json", "missing-folder/p.json"),
        ("profile_resnet", "--trace", "/dev/null"),
        ("infer_resnet", "--output", "."),
    ];
    for (name, flag, path) in cases {
        let started = Instant::now();
        let out = run(d.path(), name, &[flag, path], &[]);
        fails(&out, 1, &[flag, path]);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{name} {flag}: checked late"
        );
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let dev_null = std::fs::metadata("/dev/null").unwrap().file_type();
        assert!(dev_null.is_char_device());
    }
    println!(
        "unusable output paths: {} cases, all refused before any work",
        cases.len()
    );
}

#[test]
fn a_fifo_or_a_missing_file_as_weights_is_one_clear_line() {
    let d = dir();
    let fifo = d.path().join("w.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let out = run(d.path(), "train_resnet", &["--weights", "w.fifo"], &[]);
    fails(&out, 1, &["w.fifo", "not a regular file"]);
    // With RUST_BACKTRACE set: still one line, and the OS message once.
    let env = [("RUST_BACKTRACE", "1")];
    let out = run(
        d.path(),
        "infer_resnet",
        &["--weights", "nope.safetensors"],
        &env,
    );
    let err = fails(&out, 1, &["nope.safetensors", "No such file"]);
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    println!("unreadable weights: 2 cases, one clear line each");
}

#[test]
fn a_diverging_run_stops_and_leaves_the_old_checkpoint_untouched() {
    let d = dir();
    let mut args: Vec<&str> = SMALL.to_vec();
    args.extend(["--steps", "2", "--save", "good.safetensors"]);
    run_ok(d.path(), "train_resnet", &args);
    let good = std::fs::read(d.path().join("good.safetensors")).unwrap();
    std::fs::write(d.path().join("start.safetensors"), &good).unwrap();
    // Saved through a symlink: the link stays, its target is replaced.
    std::os::unix::fs::symlink("good.safetensors", d.path().join("link.safetensors")).unwrap();
    let mut args: Vec<&str> = SMALL.to_vec();
    args.extend([
        "--lr",
        "1e3",
        "--weights",
        "start.safetensors",
        "--save",
        "link.safetensors",
    ]);
    let out = run(d.path(), "train_resnet", &args, &[]);
    fails(
        &out,
        1,
        &["training step", "stopped", "nothing saved", "untouched"],
    );
    assert_eq!(
        std::fs::read(d.path().join("good.safetensors")).unwrap(),
        good
    );
    let link = std::fs::symlink_metadata(d.path().join("link.safetensors")).unwrap();
    assert!(link.file_type().is_symlink());
    let left: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("wick-partial"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
    println!("diverging run: stopped, old checkpoint byte-identical");
}

/// Issue #31: a model that diverged is never written. Training at lr 1e3 ends with NaN
/// logits (the weights may stay finite): the run exits 1 and the good file is untouched.
/// A finite checkpoint with one weight at 3e38 gives NaN logits: `infer_resnet` refuses to
/// write them unless `--allow-non-finite`.
#[test]
fn a_diverged_model_is_never_written() {
    let d = dir();
    let p = d.path();
    std::fs::write(p.join("good.safetensors"), b"the user's good model").unwrap();
    let mut args: Vec<&str> = SMALL.to_vec();
    args.extend(["--steps", "2", "--lr", "1e3", "--save", "good.safetensors"]);
    let out = run(p, "train_resnet", &args, &[]);
    fails(
        &out,
        1,
        &[
            "the model diverged",
            "NaN or an infinity",
            "good.safetensors is untouched",
        ],
    );
    assert_eq!(
        std::fs::read(p.join("good.safetensors")).unwrap(),
        b"the user's good model"
    );

    // A finite checkpoint with one huge weight.
    let mut args: Vec<&str> = SMALL.to_vec();
    args.extend(["--steps", "1", "--save", "w.safetensors"]);
    assert!(run(p, "train_resnet", &args, &[]).status.success());
    let path = p.join("w.safetensors");
    let mut state = candle_core::safetensors::load(&path, &candle_core::Device::Cpu).unwrap();
    let w = &state["conv1.weight"];
    let mut v = w.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    v[0] = 3e38;
    let poisoned = candle_core::Tensor::from_vec(v, w.dims(), &candle_core::Device::Cpu).unwrap();
    state.insert("conv1.weight".into(), poisoned);
    candle_core::safetensors::save(&state, &path).unwrap();
    let infer = [
        "--model",
        "resnet18",
        "--stem",
        "cifar",
        "--num-classes",
        "10",
        "--image-size",
        "8",
        "--batch-size",
        "2",
        "--weights",
        "w.safetensors",
        "--output",
        "logits.safetensors",
    ];
    let out = run(p, "infer_resnet", &infer, &[]);
    fails(
        &out,
        1,
        &["the logits hold", "nothing written", "--allow-non-finite"],
    );
    assert!(!p.join("logits.safetensors").exists());
    let mut allowed = infer.to_vec();
    allowed.push("--allow-non-finite");
    let out = run(p, "infer_resnet", &allowed, &[]);
    succeeded(&out, "infer_resnet");
    assert!(String::from_utf8_lossy(&out.stderr).contains("warning: the logits hold"));
    assert!(p.join("logits.safetensors").exists());
    println!("diverged models: 3 cases, nothing written unless asked");
}

/// Issue #31: a read-only output is refused up front unless `--replace-read-only`; a
/// legal 240-byte output name is written (wick's temporary name stays legal).
#[test]
fn read_only_outputs_need_a_flag_and_long_names_work() {
    use std::os::unix::fs::PermissionsExt;
    let d = dir();
    let p = d.path();
    std::fs::write(p.join("ro.json"), b"the user's read-only file").unwrap();
    std::fs::set_permissions(p.join("ro.json"), std::fs::Permissions::from_mode(0o444)).unwrap();
    let base = [
        "--stem",
        "cifar",
        "--image-size",
        "8",
        "--iterations",
        "2",
        "--skip",
        "1",
    ];
    let mut args = base.to_vec();
    args.extend(["--json", "ro.json"]);
    fails(
        &run(p, "profile_resnet", &args, &[]),
        1,
        &["--json ro.json", "read-only", "--replace-read-only"],
    );
    assert_eq!(
        std::fs::read(p.join("ro.json")).unwrap(),
        b"the user's read-only file"
    );
    args.push("--replace-read-only");
    run_ok(p, "profile_resnet", &args);
    assert!(std::fs::read_to_string(p.join("ro.json"))
        .unwrap()
        .contains("wick-profile"));
    let long = format!("{}.json", "n".repeat(240));
    let mut args = base.to_vec();
    args.extend(["--json", &long]);
    run_ok(p, "profile_resnet", &args);
    assert!(p.join(&long).exists());
    println!("read-only and long-named outputs: 3 cases");
}

/// Issue #31: unbounded numbers are refused before any work, naming the flag: threads
/// far past the cores, warm-ups and repetitions that never end, sizes no memory holds
/// (checked before any data is made).
#[test]
fn unbounded_numbers_are_refused_before_any_work() {
    let d = dir();
    let cases: [(&str, &[&str], &str); 8] = [
        (
            "profile_resnet",
            &["--threads", "1000"],
            "--threads 1000: this machine has",
        ),
        (
            "infer_resnet",
            &["--bench", "--warmup", "18446744073709551615"],
            "--warmup 18446744073709551615: at most",
        ),
        (
            "infer_resnet",
            &["--bench", "--reps", "4000000000"],
            "--reps 4000000000: at most",
        ),
        (
            "profile_resnet",
            &["--iterations", "18446744073709551615"],
            "--iterations",
        ),
        (
            "profile_resnet",
            &["--skip", "18446744073709551615"],
            "--skip",
        ),
        (
            "ops_tour",
            &["--size", "4000000000"],
            "more than any allocation can hold",
        ),
        (
            "ops_tour",
            &["--batch", "100000000"],
            "ops_tour's feature maps",
        ),
        (
            "train_resnet",
            &["--image-size", "20000"],
            "at 20000x20000 needs about",
        ),
    ];
    for (name, args, needle) in &cases {
        let started = Instant::now();
        fails(&run(d.path(), name, args, &[]), 1, &[needle]);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{name} {args:?}: refused late"
        );
    }
    // The environment variable that sets what --threads sets is checked as --threads is.
    for (value, needle) in [
        ("1000", "RAYON_NUM_THREADS 1000: this machine has"),
        (
            "lots",
            "RAYON_NUM_THREADS=lots: a count of threads is needed",
        ),
    ] {
        let started = Instant::now();
        let env = [("RAYON_NUM_THREADS", value)];
        fails(&run(d.path(), "profile_resnet", &[], &env), 1, &[needle]);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{value}: refused late"
        );
    }
    println!(
        "unbounded numbers: {} cases and 2 of RAYON_NUM_THREADS, all refused at once",
        cases.len()
    );
}

/// Issue #31: a profile file that the schedule cannot fill is refused before training,
/// and the --save it would have lost is never at stake.
#[test]
fn a_trace_with_no_timed_step_is_refused_before_training() {
    let d = dir();
    let mut args: Vec<&str> = SMALL.to_vec();
    args.extend([
        "--steps",
        "3",
        "--verbosity",
        "2",
        "--trace",
        "t.json",
        "--save",
        "s.safetensors",
    ]);
    let started = Instant::now();
    fails(
        &run(d.path(), "train_resnet", &args, &[]),
        1,
        &[
            "--trace, --json, --report and --folded need a timed step",
            "times none of the 3 steps",
        ],
    );
    assert!(started.elapsed() < Duration::from_secs(10), "refused late");
    assert!(!d.path().join("s.safetensors").exists());
}
