//! Checkpoint errors: a wrong shape, a missing tensor, an unknown tensor, a truncated
//! file; f16/bf16 conversion; save and load round trip.

mod common;

use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use common::assert_mentions;
use wick_models::checkpoint::{read_safetensors, write_safetensors};
use wick_models::init::torchvision_init;
use wick_models::{Depth, ModelError, ResNetConfig, Session, Stem};

/// A fresh directory, removed when the returned guard drops (even when the test fails),
/// and the checkpoint path inside it.
fn tmp() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("wick-ckpt-")
        .tempdir()
        .unwrap();
    let path = dir.path().join("model.safetensors");
    (dir, path)
}

fn cfg() -> ResNetConfig {
    ResNetConfig::new(Depth::R18, Stem::Cifar, 10).unwrap()
}

fn session() -> Session {
    Session::inference(cfg(), 1, 16, &Device::Cpu).unwrap()
}

#[test]
fn wrong_shape_is_an_error_naming_the_tensor_and_both_shapes() {
    let (_dir, path) = tmp();
    let mut w = torchvision_init(cfg(), 0).unwrap();
    w.insert(
        "layer2.0.conv1.weight".into(),
        Tensor::zeros((128, 64, 5, 5), DType::F32, &Device::Cpu).unwrap(),
    );
    write_safetensors(&w, &path).unwrap();
    let err = session().load_checkpoint(&path).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ModelError::ShapeMismatch { .. }), "{msg}");
    assert_mentions(
        &msg,
        &[
            "layer2.0.conv1.weight",
            "[128, 64, 5, 5]",
            "[128, 64, 3, 3]",
        ],
    );
    assert!(msg.contains(&path.display().to_string()), "{msg}");
}

#[test]
fn missing_and_extra_tensors_are_errors_naming_them() {
    let (_dir, path) = tmp();
    let mut w = torchvision_init(cfg(), 0).unwrap();
    w.remove("layer3.1.bn2.running_var");
    write_safetensors(&w, &path).unwrap();
    let msg = session().load_checkpoint(&path).unwrap_err().to_string();
    assert_mentions(&msg, &["missing", "layer3.1.bn2.running_var"]);

    let mut w = torchvision_init(cfg(), 0).unwrap();
    w.insert(
        "head.weight".into(),
        Tensor::zeros(3, DType::F32, &Device::Cpu).unwrap(),
    );
    write_safetensors(&w, &path).unwrap();
    let msg = session().load_checkpoint(&path).unwrap_err().to_string();
    assert_mentions(&msg, &["unexpected", "head.weight"]);
}

#[test]
fn truncated_file_is_an_error_naming_the_file() {
    let (_dir, path) = tmp();
    write_safetensors(&torchvision_init(cfg(), 0).unwrap(), &path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let msg = session().load_checkpoint(&path).unwrap_err().to_string();
    assert!(
        msg.contains(&path.display().to_string()) && msg.contains("not a valid safetensors file"),
        "{msg}"
    );
    let msg = session()
        .load_checkpoint(&path.with_file_name("absent.safetensors"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("absent.safetensors"), "{msg}");
}

#[test]
fn half_precision_checkpoints_are_converted_and_round_trips_are_exact() {
    let (_dir, path) = tmp();
    let w = torchvision_init(cfg(), 3).unwrap();
    let half: std::collections::HashMap<_, _> = w
        .iter()
        .enumerate()
        .map(|(i, (k, v))| {
            (
                k.clone(),
                v.to_dtype(if i % 2 == 0 { DType::F16 } else { DType::BF16 })
                    .unwrap(),
            )
        })
        .collect();
    write_safetensors(&half, &path).unwrap();
    let mut s = session();
    s.load_checkpoint(&path).unwrap();
    let sd = s.state_dict().unwrap();
    for (k, v) in &half {
        assert_eq!(sd[k].dtype(), DType::F32);
        let diff = wick_ops::max_abs_diff(&sd[k], v).unwrap();
        assert_eq!(diff, 0.0, "{k}");
    }
    // Save and load again: identical, and no temporary file is left behind.
    let path2 = path.with_file_name("again.safetensors");
    s.save_checkpoint(&path2).unwrap();
    let a = read_safetensors(&path2).unwrap();
    assert_eq!(a.len(), sd.len());
    assert!(a.keys().any(|k| k == "bn1.num_batches_tracked"));
    assert_eq!(a["bn1.num_batches_tracked"].dtype(), DType::I64);
    let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
