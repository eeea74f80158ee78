//! Runs one fixture case through a graph: the fixture's float tensors become parameters
//! (so that each gets a gradient), its integer ones inputs, and the loss is
//! `sum(out * grad_out)`, whose gradients PyTorch stored.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use wick_graph::{Executor, GraphBuilder, Mode, Result, ValueId};

/// The values of a case's inputs by the fixture's names.
pub struct Values(pub HashMap<String, ValueId>);

impl std::ops::Index<&str> for Values {
    type Output = ValueId;
    fn index(&self, k: &str) -> &ValueId {
        self.0
            .get(k)
            .unwrap_or_else(|| panic!("the case has no input `{k}`"))
    }
}

/// One case: the fixture's name, how it is built, and whether finite differences are
/// its gradient (see `cases::KINKED`).
pub struct Case {
    pub name: &'static str,
    pub build: fn(&mut GraphBuilder, &Values) -> Result<ValueId>,
    pub smooth: bool,
}

/// The precision a case runs in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Precision {
    F64,
    F32,
}

struct Fixture {
    tensors: HashMap<String, Tensor>,
    meta: HashMap<String, String>,
}

fn load(name: &str) -> Fixture {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/tensor-ops")
        .join(format!("{name}.safetensors"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let meta = header.metadata().clone().unwrap_or_default();
    let tensors = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).unwrap();
    Fixture { tensors, meta }
}

fn host(t: &Tensor) -> Vec<f64> {
    wick_ops::compare::host_values(t).unwrap()
}

/// `max |a - b| / max |b|` over the finite values of `b`; infinite values must match.
fn rel_err(what: &str, a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.dims(), b.dims(), "{what}: shape");
    let (a, b) = (host(a), host(b));
    let scale = b
        .iter()
        .filter(|v| v.is_finite())
        .fold(1e-300f64, |m, v| m.max(v.abs()));
    let mut worst: f64 = 0.0;
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        if y.is_finite() {
            worst = worst.max((x - y).abs() / scale);
        } else {
            assert_eq!(x, y, "{what}: element {i}");
        }
    }
    worst
}

/// The graph of a case: its values by name, the output, and `(input name, gradient)`.
struct Built {
    exec: Executor,
    out: ValueId,
    loss: Option<ValueId>,
    grads: Vec<(String, ValueId)>,
}

fn build(case: &Case, f: &Fixture, dtype: DType, with_backward: bool) -> Built {
    let mut b = GraphBuilder::new(Mode::Train, dtype);
    let mut values = HashMap::new();
    let mut names: Vec<&String> = f
        .tensors
        .keys()
        .filter(|k| *k != "out" && !k.starts_with("grad_"))
        .collect();
    names.sort();
    for name in names {
        let t = &f.tensors[name];
        let v = if t.dtype().is_float() {
            b.param(name, t.dims()).unwrap()
        } else {
            b.input(name, t.dims(), t.dtype()).unwrap()
        };
        values.insert(name.clone(), v);
    }
    let vals = Values(values);
    let out = (case.build)(&mut b, &vals).unwrap_or_else(|e| panic!("{}: {e}", case.name));
    b.output(out);
    let mut loss = None;
    let mut grads = Vec::new();
    if let Some(go) = f.tensors.get("grad_out") {
        let g = b.input("grad_out", go.dims(), dtype).unwrap();
        let prod = b.mul(out, g).unwrap();
        let l = b.sum(prod, &[], false).unwrap();
        b.output(l);
        loss = Some(l);
        if with_backward {
            let gs = b.backward(l).unwrap();
            for (name, v) in &vals.0 {
                if let Some(g) = gs.get(*v) {
                    b.output(g);
                    grads.push((name.clone(), g));
                }
            }
        }
    }
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    for (name, t) in &f.tensors {
        if name == "out" || (name.starts_with("grad_") && name != "grad_out") {
            continue;
        }
        let t = if t.dtype().is_float() {
            t.to_dtype(dtype).unwrap()
        } else {
            t.clone()
        };
        exec.set(name, &t).unwrap();
    }
    Built {
        exec,
        out,
        loss,
        grads,
    }
}

