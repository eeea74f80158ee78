//! What wick-models' tests share: the model and training step the ResNet-18 fixtures were
//! made with, the L2 norm, graph kernels and scratch folders.
#![allow(dead_code)]

use candle_core::{DType, Device, Tensor};
use wick_graph::PassSet;
use wick_models::{Depth, ResNetConfig, Session, Stem, TrainOptions};
use wick_ops::SgdParams;

/// ResNet-18 with the CIFAR stem and 10 classes, as both fixtures build it.
pub fn config() -> ResNetConfig {
    ResNetConfig::new(Depth::R18, Stem::Cifar, 10).unwrap()
}

/// A training session (batch 8 of 32x32) with both fixtures' SGD settings (lr 0.1, momentum
/// 0.9, weight decay 5e-4 on every parameter), keeping the gradients; no weights set yet.
pub fn training_session(device: &Device) -> Session {
    training_session_with(device, PassSet::default())
}

/// [`training_session`] with the given graph passes.
pub fn training_session_with(device: &Device, passes: PassSet) -> Session {
    let sgd = SgdParams {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 5e-4,
        ..Default::default()
    };
    let opts = TrainOptions {
        keep_gradients: true,
        passes,
        ..sgd.into()
    };
    Session::training(config(), 8, 32, opts, device).unwrap()
}

/// The L2 norm of `t`, in f64.
pub fn norm(t: &Tensor) -> f64 {
    t.to_dtype(DType::F64)
        .unwrap()
        .sqr()
        .unwrap()
        .sum_all()
        .unwrap()
        .to_scalar::<f64>()
        .unwrap()
        .sqrt()
}

/// The kernels of `session`'s graph, in OP_ID order.
pub fn kernels(session: &Session) -> Vec<wick_ops::Kernel> {
    let nodes = session.executor().graph().nodes();
    nodes.iter().map(|n| n.kernel()).collect()
}

/// A scratch folder named `<prefix>...`, removed when dropped (also when a test fails).
pub fn scratch(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(prefix).tempdir().unwrap()
}

/// The largest element-wise difference of `a` from `b`, relative to `b`'s largest
/// magnitude, in f64 (NaN, which passes no tolerance, where one side has a NaN).
pub fn rel_err(a: &Tensor, b: &Tensor) -> f64 {
    let flat = |t: &Tensor| t.flatten_all().unwrap();
    wick_ops::max_rel_diff(&flat(a), &flat(b)).unwrap()
}

/// A layer's output and gradients against a PyTorch fixture: the loss `sum(out *
/// grad_out)`, `grad_out` a graph input, makes each parameter's gradient the
/// vector-Jacobian product that the fixture's `grad_<name>` holds.
pub struct VjpCheck {
    /// The graph's executor: set the parameters and `grad_out` before [`VjpCheck::worst_error`].
    pub exec: wick_graph::Executor,
    out: wick_graph::ValueId,
    /// Each parameter and its gradient.
    pub grads: Vec<(wick_graph::ValueId, wick_graph::ValueId)>,
}

impl VjpCheck {
    /// Adds the loss and the backward pass to `b`, whose output is `out` and whose input
    /// `go` is `out`'s gradient.
    pub fn new(
        mut b: wick_graph::GraphBuilder,
        out: wick_graph::ValueId,
        go: wick_graph::ValueId,
    ) -> Self {
        let prod = b.mul(out, go).unwrap();
        let loss = b.sum(prod, &[], false).unwrap();
        let grads = b.backward(loss).unwrap();
        b.output(out);
        let grads: Vec<_> = grads.iter().collect();
        grads.iter().for_each(|(_, g)| b.output(*g));
        let exec = wick_graph::Executor::new(b.finish(), &Device::Cpu);
        VjpCheck { exec, out, grads }
    }

    /// Runs the graph; the worst [`rel_err`] of the output against `f["out"]` and of each
    /// parameter's gradient against `f["grad_<fixture name>"]` (NaN when any is NaN).
    pub fn worst_error(
        &mut self,
        f: &std::collections::HashMap<String, Tensor>,
        fixture_name: impl Fn(&str) -> String,
    ) -> f64 {
        self.exec.run().unwrap();
        let value = |id| self.exec.value(id).unwrap();
        let mut worst = rel_err(value(self.out), &f["out"]);
        for &(p, g) in &self.grads {
            let name = &self.exec.graph().value(p).name;
            let expected = &f[&format!("grad_{}", fixture_name(name))];
            worst = wick_ops::compare::nan_max(worst, rel_err(value(g), expected));
        }
        worst
    }
}

/// Asserts that `text` (an error message) mentions each of `words`, naming those missing.
#[track_caller]
pub fn assert_mentions(text: &str, words: &[&str]) {
    let missing: Vec<&&str> = words.iter().filter(|w| !text.contains(**w)).collect();
    assert!(missing.is_empty(), "{missing:?} missing from: {text}");
}
