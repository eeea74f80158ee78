//! Issue #16: a non-square batch (4 images of 50x37, width x height) through the examples
//! as a user runs them, against PyTorch at the same size (`fixtures/resnet18-nonsquare`,
//! made by `scripts/make_nonsquare_fixture.py`): `infer_resnet`'s logits, and one
//! `train_resnet` step's loss and updated weights.
//!
//! Each figure is compared with PyTorch's float64 result, and wick's error is bounded by a
//! small multiple of PyTorch float32's own error on the same figure (both read from the
//! fixture), so the bound is float32 rounding as PyTorch has it, not a tuned number.

mod common;

use common::run_ok;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use wick::models::checkpoint::{read_safetensors, StateDict};
use wick::models::{Depth, ResNetConfig, Session, Stem, WeightInit};
use wick::ops::compare::{ErrorSpreads, Spread};

/// wick may be this many times further from float64 than PyTorch float32 is.
const K: f64 = 4.0;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/resnet18-nonsquare")
        .join(name)
}

fn f64s(t: &Tensor) -> Vec<f64> {
    wick::ops::compare::host_values(t).unwrap()
}

/// max |a - b| / max |b|.
fn rel(a: &[f64], b: &[f64]) -> f64 {
    wick::ops::compare::max_rel_diff_values(a, b)
}

/// Asserts wick's error (vs float64) is within K times PyTorch float32's; the fixture
/// names them `<head>_f32<tail>` and `<head>_f64<tail>`.
fn assert_close(what: &str, wick: &[f64], expected: &StateDict, head: &str, tail: &str) {
    let (f32_, f64_) = (
        f64s(&expected[&format!("{head}_f32{tail}")]),
        f64s(&expected[&format!("{head}_f64{tail}")]),
    );
    let (ours, torch) = (rel(wick, &f64_), rel(&f32_, &f64_));
    println!("{what}: wick {ours:.2e}, PyTorch float32 {torch:.2e} (vs float64)");
    assert!(
        ours <= K * torch,
        "{what}: wick's error {ours:.2e} exceeds {K} x PyTorch float32's {torch:.2e}"
    );
}

/// MODEL's flags, the formula `weights`, the fixture batch given as `batch_flag`, then
/// `rest`.
fn with_model(weights: &Path, batch_flag: &str, rest: &[&str]) -> Vec<String> {
    let batch = fixture("batch.safetensors");
    let (weights, batch) = (weights.display().to_string(), batch.display().to_string());
    let flags = ["--weights", &weights, batch_flag, &batch];
    MODEL
        .iter()
        .chain(&flags)
        .chain(rest)
        .map(|s| s.to_string())
        .collect()
}

fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

const MODEL: [&str; 6] = [
    "--model",
    "resnet18",
    "--stem",
    "imagenet",
    "--num-classes",
    "10",
];

/// The formula's weights (`fixtures/resnet18-formula/README.md`) as a checkpoint file.
fn formula_weights(dir: &Path) -> (PathBuf, StateDict) {
    let config = ResNetConfig::new(Depth::R18, Stem::ImageNet, 10).unwrap();
    let mut s = Session::inference(config, 1, 224, &Device::Cpu).unwrap();
    s.init_weights(WeightInit::Formula).unwrap();
    let path = dir.join("formula.safetensors");
    s.save_checkpoint(&path).unwrap();
    (path, s.state_dict().unwrap())
}

#[test]
fn infer_resnet_logits_match_pytorch_at_50x37() {
    let d = tempfile::tempdir().unwrap();
    let (weights, _) = formula_weights(d.path());
    let args = with_model(&weights, "--input", &["--output", "logits.safetensors"]);
    let stdout = run_ok(d.path(), "infer_resnet", &as_strs(&args));
    assert!(stdout.contains("[4, 10]"), "{stdout}");
    let logits = &read_safetensors(&d.path().join("logits.safetensors")).unwrap()["logits"];
    let expected = read_safetensors(&fixture("expected.safetensors")).unwrap();
    assert_close("eval logits", &f64s(logits), &expected, "logits_eval", "");
}

#[test]
fn one_train_resnet_step_matches_pytorch_at_50x37() {
    let d = tempfile::tempdir().unwrap();
    let (weights, before) = formula_weights(d.path());
    let rest = [
        "--steps",
        "1",
        "--lr",
        "0.1",
        "--momentum",
        "0.9",
        "--weight-decay",
        "5e-4",
        "--save",
        "after.safetensors",
        "--log",
        "log.jsonl",
    ];
    let args = with_model(&weights, "--data", &rest);
    let args = as_strs(&args);
    let stdout = run_ok(d.path(), "train_resnet", &args);
    assert!(stdout.contains("50x37"), "{stdout}");
    let expected = read_safetensors(&fixture("expected.safetensors")).unwrap();

    let log = std::fs::read_to_string(d.path().join("log.jsonl")).unwrap();
    let loss: f64 = log
        .split("\"train_loss\":")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no train_loss in {log}"));
    assert_close("loss", &[loss], &expected, "loss_train", "");

    let after = read_safetensors(&d.path().join("after.safetensors")).unwrap();
    let (mut full, mut norms) = (0, Vec::new());
    for (name, w0) in &before {
        if name.ends_with("num_batches_tracked") {
            continue;
        }
        let update: Vec<f64> = f64s(&after[name])
            .iter()
            .zip(f64s(w0))
            .map(|(a, b)| a - b)
            .collect();
        if expected.contains_key(&format!("update1_f64.{name}")) {
            assert_close(
                &format!("update of {name}"),
                &update,
                &expected,
                "update1",
                &format!(".{name}"),
            );
            full += 1;
        }
        let norm = update.iter().map(|v| v * v).sum::<f64>().sqrt();
        let (t32, t64) = (
            f64s(&expected[&format!("update1_norm_f32.{name}")])[0],
            f64s(&expected[&format!("update1_norm_f64.{name}")])[0],
        );
        norms.push(((norm - t64).abs() / t64, (t32 - t64).abs() / t64));
    }
    assert_eq!(full, 11, "the fixture's full updates");
    assert_eq!(norms.len(), 102, "every floating-point entry of ResNet-18");
    // Update norms: the median and the worst relative error, each within K x PyTorch's.
    let spreads = ErrorSpreads::new(&norms);
    println!("update norms of {} entries: {spreads}", norms.len());
    assert!(spreads.within(K, Spread::ZERO), "update norms: {spreads}");
}