/// Checks a case in `precision` against PyTorch's float64; in float64 also against
/// finite differences. Returns wick's error and, for float32, PyTorch's own.
pub fn check_case(case: &Case, precision: Precision) -> (f64, f64) {
    let f = load(case.name);
    let dtype = match precision {
        Precision::F64 => DType::F64,
        Precision::F32 => DType::F32,
    };
    let mut g = build(case, &f, dtype, true);
    g.exec
        .run()
        .unwrap_or_else(|e| panic!("{}: {e}", case.name));
    let mut worst = rel_err(case.name, g.exec.value(g.out).unwrap(), &f.tensors["out"]);
    for (name, v) in &g.grads {
        let expected = f
            .tensors
            .get(&format!("grad_{name}"))
            .unwrap_or_else(|| panic!("{}: PyTorch has no gradient of {name}", case.name));
        let what = format!("{} grad_{name}", case.name);
        worst = worst.max(rel_err(&what, g.exec.value(*v).unwrap(), expected));
    }
    if f.tensors.contains_key("grad_out") {
        // Every float input has a gradient, but one PyTorch's is exactly zero (a
        // detached mask): backward does not reach it.
        let inputs = f.meta.get("inputs").map(String::as_str).unwrap_or("");
        for name in inputs.split(',').filter(|s| !s.is_empty()) {
            if g.grads.iter().any(|(n, _)| n == name) {
                continue;
            }
            let torch = host(&f.tensors[&format!("grad_{name}")]);
            assert!(
                torch.iter().all(|&x| x == 0.0),
                "{}: {name} has no gradient, PyTorch's is not zero",
                case.name
            );
        }
    }
    let torch32: f64 = f.meta["torch_f32_err"].parse().unwrap();
    match precision {
        Precision::F64 => {
            assert!(
                worst < 1e-10,
                "{}: {worst:.2e} from PyTorch float64",
                case.name
            );
            if case.smooth {
                finite_differences(case, &f, &mut g);
            }
        }
        Precision::F32 => {
            let bound = (20.0 * torch32).max(2e-6);
            assert!(
                worst < bound,
                "{}: float32 {worst:.2e} from PyTorch float64 (PyTorch's float32: {torch32:.2e})",
                case.name
            );
        }
    }
    (worst, torch32)
}

/// Every gradient element against `(L(x + h) - L(x - h)) / 2h`.
fn finite_differences(case: &Case, f: &Fixture, g: &mut Built) {
    let Some(_) = g.loss else { return };
    let mut fwd = build(case, f, DType::F64, false);
    let loss = fwd.loss.unwrap();
    for (name, v) in &g.grads {
        let analytic = host(g.exec.value(*v).unwrap());
        let base = f.tensors[name].clone();
        let shape = base.dims().to_vec();
        let values = host(&base);
        let scale = analytic.iter().fold(1e-3f64, |m, v| m.max(v.abs()));
        for i in 0..values.len() {
            let mut at = |d: f64| {
                let mut v = values.clone();
                v[i] += d;
                fwd.exec
                    .set(
                        name,
                        &Tensor::from_vec(v, shape.as_slice(), &Device::Cpu).unwrap(),
                    )
                    .unwrap();
                fwd.exec.run().unwrap();
                fwd.exec
                    .value(loss)
                    .unwrap()
                    .to_dtype(DType::F64)
                    .unwrap()
                    .to_scalar::<f64>()
                    .unwrap()
            };
            let h = 1e-6 * values[i].abs().max(1.0);
            let numeric = (at(h) - at(-h)) / (2.0 * h);
            let err = (numeric - analytic[i]).abs() / scale;
            assert!(
                err < 1e-6,
                "{} grad_{name}[{i}]: analytic {} numeric {numeric}",
                case.name,
                analytic[i]
            );
        }
        fwd.exec.set(name, &base).unwrap();
    }
}
