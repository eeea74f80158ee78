//! `multi_tensor_update`: the SGD updates with equal settings become one
//! [`SgdUpdateMultiTensor`] node, and the Adam updates with equal settings one
//! [`AdamUpdateMultiTensor`] node, each at the last member's place. On CUDA one launch
//! updates every parameter (PyTorch's multi-tensor `foreach` optimizers) instead of one
//! launch per parameter. The arithmetic per parameter is unchanged, so the weights are
//! the same bit for bit.

use std::sync::Arc;

use wick_ops::{AdamParams, SgdParams};

use super::rewrite::Edits;
use crate::ir::{Graph, Node, Op, Origin, Phase, ValueId};
use crate::nodes::optim::AdamUpdate;
use crate::nodes::optim::{AdamUpdateMultiTensor, SgdUpdate, SgdUpdateMultiTensor};

/// The layer name the merged nodes report in the profiler's per-layer views.
pub const MERGED_LAYER: &str = "optimizer (all parameters)";

/// What members of one merged node share.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Settings {
    Sgd(SgdParams),
    /// Adam's settings and its step counter input.
    Adam(AdamParams, ValueId),
}

fn settings(node: &Node) -> Option<Settings> {
    if let Some(sgd) = node.op_as::<SgdUpdate>() {
        return Some(Settings::Sgd(sgd.params));
    }
    let adam = node.op_as::<AdamUpdate>()?;
    Some(Settings::Adam(adam.params, node.inputs[2]))
}

pub(super) fn run(graph: &mut Graph) -> usize {
    let mut groups: Vec<(Settings, Vec<usize>)> = Vec::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        if let Some(s) = settings(node) {
            match groups.iter_mut().find(|g| g.0 == s) {
                Some(g) => g.1.push(i),
                None => groups.push((s, vec![i])),
            }
        }
    }
    let mut edits = Edits::new(graph);
    for (settings, members) in groups {
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
        let (op, inputs): (Op, Vec<ValueId>) = match settings {
            Settings::Sgd(params) => (
                Arc::new(SgdUpdateMultiTensor {
                    params,
                    health: nodes
                        .iter()
                        .filter_map(|n| n.op_as::<SgdUpdate>().map(|s| s.health.clone()))
                        .collect(),
                }),
                nodes.iter().flat_map(|n| n.inputs.clone()).collect(),
            ),
            // The step counter once, then param, grad, exp_avg, exp_avg_sq per member.
            Settings::Adam(params, step) => (
                Arc::new(AdamUpdateMultiTensor {
                    params,
                    members: nodes.len(),
                }),
                std::iter::once(step)
                    .chain(nodes.iter().flat_map(|n| {
                        let i = &n.inputs;
                        [i[0], i[1], i[3], i[4]]
                    }))
                    .collect(),
            ),
        };
        graph.nodes[last] = Node {
            op,
            inputs,
            outputs: nodes.iter().flat_map(|n| n.outputs.clone()).collect(),
            phase: Phase::Optimizer,
            flops: nodes.iter().map(|n| n.flops).sum(),
            origin: Origin {
                layer: Some(MERGED_LAYER.into()),
                forward_op: None,
                parameter: None,
            },
        };
        edits.matched(&members[..members.len() - 1]);
    }
    edits.apply(graph)
}

/// Whether node `m` can run at `last`'s place instead: no node strictly between them,
/// other than the group's own members, reads or writes a value `m` reads or writes (the
/// Adam step counter, which every member reads, is only read).
fn moves_safely(graph: &Graph, m: usize, last: usize, members: &[usize]) -> bool {
    let n = &graph.nodes[m];
    let written: Vec<ValueId> = n.outputs.clone();
    let read: Vec<ValueId> = n.inputs.clone();
    (m + 1..last).filter(|j| !members.contains(j)).all(|j| {
        let other = &graph.nodes[j];
        // Nothing in between may write what m reads or writes, nor read what m writes.
        !other
            .outputs
            .iter()
            .any(|v| read.contains(v) || written.contains(v))
            && !other.inputs.iter().any(|v| written.contains(v))
    })
}
