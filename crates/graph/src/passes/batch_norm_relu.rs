//! `batch_norm_relu`: a training batch norm whose output only a ReLU reads becomes one
//! [`BatchNormReluTrain`] node (at the batch norm's place), and the backward pair that
//! differentiates them (ReLU backward feeding batch-norm backward) becomes one
//! [`BatchNormReluTrainBackward`] node (at the batch-norm backward's place).

use std::sync::Arc;
use wick_ops::Kernel;

use super::rewrite::{fused, picked, Edits, Uses};
use crate::ir::Graph;
use crate::nodes::batchnorm::{BatchNormTrain, BatchNormTrainBackward};
use crate::nodes::fused_train::{BatchNormReluTrain, BatchNormReluTrainBackward};

pub(super) fn run(graph: &mut Graph) -> usize {
    let uses = Uses::of(graph);
    let mut edits = Edits::new(graph);
    let batch_norms = picked(graph, |n| Some(n.op_as::<BatchNormTrain>()?.params));
    for (i, params) in batch_norms {
        let (x, y) = (graph.nodes[i].inputs[0], graph.nodes[i].outputs[0]);
        let Some(r) = uses.only_reader(graph, y) else {
            continue;
        };
        if graph.nodes[r].kernel() != Kernel::ReLU {
            continue;
        }
        let z = graph.nodes[r].outputs[0];
        // The backward pair: ReLU backward (grad_z, z) -> grad_y, read only by batch-norm
        // backward (grad_y, x, ...). Without it (no gradient flows here) only the forward
        // pair would fuse; ResNet training graphs always have it, so that case is left as
        // recorded.
        let relu_backward: Vec<usize> = uses.readers[z.0]
            .iter()
            .copied()
            .filter(|&n| graph.nodes[n].kernel() == Kernel::ReLUBackward)
            .collect();
        let [rb] = relu_backward[..] else { continue };
        let gy = graph.nodes[rb].outputs[0];
        let Some(bb) = uses.only_reader(graph, gy) else {
            continue;
        };
        let bwd = &graph.nodes[bb];
        if bwd.op_as::<BatchNormTrainBackward>().is_none()
            || bwd.inputs[0] != gy
            || bwd.inputs[1] != x
        {
            continue;
        }
        let bn = &graph.nodes[i];
        let mut outputs = bn.outputs.clone();
        outputs[0] = z;
        let op = Arc::new(BatchNormReluTrain { params });
        let flops = bn.flops + graph.nodes[r].flops;
        let forward = fused(op, bn.inputs.clone(), outputs, flops, bn);
        let gz = graph.nodes[rb].inputs[0];
        let mut inputs = vec![gz, z];
        inputs.extend_from_slice(&bwd.inputs[1..]);
        let flops = bwd.flops + graph.nodes[rb].flops;
        let op = Arc::new(BatchNormReluTrainBackward);
        let backward = fused(op, inputs, bwd.outputs.clone(), flops, bwd);
        graph.nodes[i] = forward;
        graph.nodes[bb] = backward;
        edits.matched(&[r, rb]);
    }
    edits.apply(graph)
}
