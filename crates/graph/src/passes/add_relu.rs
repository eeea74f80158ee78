//! `add_relu`: an element-wise add whose output only a ReLU reads becomes one [`AddRelu`]
//! node, at the ReLU's place (a residual block's end in training graphs; in inference
//! graphs `conv_epilogue` takes these first).

use std::sync::Arc;
use wick_ops::Kernel;

use super::rewrite::{remove_nodes, Uses};
use crate::ir::{Graph, Node};
use crate::nodes::fused_train::AddRelu;

pub(super) fn run(graph: &mut Graph) -> usize {
    let uses = Uses::of(graph);
    let mut fused_adds = Vec::new();
    for k in 0..graph.nodes.len() {
        if graph.nodes[k].kernel() != Kernel::Add {
            continue;
        }
        let s = graph.nodes[k].outputs[0];
        let Some(m) = uses.only_reader(graph, s) else {
            continue;
        };
        if graph.nodes[m].kernel() != Kernel::ReLU {
            continue;
        }
        let fused = Node {
            op: Arc::new(AddRelu),
            inputs: graph.nodes[k].inputs.clone(),
            outputs: graph.nodes[m].outputs.clone(),
            phase: graph.nodes[m].phase,
            flops: graph.nodes[k].flops + graph.nodes[m].flops,
            origin: graph.nodes[m].origin.clone(),
        };
        graph.nodes[m] = fused;
        fused_adds.push(k);
    }
    let mut removed = vec![false; graph.nodes.len()];
    fused_adds.iter().for_each(|&k| removed[k] = true);
    remove_nodes(graph, &removed);
    fused_adds.len()
}
