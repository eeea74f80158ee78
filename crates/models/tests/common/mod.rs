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
