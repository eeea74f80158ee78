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
    match name.as_str() {
        "cpu" => Device::Cpu,
        "cuda" => Device::new_cuda(0).unwrap_or_else(|e| panic!("WICK_TEST_DEVICE=cuda: {e}")),
        other => panic!("WICK_TEST_DEVICE={other}: expected cpu or cuda"),
    }
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
    // The kernels' scratch came from one workspace the memory plan sized (on CUDA; none
    // on the CPU): no kernel call allocated its own.
    let exec = s.executor();
    let kind = wick_ops::DeviceKind::of(&device());
    let planned = exec.graph().memory_plan_on(kind).split.kernel_workspace;
    let ws = exec.workspace();
    assert_eq!((ws.bytes(), ws.misses()), (planned, 0), "on {kind:?}");
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
    let dir = common::scratch("wick-test-");
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

/// The percentile `p` (0..=100) of sorted `errors`, by nearest rank.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank - 1]
}

/// Issue #11's measure of a one-step update against exact arithmetic: per parameter
/// tensor, `||(after - before) - update_f64|| / ||update_f64||`, sorted ascending.
fn update_errors(
    after: &HashMap<String, Tensor>,
    before: &HashMap<String, Tensor>,
    exact: &HashMap<String, Tensor>,
) -> Vec<(f64, String)> {
    let f64_of = |t: &Tensor| t.to_dtype(DType::F64).unwrap();
    let mut errors: Vec<(f64, String)> = exact
        .iter()
        .map(|(key, update)| {
            let name = key.strip_prefix("update.").unwrap();
            let ours = (f64_of(&after[name]) - f64_of(&before[name])).unwrap();
            let exact = f64_of(update);
            (
                norm(&(ours - &exact).unwrap()) / norm(&exact),
                name.to_string(),
            )
        })
        .collect();
    assert_eq!(errors.len(), 62, "every parameter tensor");
    errors.sort_by(|a, b| a.0.total_cmp(&b.0));
    errors
}

/// Median, 90th percentile and worst of sorted per-tensor errors, and the worst's name.
fn figures(errors: &[(f64, String)]) -> ([f64; 3], &str) {
    let values: Vec<f64> = errors.iter().map(|e| e.0).collect();
    let worst = &errors[errors.len() - 1];
    let f = [
        percentile(&values, 50.0),
        percentile(&values, 90.0),
        worst.0,
    ];
    (f, &worst.1)
}

/// Issue #11's yardstick: wick's float32 training step, against exact (float64) arithmetic,
/// within twice PyTorch's own float32 step (the fixture's `weights_after_1_step`) on the
/// median, the 90th percentile and the worst per-tensor error.
///
/// PyTorch's figures are computed here from the fixture's files. The issue quoted them as
/// median 3.1e-6, 90th percentile 6.6e-5, worst 1.6e-4; the stored step gives 2.5e-3,
/// 2.9e-3 and 4.1e-3 by the same formula over the same 62 tensors. Both steps' errors are
/// dominated by ReLU inputs within rounding error of zero that land on the other side of
/// it in float32 (wick's at layer2.1's output; PyTorch's at layer3.0's output, whose batch
/// norm and shortcut biases are its worst tensors): the float32 gradient then flows where
/// the exact one does not, into every tensor upstream. The kernels themselves are held to
/// rounding-error bounds by wick-ops' precision tests.
#[test]
#[ignore = "needs the external fixture ../shared/fixtures/resnet18-cifar10 (45 MB): run with --ignored"]
fn one_step_update_is_within_twice_pytorch_float32_of_exact_arithmetic() {
    let before = read_safetensors(&fixture("weights.safetensors")).unwrap();
    let exact = read_safetensors(&fixture("update_f64.safetensors")).unwrap();
    let torch_after = read_safetensors(&fixture("weights_after_1_step.safetensors")).unwrap();
    let torch_errors = update_errors(&torch_after, &before, &exact);
    let (torch, torch_worst) = figures(&torch_errors);
    let (s, _) = stepped();
    let wick_errors = update_errors(&s.state_dict().unwrap(), &before, &exact);
    let (wick, wick_worst) = figures(&wick_errors);
    println!("update error vs float64 | PyTorch f32 | wick f32 | ratio");
    for (i, what) in ["median", "90th percentile", "worst"].iter().enumerate() {
        let ratio = wick[i] / torch[i];
        println!("{what} | {:.2e} | {:.2e} | {ratio:.2}", torch[i], wick[i]);
    }
    println!("worst tensor: PyTorch {torch_worst}, wick {wick_worst}");
    for (i, what) in ["median", "90th percentile", "worst"].iter().enumerate() {
        assert!(
            wick[i] <= 2.0 * torch[i],
            "{what}: wick {:.2e} > 2 x PyTorch {:.2e}",
            wick[i],
            torch[i]
        );
    }
}
