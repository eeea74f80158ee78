//! Issue #15's reliability suite for models and checkpoints: poisoned checkpoints are
//! refused, a diverging run stops at its first non-finite step and saves nothing, saves are
//! atomic under SIGKILL, and the loader never panics on damaged files (property tests).
//! Each test prints how many cases it tried (`--nocapture`).

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use common::assert_mentions;
use proptest::prelude::*;
use wick_models::checkpoint::{read_safetensors, write_safetensors, StateDict};
use wick_models::init::formula;
use wick_models::{
    Depth, ModelError, ResNetConfig, Session, Stem, TrainOptions, ValueChecks, WeightInit,
};
use wick_ops::SgdParams;

fn cfg() -> ResNetConfig {
    ResNetConfig::new(Depth::R18, Stem::Cifar, 10).unwrap()
}

fn dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("wick-reliability-")
        .tempdir()
        .unwrap()
}

/// The formula weights of the small model.
fn weights() -> StateDict {
    formula::state_dict(cfg()).unwrap()
}

fn inference() -> Session {
    Session::inference(cfg(), 1, 8, &Device::Cpu).unwrap()
}

/// `t` with element `i` (flat) set to `v`.
fn with_value(t: &Tensor, i: usize, v: f32) -> Tensor {
    let mut values = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    values[i] = v;
    Tensor::from_vec(values, t.dims(), &Device::Cpu).unwrap()
}

/// Sets element `i` of the session's value `name` to `v`.
fn poison(s: &mut Session, name: &str, i: usize, v: f32) {
    let t = s.executor().get(name).unwrap().unwrap().clone();
    s.executor_mut().set(name, &with_value(&t, i, v)).unwrap();
}

#[test]
fn poisoned_checkpoints_are_refused_naming_the_tensor_unless_unchecked() {
    let d = dir();
    let path = d.path().join("poisoned.safetensors");
    let base = weights();
    let cases: Vec<(&str, usize, f32)> = vec![
        ("conv1.weight", 5, f32::NAN),
        ("layer2.0.conv2.weight", 0, f32::INFINITY),
        ("fc.bias", 9, f32::NEG_INFINITY),
        ("layer1.0.bn1.running_mean", 3, f32::NAN),
        ("layer3.1.bn2.running_var", 7, -0.5),
        ("bn1.weight", 63, f32::NAN),
    ];
    for (name, i, v) in &cases {
        let mut w = base.clone();
        w.insert(name.to_string(), with_value(&w[*name], *i, *v));
        write_safetensors(&w, &path).unwrap();
        let err = inference().load_checkpoint(&path).unwrap_err().to_string();
        assert!(
            err.contains(name) && err.contains(&format!("element {i}")),
            "{name}[{i}] = {v}: {err}"
        );
        inference()
            .load_checkpoint_with(&path, ValueChecks::Unchecked)
            .unwrap_or_else(|e| panic!("{name}: the opt-out still refuses: {e}"));
    }
    let mut w = base.clone();
    w.insert(
        "layer4.1.bn1.num_batches_tracked".into(),
        Tensor::new(-3i64, &Device::Cpu).unwrap(),
    );
    write_safetensors(&w, &path).unwrap();
    let err = inference().load_checkpoint(&path).unwrap_err().to_string();
    assert_mentions(&err, &["layer4.1.bn1.num_batches_tracked", "-3"]);
    println!(
        "poisoned checkpoints: {} cases, all refused",
        cases.len() + 1
    );
}

fn training(lr: f64, check_parameters: bool) -> Session {
    let sgd = SgdParams {
        lr,
        momentum: 0.9,
        ..Default::default()
    };
    let opts = TrainOptions {
        check_parameters,
        ..sgd.into()
    };
    let mut s = Session::training(cfg(), 2, 8, opts, &Device::Cpu).unwrap();
    s.init_weights(WeightInit::Formula).unwrap();
    s
}

fn batch() -> (Tensor, Tensor) {
    let (images, labels) = formula::batch(2, 8, 10).unwrap();
    ((images * 3.0).unwrap(), labels)
}

/// Runs steps until one fails; returns the error and the step it names.
fn diverge(s: &mut Session, images: &Tensor, labels: &Tensor) -> (ModelError, u64) {
    for _ in 0..300 {
        if let Err(e) = s.step(images, labels) {
            let ModelError::NonFinite { step, .. } = e else {
                panic!("expected a non-finite error, got {e}");
            };
            return (e, step);
        }
    }
    panic!("300 steps at a huge learning rate stayed finite");
}

