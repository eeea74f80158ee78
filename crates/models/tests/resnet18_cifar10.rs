//! ResNet-18 (CIFAR stem) against PyTorch: evaluation logits, training logits and loss,
//! gradients, and the whole checkpoint after one SGD step, through `Session`, the code
//! path the examples use.
//!
//! **External suite.** Its weights (45 MB) live outside the repository, in
//! `../shared/fixtures/resnet18-cifar10` (or `$WICK_FIXTURES/resnet18-cifar10`), so every
//! test here is ignored by default and runs with
//! `cargo test --release -p wick-models --test resnet18_cifar10 -- --ignored`, as CI does.
//! The in-repository ResNet-18 checks are in `resnet18_formula.rs`.

mod common;

use common::{config, norm, training_session};
use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use wick_models::checkpoint::read_safetensors;
use wick_models::Session;

fn fixture(name: &str) -> PathBuf {
    let dirs: Vec<PathBuf> = std::env::var_os("WICK_FIXTURES")
        .map(PathBuf::from)
        .into_iter()
        .chain([PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures")])
        .collect();
    let dir = dirs.iter().find(|d| d.is_dir()).unwrap_or_else(|| {
        panic!("PyTorch fixtures not found: set WICK_FIXTURES or provide ../shared/fixtures (looked in {dirs:?})")
    });
    dir.join("resnet18-cifar10").join(name)
}

/// The CPU, or the GPU with `WICK_TEST_DEVICE=cuda` (see scripts/gpu-check.sh).
fn device() -> Device {
    let name = std::env::var("WICK_TEST_DEVICE").unwrap_or_else(|_| "cpu".into());
    wick_graph::device::select(&name).unwrap_or_else(|e| panic!("WICK_TEST_DEVICE={name}: {e}"))
}

fn max_rel(a: &Tensor, b: &Tensor) -> f64 {
    wick_ops::max_rel_diff(a, b).unwrap()
}

fn batch() -> (Tensor, Tensor) {
    let b = read_safetensors(&fixture("batch.safetensors")).unwrap();
    (b["images"].clone(), b["labels"].clone())
}

fn expected() -> HashMap<String, Tensor> {
    read_safetensors(&fixture("expected.safetensors")).unwrap()
}

#[test]
#[ignore = "needs the external fixture ../shared/fixtures/resnet18-cifar10 (45 MB): run with --ignored"]
fn evaluation_logits_match_pytorch() {
    let (images, _) = batch();
    let mut s = Session::inference(config(), 8, 32, &device()).unwrap();
    s.load_checkpoint(&fixture("weights.safetensors")).unwrap();
    let logits = s.forward(&images).unwrap();
    let e = max_rel(&logits, &expected()["logits_eval"]);
    assert!(e <= 1e-4, "logits_eval relative error {e:.2e}");
}

/// A training session loaded with the fixture weights, after one SGD step on the batch.
fn stepped() -> (Session, f32) {
    let (images, labels) = batch();
    let mut s = training_session(&device());
    s.load_checkpoint(&fixture("weights.safetensors")).unwrap();
    let loss = s.step(&images, &labels).unwrap();
    (s, loss)
}

#[test]
#[ignore = "needs the external fixture ../shared/fixtures/resnet18-cifar10 (45 MB): run with --ignored"]
fn training_step_matches_pytorch_logits_loss_and_gradients() {
    let exp = expected();
    let (s, loss) = stepped();
    let ref_loss = exp["loss_train"].to_scalar::<f32>().unwrap();
    assert!(
        ((loss - ref_loss) / ref_loss).abs() <= 1e-5,
        "loss {loss} vs {ref_loss}"
    );
    let e = max_rel(s.logits().unwrap(), &exp["logits_train"]);
    assert!(e <= 1e-4, "logits_train relative error {e:.2e}");
    for (name, tol) in [
        ("conv1.weight", 1e-2),
        ("bn1.weight", 1e-2),
        ("bn1.bias", 1e-2),
        ("layer4.1.conv2.weight", 1e-3),
        ("fc.weight", 1e-3),
        ("fc.bias", 1e-3),
    ] {
        let e = max_rel(s.gradient(name).unwrap(), &exp[&format!("grad.{name}")]);
        assert!(e <= tol, "grad.{name} relative error {e:.2e} > {tol:.0e}");
    }
}

#[test]
#[ignore = "needs the external fixture ../shared/fixtures/resnet18-cifar10 (45 MB): run with --ignored"]
fn updated_checkpoint_after_one_sgd_step_matches_pytorch() {
    let (s, _) = stepped();
    // The whole checkpoint after the step, saved and read back as a user would.
    let dir = tempfile::Builder::new()
        .prefix("wick-test-")
        .tempdir()
        .unwrap();
    let path = dir.path().join("after.safetensors");
    s.save_checkpoint(&path).unwrap();
    let ours = read_safetensors(&path).unwrap();
    let before = read_safetensors(&fixture("weights.safetensors")).unwrap();
    let reference = read_safetensors(&fixture("weights_after_1_step.safetensors")).unwrap();
    assert_eq!(ours.len(), reference.len(), "same tensor count");
    for (name, r) in &reference {
        let o = ours
            .get(name)
            .unwrap_or_else(|| panic!("{name} missing from the saved checkpoint"));
        assert_eq!(o.dims(), r.dims(), "{name}");
        assert_eq!(o.dtype(), r.dtype(), "{name}");
        if name.ends_with("num_batches_tracked") {
            assert_eq!(o.to_scalar::<i64>().unwrap(), 1, "{name}");
            continue;
        }
        let change = norm(&(r - &before[name]).unwrap());
        let err = norm(&(o - r).unwrap());
        assert!(
            err <= 1e-2 * change.max(1e-12),
            "{name}: ||ours - ref|| = {err:.3e} vs ||ref - before|| = {change:.3e}"
        );
    }
}

/// The percentile `p` (0..=100) of `errors`, by nearest rank.
fn percentile(errors: &[f64], p: f64) -> f64 {
    let mut e = errors.to_vec();
    e.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * e.len() as f64).ceil().max(1.0) as usize;
    e[rank - 1]
}

/// Issue #11's yardstick: the per-tensor error of the one-step update against exact
/// (float64) arithmetic, `||update - update_f64|| / ||update_f64||` over the 62 parameter
/// tensors, held to at most twice PyTorch float32's own figures (README of the fixture):
/// median 3.1e-6, 90th percentile 6.6e-5, worst 1.6e-4.
#[test]
#[ignore = "issue #11 (open): one ReLU input 1.2e-6 from zero (layer2.1 output) rounds to the other side in wick's f32 forward; needs the external fixture"]
fn one_step_update_is_within_twice_pytorch_float32_of_exact_arithmetic() {
    let (s, _) = stepped();
    let before = read_safetensors(&fixture("weights.safetensors")).unwrap();
    let exact = read_safetensors(&fixture("update_f64.safetensors")).unwrap();
    let after = s.state_dict().unwrap();
    let f64_of = |t: &Tensor| t.to_dtype(DType::F64).unwrap();
    let mut errors: Vec<(f64, String)> = exact
        .iter()
        .map(|(key, u64)| {
            let name = key.strip_prefix("update.").unwrap();
            let ours = (f64_of(&after[name]) - f64_of(&before[name])).unwrap();
            let exact = f64_of(u64);
            (
                norm(&(ours - &exact).unwrap()) / norm(&exact),
                name.to_string(),
            )
        })
        .collect();
    assert_eq!(errors.len(), 62, "every parameter tensor");
    errors.sort_by(|a, b| a.0.total_cmp(&b.0));
    let values: Vec<f64> = errors.iter().map(|e| e.0).collect();
    let (median, p90, worst) = (
        percentile(&values, 50.0),
        percentile(&values, 90.0),
        values[values.len() - 1],
    );
    println!(
        "update error vs float64: median {median:.2e}, p90 {p90:.2e}, worst {worst:.2e} ({}); worst five {:?}",
        errors[errors.len() - 1].1,
        &errors[errors.len() - 5..]
    );
    assert!(median <= 2.0 * 3.1e-6, "median {median:.2e} > 2 x 3.1e-6");
    assert!(
        p90 <= 2.0 * 6.6e-5,
        "90th percentile {p90:.2e} > 2 x 6.6e-5"
    );
    assert!(worst <= 2.0 * 1.6e-4, "worst {worst:.2e} > 2 x 1.6e-4");
}
