//! ResNet-18 (CIFAR stem) against PyTorch: evaluation logits, training logits and loss,
//! gradients, and the whole checkpoint after one SGD step, through `Session`, the code
//! path the examples use.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use wick_models::checkpoint::read_safetensors;
use wick_models::{Depth, ResNetConfig, Session, Stem, TrainOptions};
use wick_ops::SgdParams;

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

fn config() -> ResNetConfig {
    ResNetConfig::new(Depth::R18, Stem::Cifar, 10).unwrap()
}

fn max_rel(a: &Tensor, b: &Tensor) -> f64 {
    wick_ops::max_rel_diff(a, b).unwrap()
}

fn norm(t: &Tensor) -> f64 {
    t.to_dtype(DType::F64)
        .unwrap()
        .sqr()
        .unwrap()
        .sum_all()
        .unwrap()
        .sqrt()
        .unwrap()
        .to_scalar::<f64>()
        .unwrap()
}

fn batch() -> (Tensor, Tensor) {
    let b = read_safetensors(&fixture("batch.safetensors")).unwrap();
    (b["images"].clone(), b["labels"].clone())
}

fn expected() -> HashMap<String, Tensor> {
    read_safetensors(&fixture("expected.safetensors")).unwrap()
}

#[test]
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
    let sgd = SgdParams {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 5e-4,
        ..Default::default()
    };
    let opts = TrainOptions {
        sgd,
        keep_gradients: true,
    };
    let mut s = Session::training(config(), 8, 32, opts, &device()).unwrap();
    s.load_checkpoint(&fixture("weights.safetensors")).unwrap();
    let loss = s.step(&images, &labels).unwrap();
    (s, loss)
}

#[test]
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
fn updated_checkpoint_after_one_sgd_step_matches_pytorch() {
    let (s, _) = stepped();
    // The whole checkpoint after the step, saved and read back as a user would.
    let dir = std::env::temp_dir().join(format!("wick-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("after.safetensors");
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
    std::fs::remove_dir_all(&dir).unwrap();
}
