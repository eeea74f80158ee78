//! Every zoo model against PyTorch (`fixtures/zoo`, made by `scripts/make_zoo_fixtures.py`):
//! torchvision's model with 10 classes, the fixture formula's weights and a batch of 4
//! images of 50x37 (width x height); eval logits through the default inference passes, and
//! one SGD step's loss and the change of every state entry.
//!
//! Each figure is compared with PyTorch's float64 result, and wick's error is bounded by a
//! small multiple of PyTorch float32's own error on the same figure (both in the fixture).

use std::path::PathBuf;

use candle_core::{Device, Tensor};
use wick_models::checkpoint::{read_safetensors, StateDict};
use wick_models::init::formula;
use wick_models::{ImageSize, ModelConfig, Session, Stem, WeightInit};
use wick_ops::compare::{ErrorSpreads, Spread};
use wick_ops::SgdParams;

/// wick may be this many times further from float64 than PyTorch float32 is.
const K: f64 = 4.0;

fn f64s(t: &Tensor) -> Vec<f64> {
    wick_ops::compare::host_values(t).unwrap()
}

/// max |a - b| / max |b|.
fn rel(a: &[f64], b: &[f64]) -> f64 {
    wick_ops::compare::max_rel_diff_values(a, b)
}

fn norm(t: &Tensor) -> f64 {
    f64s(t).iter().map(|v| v * v).sum::<f64>().sqrt()
}

/// Checks the model registered as `name` against its fixture; prints the closeness
/// figures.
fn check(name: &str) {
    check_at(
        name,
        ImageSize {
            width: 50,
            height: 37,
        },
    )
}

/// [`check`] on images of `size` (the fixture's).
fn check_at(name: &str, size: ImageSize) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../../fixtures/zoo/{name}.safetensors"));
    let expected: StateDict =
        read_safetensors(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let config = ModelConfig {
        dropout: 0.0,
        stochastic_depth: 0.0,
        ..ModelConfig::by_name(name, Stem::ImageNet, Some(10)).unwrap()
    };
    let (images, labels) = formula::batch(4, size, 10).unwrap();
    let sum: f64 = f64s(&images).iter().sum();
    assert!(
        (sum - f64s(&expected["images_sum"])[0]).abs() < 1e-6,
        "the same batch as PyTorch's"
    );
    let figure = |what: &str, wick: &[f64], head: &str, tail: &str| -> (f64, f64) {
        let f32_ = f64s(&expected[&format!("{head}_f32{tail}")]);
        let f64_ = f64s(&expected[&format!("{head}_f64{tail}")]);
        let (ours, torch) = (rel(wick, &f64_), rel(&f32_, &f64_));
        println!(
            "{}: {what}: wick {ours:.2e}, PyTorch float32 {torch:.2e} (vs float64)",
            name
        );
        (ours, torch)
    };

    let weights = WeightInit::Formula;
    let mut eval = Session::inference(config, 4, size, &Device::Cpu).unwrap();
    eval.init_weights(weights).unwrap();
    let logits = eval.forward(&images).unwrap();
    let (ours, torch) = figure("eval logits", &f64s(&logits), "logits_eval", "");
    assert!(
        ours <= K * torch.max(2e-7),
        "{}: eval logits {ours:.2e} vs PyTorch {torch:.2e}",
        name
    );

    let sgd = SgdParams {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 5e-4,
        ..Default::default()
    };
    let mut train = Session::training(config, 4, size, sgd.into(), &Device::Cpu).unwrap();
    train.init_weights(weights).unwrap();
    let before = train.state_dict().unwrap();
    let loss = train.step(&images, &labels).unwrap();
    let (ours, torch) = figure("loss", &[loss as f64], "loss_train", "");
    assert!(
        ours <= K * torch.max(1e-7),
        "{}: loss {ours:.2e} vs PyTorch {torch:.2e}",
        name
    );
    let after = train.state_dict().unwrap();
    let mut errors = Vec::new();
    for (name, b) in &before {
        if name.ends_with("num_batches_tracked") {
            continue;
        }
        let update = (&after[name] - b).unwrap();
        let key = |tag: &str| format!("update1_norm_{tag}.{name}");
        let (Some(t32), Some(t64)) = (expected.get(&key("f32")), expected.get(&key("f64"))) else {
            panic!("{}: `{name}` is not in PyTorch's state dict", name);
        };
        let (t32, t64) = (f64s(t32)[0], f64s(t64)[0]);
        errors.push(((norm(&update) - t64).abs() / t64, (t32 - t64).abs() / t64));
    }
    let entries = expected
        .keys()
        .filter(|k| k.starts_with("update1_norm_f64."))
        .count();
    assert_eq!(
        errors.len(),
        entries,
        "{}: every floating-point state entry",
        name
    );
    let spreads = ErrorSpreads::new(&errors);
    println!(
        "{name}: update norms of {} entries: {spreads}",
        errors.len()
    );
    let floor = Spread {
        median: 1e-7,
        worst: 1e-6,
    };
    assert!(spreads.within(K, floor), "{name}: update norms: {spreads}");
}

#[test]
fn mobilenet_v2_matches_pytorch() {
    check("mobilenet_v2");
}

#[test]
fn mobilenet_v3_small_matches_pytorch() {
    check("mobilenet_v3_small");
}

#[test]
fn mobilenet_v3_large_matches_pytorch() {
    check("mobilenet_v3_large");
}

#[test]
fn efficientnet_b0_matches_pytorch() {
    check("efficientnet_b0");
}

#[test]
fn densenet121_matches_pytorch() {
    check("densenet121");
}

#[test]
fn convnext_tiny_matches_pytorch() {
    check("convnext_tiny");
}

#[test]
fn vgg11_bn_matches_pytorch() {
    check("vgg11_bn");
}

#[test]
fn vgg16_bn_matches_pytorch() {
    check("vgg16_bn");
}

#[test]
fn vit_b_16_matches_pytorch() {
    // Built for 32x32 (torchvision's image_size=32): four patches and the class token.
    check_at("vit_b_16", ImageSize::square(32));
}