#[test]
fn a_diverging_run_stops_at_its_first_non_finite_step_and_saves_nothing() {
    let d = dir();
    let (images, labels) = batch();
    // lr 1e30: the first update overflows the next forward pass, or a parameter.
    let mut s = training(1e30, true);
    let (e, step) = diverge(&mut s, &images, &labels);
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("training step {step}"))
            && (msg.contains("became") || msg.contains("the loss is")),
        "{msg}"
    );
    assert_eq!(s.steps(), step);
    // The old checkpoint survives: saving the diverged weights is refused.
    let path = d.path().join("good.safetensors");
    std::fs::write(&path, b"the old checkpoint").unwrap();
    let err = s.save_checkpoint(&path).unwrap_err().to_string();
    assert_mentions(&err, &["non-finite", "not written"]);
    assert_eq!(std::fs::read(&path).unwrap(), b"the old checkpoint");
    // Without the parameter check, only the loss catches it, no earlier.
    let mut unchecked = training(1e30, false);
    let (e, later) = diverge(&mut unchecked, &images, &labels);
    assert!(e.to_string().contains("the loss is"), "{e}");
    assert!(
        later >= step,
        "the loss sees it at step {later}, the checks at {step}"
    );
    println!("lr 1e30: stopped at step {step} ({msg}); by the loss alone at step {later}");
    // One NaN pixel: the loss of step 1 is NaN (ReLU passes NaN, as PyTorch's).
    let mut s = training(0.01, true);
    let poisoned = images
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .map(|mut v| {
            v[100] = f32::NAN;
            Tensor::from_vec(v, images.dims(), &Device::Cpu).unwrap()
        })
        .unwrap();
    let e = s.step(&poisoned, &labels).unwrap_err().to_string();
    assert_mentions(&e, &["training step 1", "the loss is NaN"]);
    // A non-finite value the loss never sees (training normalises by the batch's own
    // statistics): only the parameter check catches it.
    let mut s = training(0.01, true);
    poison(&mut s, "layer1.0.bn1.running_mean", 2, f32::INFINITY);
    let e = s.step(&images, &labels).unwrap_err().to_string();
    assert_mentions(
        &e,
        &[
            "training step 1",
            "`layer1.0.bn1.running_mean` became inf at element 2",
        ],
    );
    println!("diverging runs: 4 cases, all stopped at the first non-finite step");
}

#[test]
fn anomaly_detection_names_the_first_op_layer_and_element_that_went_non_finite() {
    let (images, labels) = batch();
    // A NaN pixel: the first conv's output.
    let mut s = training(0.01, true);
    s.executor_mut().set_anomaly_detection(true);
    let mut values = images.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    values[0] = f32::NAN;
    let poisoned = Tensor::from_vec(values, images.dims(), &Device::Cpu).unwrap();
    let e = s.step(&poisoned, &labels).unwrap_err().to_string();
    assert_mentions(
        &e,
        &[
            "anomaly: OP_ID0 (ConvForward, Forward, layer conv1)",
            "NaN at element 0",
        ],
    );
    // An infinite weight deep in the net: the op that reads it, not the loss, is named.
    let mut s = training(0.01, true);
    s.executor_mut().set_anomaly_detection(true);
    poison(&mut s, "layer3.0.conv2.weight", 4, f32::INFINITY);
    let e = s.step(&images, &labels).unwrap_err().to_string();
    assert_mentions(&e, &["layer layer3.0.conv2", "ConvForward"]);
    println!("anomaly detection: 2 cases, both named the first non-finite op");
}

