//! Helpers shared by wick-ops' tests: PyTorch fixtures, deterministic random tensors,
//! finite differences and tolerance checks.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{Device, Tensor};
use wick_ops::KernelPath;

/// The fixtures folder: `$WICK_FIXTURES` when set (the GPU bundle carries its own copy),
/// else the repository's `fixtures/`. A missing fixture file is a test failure naming the
/// path, never a silent pass.
pub fn fixtures_dir() -> PathBuf {
    std::env::var_os("WICK_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures"))
}

/// The device fixture tests run on: the CPU, or the first GPU with `WICK_TEST_DEVICE=cuda`
/// (a build with the `cuda` feature; `scripts/gpu-check.sh` sets it).
pub fn device() -> Device {
    match std::env::var("WICK_TEST_DEVICE").as_deref() {
        Ok("cuda") => Device::new_cuda(0)
            .expect("WICK_TEST_DEVICE=cuda needs a build with the cuda feature and a GPU"),
        Ok("cpu") | Err(_) => Device::Cpu,
        Ok(other) => panic!("WICK_TEST_DEVICE={other}: expected cpu or cuda"),
    }
}

/// One op fixture: its tensors (on [`device`]) and its metadata.
pub struct Fixture {
    pub name: String,
    pub tensors: HashMap<String, Tensor>,
    pub meta: HashMap<String, String>,
}

impl Fixture {
    pub fn load(case: &str) -> Fixture {
        Self::load_from("ops", case)
    }

    /// A case of the fixture folder `folder` (`ops`, `ops-tier`).
    pub fn load_from(folder: &str, case: &str) -> Fixture {
        let path = fixtures_dir()
            .join(folder)
            .join(format!("{case}.safetensors"));
        let bytes = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("cannot read fixture {}: {e}", path.display()));
        let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).expect("fixture header");
        let meta = header.metadata().clone().unwrap_or_default();
        let tensors =
            candle_core::safetensors::load_buffer(&bytes, &device()).expect("fixture tensors");
        Fixture {
            name: case.to_string(),
            tensors,
            meta,
        }
    }

    pub fn t(&self, name: &str) -> &Tensor {
        self.tensors
            .get(name)
            .unwrap_or_else(|| panic!("fixture {} has no tensor {name}", self.name))
    }

    pub fn meta(&self, key: &str) -> &str {
        self.meta
            .get(key)
            .unwrap_or_else(|| panic!("fixture {} has no metadata {key}", self.name))
    }

    pub fn usize(&self, key: &str) -> usize {
        self.meta(key)
            .parse()
            .unwrap_or_else(|e| panic!("{}: metadata {key}: {e}", self.name))
    }

    pub fn f64(&self, key: &str) -> f64 {
        self.meta(key)
            .parse()
            .unwrap_or_else(|e| panic!("{}: metadata {key}: {e}", self.name))
    }

    pub fn bool(&self, key: &str) -> bool {
        match self.meta(key) {
            "true" => true,
            "false" => false,
            other => panic!("{}: metadata {key} = {other} is not a boolean", self.name),
        }
    }

    /// The fixture's tolerance, relative to max |value|: 1e-9 for f64 cases, 1e-4 for f32.
    pub fn tol(&self) -> f64 {
        match self.meta("dtype") {
            "float64" | "torch.float64" => 1e-9,
            _ => 1e-4,
        }
    }
}

/// max |a - b| / max |b| (NaN where only one side has a NaN), after checking the shapes.
pub fn rel_err(a: &Tensor, b: &Tensor) -> f64 {
    wick_ops::max_rel_diff(a, b).unwrap()
}

/// Asserts `rel_err(actual, expected) <= tol`, naming what was compared.
pub fn assert_close(what: &str, actual: &Tensor, expected: &Tensor, tol: f64) {
    let e = rel_err(actual, expected);
    assert!(e <= tol, "{what}: relative error {e:.3e} exceeds {tol:.1e}");
}

/// A deterministic tensor of uniform values in [-1, 1) (xorshift), f64.
pub fn rand_tensor(seed: u64, shape: &[usize]) -> Tensor {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let n: usize = shape.iter().product();
    let data: Vec<f64> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect();
    Tensor::from_vec(data, shape, &Device::Cpu).unwrap()
}

/// The gradient of `sum(f(x) * grad_out)` with respect to `x` by central differences.
pub fn numeric_grad(f: impl Fn(&Tensor) -> Tensor, x: &Tensor, grad_out: &Tensor) -> Tensor {
    let h = 1e-6;
    let base = x.flatten_all().unwrap().to_vec1::<f64>().unwrap();
    let weight = grad_out.flatten_all().unwrap().to_vec1::<f64>().unwrap();
    let objective = |v: &[f64]| -> f64 {
        let t = Tensor::from_vec(v.to_vec(), x.dims(), &Device::Cpu).unwrap();
        let y = f(&t).flatten_all().unwrap().to_vec1::<f64>().unwrap();
        assert_eq!(y.len(), weight.len(), "grad_out has the wrong size");
        y.iter().zip(&weight).map(|(a, b)| a * b).sum()
    };
    let mut grad = vec![0f64; base.len()];
    let mut v = base.clone();
    for i in 0..base.len() {
        v[i] = base[i] + h;
        let plus = objective(&v);
        v[i] = base[i] - h;
        let minus = objective(&v);
        v[i] = base[i];
        grad[i] = (plus - minus) / (2.0 * h);
    }
    Tensor::from_vec(grad, x.dims(), &Device::Cpu).unwrap()
}

/// Finite-difference tolerance (relative to max |gradient|) for f64 central differences.
pub const FD_TOL: f64 = 1e-6;

/// Both implementation paths: wick's own kernels, and candle's device-generic ops (the
/// path CUDA takes for most families), forced on the CPU.
pub const PATHS: [KernelPath; 2] = [KernelPath::Auto, KernelPath::Generic];

/// A batch-norm case drawn from seeds `seed..seed + 6`: input `x` of `shape`, per-channel
/// weight `w`, bias `b`, running mean `rm` and a positive running variance `rv`, and an
/// output gradient `g` of `shape`.
pub struct BatchNormCase {
    pub x: Tensor,
    pub w: Tensor,
    pub b: Tensor,
    pub rm: Tensor,
    pub rv: Tensor,
    pub g: Tensor,
}

pub fn batch_norm_case(seed: u64, shape: &[usize]) -> BatchNormCase {
    let c = [shape[1]];
    BatchNormCase {
        x: rand_tensor(seed, shape),
        w: rand_tensor(seed + 1, &c),
        b: rand_tensor(seed + 2, &c),
        rm: rand_tensor(seed + 3, &c),
        rv: (rand_tensor(seed + 4, &c).abs().unwrap() + 0.5).unwrap(),
        g: rand_tensor(seed + 5, shape),
    }
}

/// Asserts that `result` is an error whose message contains every one of `needles` (the
/// op, the tensor, the shapes it names).
pub fn assert_error_names<T: std::fmt::Debug>(result: wick_ops::Result<T>, needles: &[&str]) {
    let msg = result.unwrap_err().to_string();
    assert!(
        needles.iter().all(|n| msg.contains(n)),
        "{msg}: expected {needles:?}"
    );
}

/// Asserts that `text` (an error message) mentions each of `words`, naming those missing.
#[track_caller]
pub fn assert_mentions(text: &str, words: &[&str]) {
    let missing: Vec<&&str> = words.iter().filter(|w| !text.contains(**w)).collect();
    assert!(missing.is_empty(), "{missing:?} missing from: {text}");
}
