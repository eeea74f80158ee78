//! ResNet-50 at SINGA's GPU setting (batch 32, 224x224), every pass: on CUDA each batch
//! norm training node, forward and backward, and the merged update borrow their scratch
//! from one workspace that the memory plan sizes, instead of allocating it per call.
//! `cargo test --release -p wick-models --test gpu_workspace -- --nocapture` prints it.

use candle_core::Device;
use wick_graph::PassSet;
use wick_models::{Depth, ResNetConfig, Session, Stem, TrainOptions};
use wick_ops::{DeviceKind, Kernel, SgdParams};

#[test]
fn every_batch_norm_and_the_merged_update_borrow_one_planned_workspace() {
    let config = ResNetConfig::new(Depth::R50, Stem::ImageNet, 1000).unwrap();
    let mut options: TrainOptions = SgdParams {
        lr: 0.1,
        momentum: 0.9,
        ..Default::default()
    }
    .into();
    options.passes = PassSet::all();
    let session = Session::training(config, 32, 224, options, &Device::Cpu).unwrap();
    let graph = session.executor().graph();
    let takes_scratch = |n: &wick_graph::Node| {
        let inputs: Vec<_> = n.inputs.iter().map(|v| graph.value(*v)).collect();
        n.op.workspace_bytes(&inputs, DeviceKind::Cudnn)
    };
    let count = |kernels: &[Kernel]| {
        graph
            .nodes()
            .iter()
            .filter(|n| kernels.contains(&n.op.kernel()))
            .count()
    };
    let batch_norms = count(&[
        Kernel::BatchNormForwardTraining,
        Kernel::BatchNormReLUForwardTraining,
    ]);
    let borrowers: Vec<u64> = graph
        .nodes()
        .iter()
        .map(takes_scratch)
        .filter(|b| *b > 0)
        .collect();
    assert_eq!(batch_norms, 53);
    assert_eq!(count(&[Kernel::SgdUpdateMultiTensor]), 1);
    assert_eq!(borrowers.len(), 2 * batch_norms + 1);
    let plan = graph.memory_plan_on(DeviceKind::Cudnn);
    let largest = *borrowers.iter().max().unwrap();
    assert_eq!(plan.split.kernel_workspace, largest);
    assert_eq!(graph.memory_plan().split.kernel_workspace, 0);
    let at = plan.workspace_op.unwrap();
    println!(
        "ResNet-50 b32 224 on CUDA: {} nodes borrow one workspace of {:.1} KiB (largest: OP_ID{at} {:?}); \
         they would take {:.1} MiB if each allocated its own per step",
        borrowers.len(),
        largest as f64 / 1024.0,
        graph.nodes()[at].op.kernel(),
        borrowers.iter().sum::<u64>() as f64 / (1u64 << 20) as f64,
    );
}
