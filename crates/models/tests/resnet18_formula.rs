//! ResNet-18 (CIFAR stem) against PyTorch on the in-repository formula fixture
//! (`fixtures/resnet18-formula`): weights and batch from the formula, PyTorch's outputs in
//! float32 and float64.
//!
//! Every figure is compared with the float64 result (exact to the digits that matter), and
//! wick's error is bounded by a multiple of PyTorch float32's own error on the same figure,
//! read from the same file: the bound is PyTorch's float32 rounding, not a number tuned to
//! pass. The multiples are stated where they are used.

mod common;

use common::{config, norm, training_session};
use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use wick_models::checkpoint::{read_safetensors, StateDict};
use wick_models::init::formula;
use wick_models::{Session, WeightInit};
use wick_ops::compare::{ErrorSpreads, Spread};
use wick_ops::max_rel_diff;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/resnet18-formula")
        .join(name)
}

fn expected() -> StateDict {
    read_safetensors(&fixture("expected.safetensors")).unwrap()
}

fn batch() -> (Tensor, Tensor) {
    formula::batch(8, 32, 10).unwrap()
}

fn scalar(t: &Tensor) -> f64 {
    t.to_dtype(DType::F64).unwrap().to_scalar::<f64>().unwrap()
}

/// |a - b| / |b|.
fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs()
}

/// Asserts that wick's spread of errors is within `k` times PyTorch float32's, median and
/// worst alike, printing both; `errors` holds a (wick, PyTorch float32) pair per tensor.
fn assert_within(what: &str, errors: &[(f64, f64)], k: f64) {
    let spreads = ErrorSpreads::new(errors);
    println!("{what}: {spreads}");
    assert!(
        spreads.within(k, Spread::ZERO),
        "{what}: wick is not within {k}x PyTorch float32: {spreads}"
    );
}

#[test]
fn formula_reproduces_the_readme_check_values_and_the_stored_batch() {
    let w = formula::values(
        "conv1.weight",
        &[64, 3, 3, 3],
        wick_models::resnet::TensorRole::ConvWeight,
    );
    for (got, want) in w.iter().zip([
        0.030049985944763158,
        -0.28345681935340417,
        0.3066792576481291,
    ]) {
        assert!((got - want).abs() <= 1e-17, "{got} vs {want}");
    }
    let (images, labels) = batch();
    // The README prints the f32 values widened to f64: compare them as f64, exactly.
    let first: Vec<f64> = images
        .flatten_all()
        .unwrap()
        .narrow(0, 0, 3)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
        .to_vec1()
        .unwrap();
    assert_eq!(
        first,
        [-1.2621018886566162, 1.6382187604904175, 1.866605520248413]
    );
    assert_eq!(labels.to_vec1::<i64>().unwrap(), [0, 7, 2, 3, 7, 9, 5, 7]);
    let stored = read_safetensors(&fixture("batch.safetensors")).unwrap();
    assert_eq!(
        wick_ops::max_abs_diff(&images, &stored["images"]).unwrap(),
        0.0
    );
    assert_eq!(
        labels.to_vec1::<i64>().unwrap(),
        stored["labels"].to_vec1::<i64>().unwrap()
    );
}

#[test]
fn evaluation_logits_match_float64_as_closely_as_pytorch_float32() {
    let exp = expected();
    let mut s = Session::inference(config(), 8, 32, &Device::Cpu).unwrap();
    s.init_weights(WeightInit::Formula).unwrap();
    let logits = s.forward(&batch().0).unwrap();
    let wick = max_rel_diff(&logits, &exp["logits_eval_f64"]).unwrap();
    let torch = max_rel_diff(&exp["logits_eval_f32"], &exp["logits_eval_f64"]).unwrap();
    println!("eval logits: wick {wick:.2e}, PyTorch f32 {torch:.2e}");
    // Twice PyTorch's own float32 error (7e-7 of the largest logit): the same yardstick as
    // issue #11's one-step figures.
    assert!(
        wick <= 2.0 * torch,
        "eval logits: wick {wick:.2e} vs PyTorch f32 {torch:.2e}"
    );
}

/// A training session with the formula weights, keeping the gradients.
fn training() -> Session {
    let mut s = training_session(&Device::Cpu);
    s.init_weights(WeightInit::Formula).unwrap();
    s
}

