//! `multi_tensor_update`: the SGD updates with equal settings become one
//! [`SgdUpdateMultiTensor`] node, at the last one's place: on CUDA one launch updates
//! every parameter (PyTorch's multi-tensor `foreach` optimizers) instead of one launch per
//! parameter. The arithmetic per parameter is unchanged, so the weights are the same bit
//! for bit.

use std::sync::Arc;

use wick_ops::SgdParams;

use super::remove_nodes;
use crate::ir::{Graph, Node, Origin, Phase};
use crate::ops::optim::{SgdUpdate, SgdUpdateMultiTensor};

/// The layer name the merged node reports in the profiler's per-layer views.
pub const MERGED_LAYER: &str = "optimizer (all parameters)";

pub(super) fn run(graph: &mut Graph) -> usize {
    let mut groups: Vec<(SgdParams, Vec<usize>)> = Vec::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        if let Some(sgd) = node.op_as::<SgdUpdate>() {
            match groups.iter_mut().find(|g| g.0 == sgd.params) {
                Some(g) => g.1.push(i),
                None => groups.push((sgd.params, vec![i])),
            }
        }
    }
    let mut removed = vec![false; graph.nodes.len()];
    let mut merged = 0;
    for (params, members) in groups {
        let Some(&last) = members.last() else {
            continue;
        };
        // A member runs later once merged: only where no other node in between reads or
        // writes a value it touches.
        let members: Vec<usize> = members
            .iter()
            .copied()
            .filter(|&m| moves_safely(graph, m, last, &members))
            .collect();
        if members.len() < 2 || !members.contains(&last) {
            continue;
        }
        let nodes: Vec<&Node> = members.iter().map(|&m| &graph.nodes[m]).collect();
        let group = Node {
            op: Arc::new(SgdUpdateMultiTensor {
                params,
                health: nodes
                    .iter()
                    .map(|n| {
                        let sgd = n.op_as::<SgdUpdate>().expect("members are SGD updates");
                        sgd.health.clone()
                    })
                    .collect(),
            }),
            inputs: nodes.iter().flat_map(|n| n.inputs.clone()).collect(),
            outputs: nodes.iter().flat_map(|n| n.outputs.clone()).collect(),
            phase: Phase::Optimizer,
            flops: nodes.iter().map(|n| n.flops).sum(),
            origin: Origin {
                layer: Some(MERGED_LAYER.into()),
                forward_op: None,
                parameter: None,
            },
        };
        graph.nodes[last] = group;
        for &m in &members[..members.len() - 1] {
            removed[m] = true;
        }
        merged += 1;
    }
    remove_nodes(graph, &removed);
    merged
}

/// Whether node `m` can run at `last`'s place instead: no node strictly between them,
/// other than the group's own members, reads or writes a value `m` reads or writes.
fn moves_safely(graph: &Graph, m: usize, last: usize, members: &[usize]) -> bool {
    let touched: Vec<_> = graph.nodes[m]
        .inputs
        .iter()
        .chain(&graph.nodes[m].outputs)
        .copied()
        .collect();
    (m + 1..last).filter(|j| !members.contains(j)).all(|j| {
        let n = &graph.nodes[j];
        !n.inputs
            .iter()
            .chain(&n.outputs)
            .any(|v| touched.contains(v))
    })
}
