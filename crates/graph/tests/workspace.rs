//! The kernels' scratch comes from the memory plan: on CUDA, the plan sizes one workspace
//! for the largest scratch of any node (batch norm's partial moments, the multi-tensor
//! update's tables), the executor allocates it once and lends it to every kernel; on the
//! CPU there is none.

mod common;

use candle_core::DType;
use common::*;
use wick_graph::{Graph, PassSet};
use wick_ops::gpu::{ChunkTable, Launch, WorkspaceLayout, CHUNK_LEN};
use wick_ops::{DeviceKind, Kernel, SgdParams};

const SGD: SgdParams = SgdParams {
    lr: 0.05,
    momentum: 0.9,
    weight_decay: 1e-3,
    dampening: 0.0,
    nesterov: false,
};

/// Each node's scratch on CUDA, worked out here from the launch arithmetic the kernels
/// use: batch norm training (forward or backward, fused ReLU or not) over its input 0's
/// NCHW shape, the multi-tensor SGD update over its parameters' sizes.
fn expected_scratch(graph: &Graph) -> Vec<(Kernel, u64)> {
    let mut out = Vec::new();
    for node in graph.nodes() {
        let shape = |i: usize| graph.values()[node.inputs[i].0].shape.clone();
        let bytes = match node.op.kernel() {
            Kernel::BatchNormForwardTraining
            | Kernel::BatchNormBackward
            | Kernel::BatchNormReLUForwardTraining
            | Kernel::BatchNormReLUBackward => {
                let [n, c, h, w] = shape(0)[..] else {
                    panic!("batch norm over {:?}", shape(0))
                };
                let launch = Launch::batch_norm("test", n, c, h * w).unwrap();
                WorkspaceLayout::batch_norm(&launch, 8).bytes()
            }
            Kernel::SgdUpdateMultiTensor => {
                let sizes: Vec<usize> = (0..node.inputs.len())
                    .step_by(3)
                    .map(|i| shape(i).iter().product())
                    .collect();
                let table = ChunkTable::new("test", &sizes, CHUNK_LEN).unwrap();
                WorkspaceLayout::multi_tensor(&table, 3).bytes()
            }
            _ => continue,
        };
        out.push((node.op.kernel(), bytes as u64));
    }
    out
}

#[test]
fn the_plan_sizes_one_workspace_for_the_largest_kernel_scratch_on_cuda_and_none_on_the_cpu() {
    for passes in [PassSet::NONE, PassSet::all()] {
        let mut graph = small_training_graph(DType::F64, 2, 8, 3, SGD);
        graph.apply_passes(passes);
        let expected = expected_scratch(&graph);
        let kernels: Vec<Kernel> = expected.iter().map(|e| e.0).collect();
        // The unfused graph has batch norm's own nodes; every pass adds the fused ones and
        // the merged update.
        for k in match passes == PassSet::NONE {
            true => [Kernel::BatchNormForwardTraining, Kernel::BatchNormBackward].to_vec(),
            false => [
                Kernel::BatchNormForwardTraining,
                Kernel::BatchNormReLUForwardTraining,
                Kernel::BatchNormReLUBackward,
                Kernel::SgdUpdateMultiTensor,
            ]
            .to_vec(),
        } {
            assert!(kernels.contains(&k), "{passes:?}: no {k:?} node");
        }
        let largest = expected.iter().map(|e| e.1).max().unwrap();
        let (bytes, op) = graph.kernel_workspace(DeviceKind::Cudnn);
        assert_eq!(bytes, largest, "{passes:?}");
        let op = op.expect("a node needs the scratch");
        assert!(kernels.contains(&graph.nodes()[op].op.kernel()));
        // Every scratch-taking node says so: none is left out of the plan.
        let nodes_with_scratch = graph
            .nodes()
            .iter()
            .filter(|n| {
                let inputs: Vec<_> = n.inputs.iter().map(|v| &graph.values()[v.0]).collect();
                n.op.workspace_bytes(&inputs, DeviceKind::Cuda) > 0
            })
            .count();
        assert_eq!(nodes_with_scratch, expected.len(), "{passes:?}");

        let (cpu, cuda) = (graph.memory_plan(), graph.memory_plan_on(DeviceKind::Cuda));
        assert_eq!((cpu.split.kernel_workspace, cpu.workspace_op), (0, None));
        assert_eq!(cuda.split.kernel_workspace, largest);
        assert_eq!(cuda.workspace_op, Some(op));
        assert_eq!(cuda.peak_bytes, cpu.peak_bytes + largest);
        assert_eq!(cuda.split.total(), cuda.peak_bytes);
    }
}

#[test]
fn a_cpu_executor_allocates_no_workspace_and_no_kernel_misses_one() {
    let mut exec = small_train_executor(8, SGD, 0.5);
    exec.run().unwrap();
    assert_eq!(
        (exec.workspace().bytes(), exec.workspace().misses()),
        (0, 0)
    );
}
