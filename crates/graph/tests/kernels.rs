//! What the executor and the hooks are told about kernels: the kernel choices in force on
//! the calling thread, and each node's typed kernel (class and phase).

mod common;

use candle_core::{DType, Device, Tensor};
use common::*;
use wick_graph::{Executor, GraphBuilder, Hook, Mode, NodeInfo, Phase};
use wick_ops::{Conv2dParams, KernelClass, KernelPhase, SgdParams};

#[test]
fn every_node_runs_a_kernel_of_its_phase_and_hooks_see_it() {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let net = small_net(&mut b, DType::F32, 2, 8, 3).unwrap();
    let grads = b.backward(net.loss).unwrap();
    b.sgd(
        &grads,
        SgdParams {
            lr: 0.1,
            ..Default::default()
        },
    )
    .unwrap();
    let graph = b.finish();
    for (op_id, node) in graph.nodes().iter().enumerate() {
        let expected = match node.phase {
            Phase::Forward => KernelPhase::Forward,
            Phase::Backward => KernelPhase::Backward,
            Phase::Optimizer => KernelPhase::Optimizer,
        };
        if let Some(phase) = node.kernel().phase() {
            assert_eq!(phase, expected, "OP_ID{op_id} {:?}", node.kernel());
        }
    }
    #[derive(Default)]
    struct Classes(Vec<(usize, KernelClass)>);
    impl Hook for Classes {
        fn on_attach(&mut self, nodes: &[NodeInfo], _: &Device) -> wick_graph::Result<()> {
            self.0 = nodes.iter().map(|n| (n.op_id, n.kernel.class())).collect();
            Ok(())
        }
    }
    let expected: Vec<(usize, KernelClass)> = graph
        .nodes()
        .iter()
        .enumerate()
        .map(|(i, n)| (i, n.kernel().class()))
        .collect();
    let mut exec = Executor::new(graph, &Device::Cpu);
    exec.add_hook(Classes::default()).unwrap();
    let seen = &exec.hook::<Classes>().unwrap().0;
    assert_eq!(seen, &expected);
    let count = |c| seen.iter().filter(|(_, k)| *k == c).count();
    // The small net: 3 convs, 3 batch norms, 3 ReLUs and an add forward, and their backward.
    assert_eq!(count(KernelClass::Convolution), 3 + 3 + 2);
    assert!(count(KernelClass::Elementwise) >= 8, "{seen:?}");
    assert_eq!(count(KernelClass::Communication), 0);
}

/// A one-convolution eval graph (3x3, stride 1, 16 channels at 32x32: a Winograd shape)
/// and its executor with the input and weight set.
fn winograd_conv(x: &Tensor, w: &Tensor) -> (Executor, wick_graph::ValueId) {
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let xi = b.input("x", x.dims(), DType::F32).unwrap();
    let wi = b.param("w", w.dims()).unwrap();
    let y = b.conv2d(xi, wi, None, Conv2dParams::new(1, 1)).unwrap();
    b.output(y);
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    exec.set("x", x).unwrap();
    exec.set("w", w).unwrap();
    (exec, y)
}

#[test]
fn the_kernel_choices_in_force_on_the_calling_thread_hold_for_the_whole_run() {
    use wick_ops::conv::ConvAlgorithm;
    use wick_ops::KernelPath;
    // The CPU executor runs its iterations on rayon's pool; the per-thread choices of the
    // thread that calls `run` must still decide every kernel.
    let dev = Device::Cpu;
    let x = Tensor::randn(0f32, 1.0, (1, 16, 32, 32), &dev).unwrap();
    let w = Tensor::randn(0f32, 0.1, (16, 16, 3, 3), &dev).unwrap();
    let p = Conv2dParams::new(1, 1);
    let direct =
        |alg: ConvAlgorithm| alg.scope(|| wick_ops::conv::conv2d(&x, &w, None, &p).unwrap());
    let (im2col, winograd) = (direct(ConvAlgorithm::Im2col), direct(ConvAlgorithm::Auto));
    assert!(
        wick_ops::max_abs_diff(&im2col, &winograd).unwrap() > 0.0,
        "the two algorithms must round differently for this test to tell them apart"
    );
    for (alg, expected) in [
        (ConvAlgorithm::Im2col, &im2col),
        (ConvAlgorithm::Auto, &winograd),
    ] {
        let (mut exec, y) = winograd_conv(&x, &w);
        alg.scope(|| exec.run()).unwrap();
        let got = exec.value(y).unwrap();
        assert_eq!(
            wick_ops::max_abs_diff(got, expected).unwrap(),
            0.0,
            "{alg:?} in force on the caller: the graph's convolution must be bit-identical"
        );
    }
    // The device-generic path has no padded pooling: under it, the run must fail.
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let xi = b.input("x", x.dims(), DType::F32).unwrap();
    let pooled = b
        .max_pool2d(xi, wick_ops::Pool2dParams::new(3, 2, 1))
        .unwrap();
    b.output(pooled);
    let mut exec = Executor::new(b.finish(), &dev);
    exec.set("x", &x).unwrap();
    exec.run().expect("wick's CPU pooling kernel");
    let err = KernelPath::Generic.scope(|| exec.run()).unwrap_err();
    assert!(err.to_string().contains("device-generic"), "{err}");
}
