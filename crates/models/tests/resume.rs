//! Issue #16: a training run saved at step k and resumed in a new session gives the same
//! losses and the same final weights, bit for bit on the CPU, as the uninterrupted run.

mod common;

use candle_core::{Device, Tensor};
use common::assert_mentions;
use wick_models::data::{BatchSource, SyntheticImages};
use wick_models::resume::{self, TrainingState};
use wick_models::{Depth, ResNetConfig, Session, StateDict, WeightInit};
use wick_ops::SgdParams;

fn session() -> Session {
    let config = ResNetConfig::new(Depth::R18, Stem::Cifar, 10).unwrap();
    let sgd = SgdParams {
        lr: 0.05,
        momentum: 0.9,
        weight_decay: 5e-4,
        ..Default::default()
    };
    Session::training(config, 2, 8, sgd.into(), &Device::Cpu).unwrap()
}

use wick_models::Stem;

fn data() -> SyntheticImages {
    SyntheticImages::new(10, 2, 8, 7).unwrap()
}

/// Runs steps `from..to` of the synthetic data stream on `s`; returns their losses' bits.
fn steps(s: &mut Session, from: u64, to: u64) -> Vec<u32> {
    let mut source = data();
    source.seek(from).unwrap();
    (from..to)
        .map(|_| {
            let (x, y) = source.next_batch().unwrap();
            s.step(&x, &y).unwrap().to_bits()
        })
        .collect()
}

fn bits(t: &Tensor) -> Vec<u32> {
    wick_ops::compare::f32_bits(t).unwrap()
}

/// The same named tensors, in the same order, bit for bit.
fn same_entries(a: &[(String, Tensor)], b: &[(String, Tensor)], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: entries");
    for ((n1, a), (n2, b)) in a.iter().zip(b) {
        assert_eq!(n1, n2);
        assert_eq!(bits(a), bits(b), "{what} {n1}");
    }
}

fn same(a: &StateDict, b: &StateDict) {
    assert_eq!(a.len(), b.len());
    for (name, t) in a {
        if name.ends_with("num_batches_tracked") {
            assert_eq!(
                t.to_scalar::<i64>().unwrap(),
                b[name].to_scalar::<i64>().unwrap(),
                "{name}"
            );
        } else {
            assert_eq!(bits(t), bits(&b[name]), "{name} differs");
        }
    }
}

/// Asserts that two sessions hold the same weights and optimizer state (SGD's momentum
/// buffers, Adam's moments), bit for bit.
fn same_training(a: &Session, b: &Session) {
    same(&a.state_dict().unwrap(), &b.state_dict().unwrap());
    let state = |s: &Session| s.optimizer_state().unwrap();
    let (sa, sb) = (state(a), state(b));
    assert!(!sa.is_empty(), "the optimizer has state after a step");
    same_entries(&sa, &sb, "optimizer state");
}

#[test]
fn a_run_resumed_from_a_checkpoint_matches_the_uninterrupted_run_bit_for_bit() {
    let (k, total) = (3, 7);
    let mut whole = session();
    whole.init_weights(WeightInit::Formula).unwrap();
    let losses = steps(&mut whole, 0, total);

    let dir = common::scratch("wick-resume-");
    let mut first = session();
    first.init_weights(WeightInit::Formula).unwrap();
    let mut resumed_losses = steps(&mut first, 0, k);
    let mut fields = std::collections::BTreeMap::new();
    fields.insert("seed".to_string(), "7".to_string());
    let state = TrainingState {
        step: k,
        epoch: 0,
        fields,
    };
    let ckpt = resume::save(&first, &state, dir.path(), &format!("step-{k}")).unwrap();
    drop(first);

    // A new session, as a new process would build it.
    let mut second = session();
    let loaded = resume::load(&mut second, &ckpt).unwrap();
    assert_eq!(loaded, state);
    assert_eq!(second.steps(), k);
    resumed_losses.extend(steps(&mut second, loaded.step, total));
    assert_eq!(resumed_losses, losses, "the same losses, bit for bit");
    same_training(&whole, &second);
    let buffers = |s: &Session| s.momentum_buffers().unwrap();
    same_entries(&buffers(&whole), &buffers(&second), "momentum buffer");
}

#[test]
fn periodic_checkpoints_are_kept_to_the_newest_and_partial_folders_removed() {
    let dir = common::scratch("wick-keep-");
    let mut s = session();
    s.init_weights(WeightInit::Formula).unwrap();
    for step in [2u64, 4, 6, 8] {
        let state = TrainingState {
            step,
            ..Default::default()
        };
        resume::save(&s, &state, dir.path(), &format!("step-{step}")).unwrap();
    }
    std::fs::create_dir(dir.path().join(".step-10.partial")).unwrap();
    resume::prune(dir.path(), 2).unwrap();
    let kept: Vec<u64> = resume::periodic(dir.path())
        .unwrap()
        .iter()
        .map(|c| c.0)
        .collect();
    assert_eq!(kept, [6, 8]);
    assert!(!dir.path().join(".step-10.partial").exists());
    // A folder without its training state is not a checkpoint.
    std::fs::create_dir(dir.path().join("step-99")).unwrap();
    assert_eq!(resume::periodic(dir.path()).unwrap().last().unwrap().0, 8);
}