#[test]
fn first_step_logits_loss_and_gradients_match_float64_as_closely_as_pytorch_float32() {
    let exp = expected();
    let mut s = training();
    let (images, labels) = batch();
    let loss = s.step(&images, &labels).unwrap() as f64;
    // A float32 scalar: PyTorch's is half an ulp off; allow two ulps.
    let loss64 = scalar(&exp["loss_train_f64"]);
    assert!(
        rel(loss, loss64) <= 2.0 * f64::from(f32::EPSILON),
        "loss {loss} vs float64 {loss64}"
    );
    let wick = max_rel_diff(s.logits().unwrap(), &exp["logits_train_f64"]).unwrap();
    let torch = max_rel_diff(&exp["logits_train_f32"], &exp["logits_train_f64"]).unwrap();
    println!("train logits: wick {wick:.2e}, PyTorch f32 {torch:.2e}");
    assert!(
        wick <= 2.0 * torch,
        "train logits: wick {wick:.2e} vs PyTorch f32 {torch:.2e}"
    );

    // Per gradient, (wick's, PyTorch float32's) relative error against float64.
    let (mut norms, mut full) = (vec![], vec![]);
    for (key, t64) in &exp {
        if let Some(name) = key.strip_prefix("grad_norm_f64.") {
            let g = s
                .gradient(name)
                .unwrap_or_else(|| panic!("no gradient for {name}"));
            let torch = scalar(&exp[&format!("grad_norm_f32.{name}")]);
            norms.push((rel(norm(g), scalar(t64)), rel(torch, scalar(t64))));
        } else if let Some(name) = key.strip_prefix("grad_f64.") {
            let g = s.gradient(name).unwrap();
            let torch = max_rel_diff(&exp[&format!("grad_f32.{name}")], t64).unwrap();
            full.push((max_rel_diff(g, t64).unwrap(), torch));
        }
    }
    assert_eq!(norms.len(), 62, "every parameter's gradient norm");
    assert_eq!(full.len(), 44, "every small gradient");
    // One step of rounding: twice PyTorch's float32 spread, median and worst.
    assert_within("gradient norms", &norms, 2.0);
    assert_within("small gradients", &full, 2.0);
}

/// `after - before` for every floating-point entry.
fn updates(before: &StateDict, after: &StateDict) -> HashMap<String, Tensor> {
    before
        .iter()
        .filter(|(_, t)| t.dtype() == DType::F32)
        .map(|(k, b)| {
            (
                k.clone(),
                (&after[k].to_dtype(DType::F64).unwrap() - b.to_dtype(DType::F64).unwrap())
                    .unwrap(),
            )
        })
        .collect()
}

#[test]
fn updates_after_one_and_three_steps_and_the_losses_match_float64_as_closely_as_pytorch_float32() {
    let exp = expected();
    let mut s = training();
    let (images, labels) = batch();
    let w0 = s.state_dict().unwrap();
    let mut losses = vec![];
    for step in 1..=3 {
        losses.push(s.step(&images, &labels).unwrap() as f64);
        if step != 1 && step != 3 {
            continue;
        }
        let after = s.state_dict().unwrap();
        for (k, t) in &after {
            if k.ends_with("num_batches_tracked") {
                assert_eq!(t.to_scalar::<i64>().unwrap(), step, "{k}");
            }
        }
        let upd = updates(&w0, &after);
        let (mut norms, mut full) = (vec![], vec![]);
        for (key, t64) in &exp {
            if let Some(name) = key.strip_prefix(&format!("update{step}_norm_f64.")) {
                let torch = scalar(&exp[&format!("update{step}_norm_f32.{name}")]);
                norms.push((rel(norm(&upd[name]), scalar(t64)), rel(torch, scalar(t64))));
            } else if let Some(name) = key.strip_prefix(&format!("update{step}_f64.")) {
                let torch = max_rel_diff(&exp[&format!("update{step}_f32.{name}")], t64).unwrap();
                full.push((max_rel_diff(&upd[name], t64).unwrap(), torch));
            }
        }
        assert_eq!(norms.len(), 102, "every floating-point state-dict entry");
        assert_eq!(full.len(), 84);
        // After one step, twice PyTorch's spread. After three, each step's rounding is
        // amplified by the next (the loss falls 9x in the third step), and two float32
        // runs that round differently drift apart: four times.
        let k = if step == 1 { 2.0 } else { 4.0 };
        assert_within(&format!("update norms after {step}"), &norms, k);
        assert_within(&format!("small updates after {step}"), &full, k);
    }
    let l64 = exp["losses_f64"]
        .to_dtype(DType::F64)
        .unwrap()
        .to_vec1::<f64>()
        .unwrap();
    let l32 = exp["losses_f32"]
        .to_dtype(DType::F64)
        .unwrap()
        .to_vec1::<f64>()
        .unwrap();
    for i in 0..3 {
        let (wick, torch) = (rel(losses[i], l64[i]), rel(l32[i], l64[i]));
        println!(
            "loss {}: wick {:.6} ({wick:.2e}), PyTorch f32 {:.6} ({torch:.2e}), float64 {:.6}",
            i + 1,
            losses[i],
            l32[i],
            l64[i]
        );
        // The first two losses: twice PyTorch's error, or two ulps where PyTorch is exact
        // to half an ulp. The third follows the 9x drop above: a scalar at the end of an
        // amplifying trajectory, where two float32 runs land 1e-2 apart at most (PyTorch's
        // own 2-thread vs 1-thread runs differ by less only because they round alike).
        let bound = match i {
            0 | 1 => (2.0 * torch).max(2.0 * f64::from(f32::EPSILON)),
            _ => 1e-2,
        };
        assert!(
            wick <= bound,
            "loss {}: wick {wick:.2e} > {bound:.2e}",
            i + 1
        );
    }
}
