//! Issue #16: a training run saved at step k and resumed in a new session gives the same
//! losses and the same final weights, bit for bit on the CPU, as the uninterrupted run.

mod common;

use candle_core::{Device, Tensor};
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
    t.flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
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
    same(&whole.state_dict().unwrap(), &second.state_dict().unwrap());
    let buffers = |s: &Session| s.momentum_buffers().unwrap();
    for ((n1, a), (n2, b)) in buffers(&whole).iter().zip(&buffers(&second)) {
        assert_eq!(n1, n2);
        assert_eq!(bits(a), bits(b), "momentum buffer of {n1}");
    }
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
