//! Issue #15: the graph builder and executor under arbitrary shapes and hyper-parameters
//! (zeros included): an error naming the op, or a graph that runs; never a panic.

use candle_core::{DType, Device, Tensor};
use proptest::prelude::*;
use wick_graph::{Executor, GraphBuilder, Mode, ValueKind};
use wick_ops::{BatchNorm2dParams, Conv2dParams, SgdParams};

/// Geometry of one conv → batch norm → ReLU → max pool → global pool → linear → loss net.
#[derive(Debug, Clone)]
struct Net {
    batch: usize,
    channels: usize,
    size: usize,
    filters: usize,
    kernel: usize,
    stride: usize,
    padding: usize,
    pool: (usize, usize, usize),
    classes: usize,
}

fn build_and_run(n: &Net) -> Result<(), String> {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let e = |e: wick_graph::GraphError| e.to_string();
    let x = b
        .input("images", &[n.batch, n.channels, n.size, n.size], DType::F32)
        .map_err(e)?;
    let y = b.input("labels", &[n.batch], DType::I64).map_err(e)?;
    let w = b
        .param("conv.weight", &[n.filters, n.channels, n.kernel, n.kernel])
        .map_err(e)?;
    let conv = Conv2dParams::new(n.stride, n.padding);
    let h = b.conv2d(x, w, None, conv).map_err(e)?;
    let (g, beta) = (
        b.param("bn.weight", &[n.filters]).map_err(e)?,
        b.param("bn.bias", &[n.filters]).map_err(e)?,
    );
    let (rm, rv) = (
        b.state("bn.running_mean", &[n.filters]).map_err(e)?,
        b.state("bn.running_var", &[n.filters]).map_err(e)?,
    );
    let bn = BatchNorm2dParams::default();
    let h = b.batch_norm(h, g, beta, rm, rv, bn).map_err(e)?;
    let h = b.relu(h).map_err(e)?;
    let (k, s, p) = n.pool;
    let h = b.max_pool2d(h, k, s, p).map_err(e)?;
    let h = b.global_avg_pool(h).map_err(e)?;
    let h = b.flatten(h).map_err(e)?;
    let fc = b.param("fc.weight", &[n.classes, n.filters]).map_err(e)?;
    let logits = b.linear(h, fc, None).map_err(e)?;
    let loss = b.cross_entropy(logits, y).map_err(e)?;
    b.output(loss);
    let grads = b.backward(loss).map_err(e)?;
    b.sgd(&grads, SgdParams::default()).map_err(e)?;
    let graph = b.finish();
    let mut exec = Executor::new(graph.clone(), &Device::Cpu);
    for kind in [ValueKind::Param, ValueKind::State] {
        for id in graph.values_of(kind) {
            let v = graph.value(id);
            let t = Tensor::ones(v.shape.as_slice(), DType::F32, &Device::Cpu).unwrap();
            exec.set(&v.name, &t).map_err(e)?;
        }
    }
    let images = Tensor::ones(
        (n.batch, n.channels, n.size, n.size),
        DType::F32,
        &Device::Cpu,
    );
    exec.set("images", &images.unwrap()).map_err(e)?;
    let labels = Tensor::zeros(n.batch, DType::I64, &Device::Cpu).unwrap();
    exec.set("labels", &labels).map_err(e)?;
    exec.run().map_err(e)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_geometry_gives_an_error_or_a_run_never_a_panic(
        batch in 0usize..4, channels in 0usize..4, size in 0usize..9, filters in 0usize..5,
        kernel in 0usize..5, stride in 0usize..3, padding in 0usize..3,
        pool in (0usize..4, 0usize..3, 0usize..3), classes in 0usize..4,
    ) {
        let net = Net { batch, channels, size, filters, kernel, stride, padding, pool, classes };
        let outcome = std::panic::catch_unwind(|| build_and_run(&net));
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(msg)) => prop_assert!(!msg.is_empty(), "{net:?}: an empty error"),
            Err(_) => prop_assert!(false, "{net:?}: panicked"),
        }
    }
}