#[test]
fn absurd_sizes_are_errors_before_any_allocation() {
    use wick_models::data::SyntheticImages;
    let huge = 1usize << 32;
    let e = SyntheticImages::new(10, 16, huge, 0)
        .unwrap_err()
        .to_string();
    assert_mentions(&e, &["synthetic batch", "GiB"]);
    let e = SyntheticImages::new(10, usize::MAX, huge, 0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("overflows"), "{e}");
    let cases = [(1usize << 16, 32usize), (2, 1 << 16), (1 << 40, 1 << 20)];
    for (batch, size) in cases {
        let made =
            std::panic::catch_unwind(|| Session::inference(cfg(), batch, size, &Device::Cpu));
        let e = made
            .unwrap_or_else(|_| panic!("batch {batch}, {size}x{size}: panicked"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("GiB") || e.contains("overflows") || e.contains("too large"),
            "batch {batch}, {size}x{size}: {e}"
        );
    }
    println!("absurd sizes: {} cases, all clear errors", cases.len() + 2);
}

#[test]
fn saving_refuses_devices_and_folders_and_writes_through_symlinks() {
    let d = dir();
    let s = {
        let mut s = inference();
        s.init_weights(WeightInit::Formula).unwrap();
        s
    };
    for bad in [Path::new("/dev/null"), d.path()] {
        let e = s.save_checkpoint(bad).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{}: {e}", bad.display());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let dev_null = Path::new("/dev/null").metadata().unwrap().file_type();
        assert!(dev_null.is_char_device(), "/dev/null is still a device");
    }
    let missing = d.path().join("no-such-folder/model.safetensors");
    let e = s.save_checkpoint(&missing).unwrap_err().to_string();
    assert!(e.contains("no-such-folder"), "{e}");
    #[cfg(unix)]
    {
        let real = d.path().join("real.safetensors");
        let link = d.path().join("link.safetensors");
        std::fs::write(&real, b"old").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        s.save_checkpoint(&link).unwrap();
        assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(
            read_safetensors(&real).unwrap().len(),
            s.state_dict().unwrap().len()
        );
    }
    println!("unsafe save targets: 4 cases, all refused or written through");
}

#[test]
fn a_fifo_or_folder_given_as_weights_is_an_error_not_a_hang() {
    let d = dir();
    let fifo = d.path().join("weights.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for path in [fifo.as_path(), d.path()] {
        let e = inference().load_checkpoint(path).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }
}

#[test]
fn a_checkpoint_of_another_model_lists_five_missing_names_and_a_count() {
    let d = dir();
    let path = d.path().join("other.safetensors");
    let mut w = HashMap::new();
    w.insert(
        "encoder.weight".to_string(),
        Tensor::zeros(3, DType::F32, &Device::Cpu).unwrap(),
    );
    write_safetensors(&w, &path).unwrap();
    let e = inference().load_checkpoint(&path).unwrap_err().to_string();
    assert!(
        e.contains("... and") && e.contains("more") && e.len() < 400,
        "{e}"
    );
}

// --- Kill test -------------------------------------------------------------------------

/// The child side of the kill test: saves versions 1, 2, 3, ... of a checkpoint in a loop
/// until killed. Runs only when the parent test starts this binary with the variable set.
#[test]
fn kill_test_child_saver() {
    let Some(target) = std::env::var_os("WICK_KILL_TEST_TARGET") else {
        return;
    };
    let target = PathBuf::from(target);
    for version in 1.. {
        write_safetensors(&versioned(version), &target).unwrap();
    }
}

/// Checkpoint version `v`: 8 MB of the value `v`, and the version in a 0-dim tensor.
fn versioned(v: u32) -> StateDict {
    let mut w = HashMap::new();
    let big = Tensor::full(v as f32, (2048, 1024), &Device::Cpu).unwrap();
    w.insert("big".to_string(), big);
    w.insert("version".to_string(), Tensor::new(v, &Device::Cpu).unwrap());
    w
}

/// The version a complete checkpoint holds, checking that every value agrees.
fn complete_version(path: &Path) -> u32 {
    let w = read_safetensors(path).unwrap_or_else(|e| panic!("not a complete checkpoint: {e}"));
    let v = w["version"].to_scalar::<u32>().unwrap();
    let big = w["big"].flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert!(
        big.iter().all(|x| *x == v as f32),
        "a torn checkpoint (version {v})"
    );
    v
}

fn partials(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".wick-partial"))
        .collect()
}

#[test]
fn sigkill_during_saves_leaves_the_old_or_the_new_file_and_no_temporary_file_outlives_the_next_save(
) {
    let d = dir();
    let target = d.path().join("model.safetensors");
    write_safetensors(&versioned(0), &target).unwrap();
    let me = std::env::current_exe().unwrap();
    let kills = 40;
    let mut saw_partial = 0;
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..kills {
        let mut child = std::process::Command::new(&me)
            .args(["--exact", "kill_test_child_saver", "--test-threads", "1"])
            .env("WICK_KILL_TEST_TARGET", &target)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(std::time::Duration::from_millis(20 + rng % 300));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        complete_version(&target);
        if !partials(d.path()).is_empty() {
            saw_partial += 1;
        }
        // The next save removes what the killed process left.
        let v = complete_version(&target);
        write_safetensors(&versioned(v), &target).unwrap();
        assert_eq!(
            partials(d.path()),
            Vec::<String>::new(),
            "a temporary file outlived the next save"
        );
    }
    println!(
        "kill test: {kills} SIGKILLs during saves, target always complete, {saw_partial} left a temporary file that the next save removed"
    );
}

