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
    let h = b
        .max_pool2d(h, wick_ops::Pool2dParams::new(k, s, p))
        .map_err(e)?;
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

#[test]
fn any_geometry_gives_an_error_or_a_run_never_a_panic() {
    use std::cell::Cell;
    let config = ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let geometry = (
        (0usize..4, 0usize..4, 0usize..9, 0usize..5),
        (0usize..5, 0usize..3, 0usize..3),
        (0usize..4, 0usize..3, 0usize..3),
        0usize..4,
    );
    let (errors, runs) = (Cell::new(0), Cell::new(0));
    let mut runner = proptest::test_runner::TestRunner::new(config);
    runner
        .run(
            &geometry,
            |((batch, channels, size, filters), (kernel, stride, padding), pool, classes)| {
                let net = Net {
                    batch,
                    channels,
                    size,
                    filters,
                    kernel,
                    stride,
                    padding,
                    pool,
                    classes,
                };
                match std::panic::catch_unwind(|| build_and_run(&net)) {
                    Ok(Ok(())) => runs.set(runs.get() + 1),
                    Ok(Err(msg)) => {
                        prop_assert!(!msg.is_empty(), "{net:?}: an empty error");
                        errors.set(errors.get() + 1);
                    }
                    Err(_) => prop_assert!(false, "{net:?}: panicked"),
                }
                Ok(())
            },
        )
        .unwrap();
    println!(
        "graph builder properties: 256 cases: {} clear errors, {} graphs that ran, 0 panics",
        errors.get(),
        runs.get()
    );
    assert!(runs.get() > 0, "some geometries are valid and run");
}