/// EfficientNet-B0 (dropout and stochastic depth on) at 16x16 trained by `optimizer`.
fn zoo_session(optimizer: wick_graph::nodes::optim::OptimizerConfig) -> Session {
    let config = wick_models::ModelConfig::by_name("efficientnet_b0", Stem::ImageNet, Some(10))
        .and_then(|c| c.with_dropout(0.3))
        .and_then(|c| c.with_stochastic_depth(0.5))
        .unwrap();
    Session::training(config, 2, 16, optimizer.into(), &Device::Cpu).unwrap()
}

#[test]
fn adam_adamw_and_dropout_resume_bit_for_bit() {
    use wick_graph::nodes::optim::{Optimizer, OptimizerConfig, ParamSelector};
    use wick_ops::AdamParams;
    let configs = [
        OptimizerConfig::from(Optimizer::Adam(AdamParams::adam(1e-3))).clip_grad_norm(1.0),
        OptimizerConfig::from(Optimizer::Adam(AdamParams::adamw(1e-3)))
            .no_weight_decay_on(ParamSelector::OneDimensional),
    ];
    for config in configs {
        let (k, total) = (2, 4);
        let run = |s: &mut Session, from, to| {
            let mut source = SyntheticImages::new(10, 2, 16, 7).unwrap();
            source.seek(from).unwrap();
            (from..to)
                .map(|_| {
                    let (x, y) = source.next_batch().unwrap();
                    s.step(&x, &y).unwrap().to_bits()
                })
                .collect::<Vec<u32>>()
        };
        let mut whole = zoo_session(config.clone());
        whole.init_weights(WeightInit::Torchvision(3)).unwrap();
        let losses = run(&mut whole, 0, total);

        let dir = common::scratch("wick-resume-adam-");
        let mut first = zoo_session(config.clone());
        first.init_weights(WeightInit::Torchvision(3)).unwrap();
        let mut resumed = run(&mut first, 0, k);
        let state = TrainingState {
            step: k,
            ..Default::default()
        };
        let ckpt = resume::save(&first, &state, dir.path(), "step-2").unwrap();
        let moments = first.optimizer_state().unwrap();
        assert!(
            moments.iter().any(|(n, _)| n.ends_with(".exp_avg_sq")),
            "Adam's state is saved"
        );
        drop(first);
        let mut second = zoo_session(config.clone());
        resume::load(&mut second, &ckpt).unwrap();
        resumed.extend(run(&mut second, k, total));
        assert_eq!(resumed, losses, "{config:?}: the same losses, bit for bit");
        same_training(&whole, &second);
    }
}

#[test]
fn a_checkpoint_of_another_optimizer_is_refused_naming_the_entry() {
    use wick_graph::nodes::optim::Optimizer;
    use wick_ops::AdamParams;
    let dir = common::scratch("wick-resume-mismatch-");
    let mut sgd = session();
    sgd.init_weights(WeightInit::Formula).unwrap();
    steps(&mut sgd, 0, 1);
    let ckpt = resume::save(&sgd, &TrainingState::default(), dir.path(), "step-1").unwrap();
    let config = ResNetConfig::new(Depth::R18, Stem::Cifar, 10).unwrap();
    let adam = Optimizer::Adam(AdamParams::adam(1e-3));
    let mut other = Session::training(config, 2, 8, adam.into(), &Device::Cpu).unwrap();
    let err = resume::load(&mut other, &ckpt).unwrap_err().to_string();
    assert_mentions(&err, &["momentum_buffer", "another optimizer"]);
}

#[test]
fn a_damaged_step_counter_is_named_as_damaged_not_missing() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = session();
    s.init_weights(wick_models::WeightInit::Torchvision(0))
        .unwrap();
    let ckpt = resume::save(&s, &TrainingState::default(), dir.path(), "step-1").unwrap();
    let path = ckpt.join("training.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = String::from_utf8(bytes[8..8 + n].to_vec()).unwrap();
    // The same length, so the tensors' offsets stay right.
    let damaged = header.replace("\"step\":\"0\"", "\"step\":\"x\"");
    assert_ne!(damaged, header, "{header}");
    let mut out = bytes[..8].to_vec();
    out.extend_from_slice(damaged.as_bytes());
    out.extend_from_slice(&bytes[8 + n..]);
    std::fs::write(&path, out).unwrap();
    let e = resume::read_state(&ckpt).unwrap_err().to_string();
    assert!(
        e.contains("`step` counter is \"x\", not a count of steps"),
        "{e}"
    );
}
