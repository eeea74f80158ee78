//! `fold_batch_norm`: an inference batch norm whose input is a bias-free convolution's
//! output (read by nothing else) becomes one [`ConvBiasActivation`] node with the batch
//! norm folded into its weights and bias, at the batch norm's place.

use std::sync::Arc;

use wick_ops::conv::epilogue_flops;

use super::rewrite::{fused, picked, Edits, Uses};
use crate::ir::Graph;
use crate::nodes::batchnorm::BatchNormEval;
use crate::nodes::cast::Cast;
use crate::nodes::conv::Conv2d;
use crate::nodes::conv_fused::{BiasSource, ConvBiasActivation};

pub(super) fn run(graph: &mut Graph) -> usize {
    let uses = Uses::of(graph);
    let mut edits = Edits::new(graph);
    let batch_norms = picked(graph, |n| Some(n.op_as::<BatchNormEval>()?.params));
    for (i, bn_params) in batch_norms {
        let y = graph.nodes[i].inputs[0];
        let Some(j) = uses.writer[y.0] else { continue };
        let Some(conv) = graph.nodes[j].op_as::<Conv2d>() else {
            continue;
        };
        if conv.has_bias || edits.is_removed(j) || uses.only_reader(graph, y) != Some(i) {
            continue;
        }
        let mut op = ConvBiasActivation::new(
            conv.params,
            BiasSource::FoldedBatchNorm(bn_params),
            false,
            false,
        );
        let (conv_node, bn_node) = (&graph.nodes[j], &graph.nodes[i]);
        let mut inputs = conv_node.inputs.clone();
        let mut gone = vec![j];
        // Under autocast the weight is a cast of the f32 master weight: fold the master
        // and cast the folded weight instead (one rounding), dropping the cast node.
        if let Some(k) = autocast_weight(graph, &uses, j) {
            inputs[1] = graph.nodes[k].inputs[0];
            op.folded_weight_dtype = Some(graph.values[conv_node.inputs[1].0].dtype);
            gone.push(k);
        }
        inputs.extend_from_slice(&bn_node.inputs[1..5]);
        let out_shape = &graph.values[bn_node.outputs[0].0].shape;
        let flops = conv_node.flops + epilogue_flops(out_shape, true, false, false);
        let outputs = bn_node.outputs.clone();
        graph.nodes[i] = fused(Arc::new(op), inputs, outputs, flops, conv_node);
        edits.matched(&gone);
    }
    edits.apply(graph)
}

/// The cast node making convolution `j`'s weight, when the convolution is its only reader.
fn autocast_weight(graph: &Graph, uses: &Uses, j: usize) -> Option<usize> {
    let w = graph.nodes[j].inputs[1];
    let k = uses.writer[w.0]?;
    graph.nodes[k].op_as::<Cast>()?;
    (uses.only_reader(graph, w) == Some(j)).then_some(k)
}