// --- Property tests of the loader ------------------------------------------------------

fn small_checkpoint_bytes() -> Vec<u8> {
    let mut w = HashMap::new();
    w.insert(
        "a".to_string(),
        Tensor::arange(0f32, 12.0, &Device::Cpu)
            .unwrap()
            .reshape((3, 4))
            .unwrap(),
    );
    w.insert(
        "b".to_string(),
        Tensor::new(&[1i64, 2], &Device::Cpu).unwrap(),
    );
    safetensors::tensor::serialize(&w, None).unwrap()
}

/// Loads `bytes` as a checkpoint: an error or tensors, never a panic; a success must hold
/// tensors whose data matches their shape.
fn load(bytes: &[u8], d: &Path) -> Result<(), String> {
    let path = d.join("fuzz.safetensors");
    std::fs::write(&path, bytes).unwrap();
    let result = std::panic::catch_unwind(|| {
        read_safetensors(&path).map(|w| {
            for t in w.values() {
                let _ = t.flatten_all().unwrap();
            }
            w.len()
        })
    });
    match result {
        Ok(r) => r.map(|_| ()).map_err(|e| {
            let msg = e.to_string();
            assert!(
                msg.contains("fuzz.safetensors"),
                "the error names the file: {msg}"
            );
            msg
        }),
        Err(_) => panic!("the loader panicked"),
    }
}

/// Runs `cases` cases of `strategy` through `check`, which loads a damaged file and
/// returns whether it loaded; returns (errors, loaded). A failing case is shrunk and
/// reported by proptest.
fn count<S: Strategy>(
    name: &str,
    strategy: S,
    check: impl Fn(S::Value) -> Result<bool, TestCaseError>,
) -> (usize, usize)
where
    S::Value: std::fmt::Debug,
{
    use std::cell::Cell;
    let config = ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let (errors, loaded) = (Cell::new(0), Cell::new(0));
    let mut runner = proptest::test_runner::TestRunner::new(config);
    runner
        .run(&strategy, |v| {
            if check(v)? {
                loaded.set(loaded.get() + 1);
            } else {
                errors.set(errors.get() + 1);
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    (errors.get(), loaded.get())
}

/// Property tests of the loader: truncations, bit flips anywhere, and header edits
/// (dtype, shape, offsets, header length). Each case is an error naming the file, or a
/// file whose tensors all hold their data; never a panic.
#[test]
fn the_loader_never_panics_on_damaged_files() {
    let bytes = small_checkpoint_bytes();
    let d = dir();
    let truncated = count("truncations", 0usize..200, |cut| {
        let cut = cut.min(bytes.len() - 1);
        prop_assert!(
            load(&bytes[..cut], d.path()).is_err(),
            "a truncated file loaded"
        );
        Ok(false)
    });
    let flipped = count("bit flips", (0usize..200, 0u8..8), |(at, bit)| {
        let mut b = bytes.clone();
        let at = at % b.len();
        b[at] ^= 1 << bit;
        Ok(load(&b, d.path()).is_ok())
    });
    let header = (
        prop::sample::select(vec!["F32", "F16", "I64", "U8", "BOOL", "F64", "XX"]),
        prop::collection::vec(0usize..6, 0..4),
        (0usize..100, 0usize..100),
        prop::option::of(0u64..u64::MAX),
    );
    let edited = count(
        "header edits",
        header,
        |(dtype, shape, (start, end), length)| {
            let shape: Vec<String> = shape.iter().map(|s| s.to_string()).collect();
            let header = format!(
                r#"{{"a":{{"dtype":"{dtype}","shape":[{}],"data_offsets":[{start},{end}]}}}}"#,
                shape.join(",")
            );
            let n = length.unwrap_or(header.len() as u64);
            let mut b = n.to_le_bytes().to_vec();
            b.extend_from_slice(header.as_bytes());
            b.extend(std::iter::repeat_n(0u8, 64));
            Ok(load(&b, d.path()).is_ok())
        },
    );
    let cases = [truncated, flipped, edited];
    let errors: usize = cases.iter().map(|c| c.0).sum();
    let loaded: usize = cases.iter().map(|c| c.1).sum();
    println!(
        "loader properties: {} cases (truncations {truncated:?}, bit flips {flipped:?}, header edits {edited:?} as (errors, valid)): {errors} clear errors naming the file, {loaded} valid files, 0 panics",
        errors + loaded
    );
    assert_eq!(truncated.0, 256, "every truncation is an error");
}
