//! `conv_epilogue`: the residual add and the ReLU that follow a fused convolution become
//! part of its output write. Patterns, each intermediate read by nothing else:
//! `conv -> relu`, `conv -> add(·, r)`, `conv -> add(·, r) -> relu`. The fused node takes
//! the place of the pattern's last node, where the residual `r` is ready.

use std::sync::Arc;
use wick_ops::Kernel;

use wick_ops::conv::epilogue_flops;

use super::rewrite::{fused, Edits, Uses};
use crate::ir::Graph;
use crate::nodes::conv_fused::{BiasSource, ConvBiasActivation};

pub(super) fn run(graph: &mut Graph) -> usize {
    let uses = Uses::of(graph);
    let mut edits = Edits::new(graph);
    // Nodes already part of a match (a residual add has two fusable inputs: the first
    // match takes it).
    let mut taken = vec![false; graph.nodes.len()];
    for j in 0..graph.nodes.len() {
        let Some(conv) = graph.nodes[j].op_as::<ConvBiasActivation>() else {
            continue;
        };
        if taken[j] || conv.residual || conv.relu {
            continue;
        }
        let y = graph.nodes[j].outputs[0];
        let Some(k) = uses.only_reader(graph, y).filter(|k| !taken[*k]) else {
            continue;
        };
        let is_relu = |n: usize| graph.nodes[n].kernel() == Kernel::ReLU;
        // The residual: the add's other input, when the add reads y once.
        let residual = (graph.nodes[k].kernel() == Kernel::Add)
            .then_some(())
            .and_then(|_| match graph.nodes[k].inputs.as_slice() {
                [a, r] if *a == y && *r != y => Some(*r),
                [r, b] if *b == y && *r != y => Some(*r),
                _ => None,
            });
        let (last, relu) = match residual {
            Some(_) => {
                let z = graph.nodes[k].outputs[0];
                match uses.only_reader(graph, z) {
                    Some(m) if is_relu(m) && !taken[m] => (m, true),
                    _ => (k, false),
                }
            }
            None if is_relu(k) => (k, true),
            None => continue,
        };
        let op = conv.with_epilogue(residual.is_some(), relu);
        let mut inputs = graph.nodes[j].inputs.clone();
        inputs.extend(residual);
        let outputs = graph.nodes[last].outputs.clone();
        let shape = &graph.values[outputs[0].0].shape;
        let has_bias = conv.bias != BiasSource::None;
        let flops = graph.nodes[j].flops - epilogue_flops(shape, has_bias, false, false)
            + epilogue_flops(shape, has_bias, residual.is_some(), relu);
        graph.nodes[last] = fused(Arc::new(op), inputs, outputs, flops, &graph.nodes[j]);
        let gone = if last != k { vec![j, k] } else { vec![j] };
        edits.matched(&gone);
        for n in [j, k, last] {
            taken[n] = true;
        }
    }
    edits.apply(graph)
}
