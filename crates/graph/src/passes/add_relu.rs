//! `add_relu`: an element-wise add whose output only a ReLU reads becomes one [`AddRelu`]
//! node, at the ReLU's place (a residual block's end in training graphs; in inference
//! graphs `conv_epilogue` takes these first).

use std::sync::Arc;
use wick_ops::Kernel;

use super::rewrite::{fused, Edits, Uses};
use crate::ir::Graph;
use crate::nodes::fused_train::AddRelu;

pub(super) fn run(graph: &mut Graph) -> usize {
    let uses = Uses::of(graph);
    let mut edits = Edits::new(graph);
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
        let (add, relu) = (&graph.nodes[k], &graph.nodes[m]);
        let flops = add.flops + relu.flops;
        graph.nodes[m] = fused(
            Arc::new(AddRelu),
            add.inputs.clone(),
            relu.outputs.clone(),
            flops,
            relu,
        );
        edits.matched(&[k]);
    }
    edits.apply(graph)
}
