//! `bias_activation`: a bias added over the last dimension (`broadcast_add(h, b)`, `b`
//! `[C]`) whose sum only a GELU, GELU tanh or SiLU reads becomes one [`BiasActivation`]
//! node, at the activation's place; in a training graph, the activation's backward and
//! the add's two gradients (the input's and the bias's column sums) become one
//! [`BiasActivationBackward`] node, at the activation backward's place. The sum is never
//! written: the backward recomputes it from `h` and `b`.

use std::sync::Arc;

use wick_ops::activation::Activation;
use wick_ops::broadcast::{BinaryOp, Operand};

use super::rewrite::{fused, Edits, Uses};
use crate::ir::{Graph, ValueId};
use crate::nodes::activation::{ActivationBackward, ActivationOp};
use crate::nodes::arithmetic::{Binary, BinaryBackward};
use crate::nodes::fused_train::{BiasActivation, BiasActivationBackward};

pub(super) fn run(graph: &mut Graph) -> usize {
    let uses = Uses::of(graph);
    let mut edits = Edits::new(graph);
    for a in 0..graph.nodes.len() {
        let Some((act, kind, backward)) = matches(graph, &uses, a) else {
            continue;
        };
        let [h, b] = [graph.nodes[a].inputs[0], graph.nodes[a].inputs[1]];
        let activation = &graph.nodes[act];
        let flops = graph.nodes[a].flops + activation.flops;
        let op = Arc::new(BiasActivation { kind });
        graph.nodes[act] = fused(
            op,
            vec![h, b],
            activation.outputs.clone(),
            flops,
            activation,
        );
        let mut gone = vec![a];
        if let Some(Backward { node, lhs, rhs }) = backward {
            let outputs = vec![graph.nodes[lhs].outputs[0], graph.nodes[rhs].outputs[0]];
            let flops = [node, lhs, rhs].iter().map(|&n| graph.nodes[n].flops).sum();
            let like = &graph.nodes[node];
            let inputs = vec![like.inputs[0], h, b];
            let op = Arc::new(BiasActivationBackward { kind });
            graph.nodes[node] = fused(op, inputs, outputs, flops, like);
            gone.extend([lhs, rhs]);
        }
        edits.matched(&gone);
    }
    edits.apply(graph)
}

/// The backward nodes a match replaces: the activation's backward and the add's two
/// gradients.
struct Backward {
    node: usize,
    lhs: usize,
    rhs: usize,
}

/// Whether node `a` is a bias add whose sum only a fusable activation reads (and, in a
/// training graph, only that activation's backward, whose gradient only the add's two
/// gradients read): the activation's node and kind, and the backward nodes when there are.
fn matches(graph: &Graph, uses: &Uses, a: usize) -> Option<(usize, Activation, Option<Backward>)> {
    let add = &graph.nodes[a];
    if add.op_as::<Binary>()?.op != BinaryOp::Add {
        return None;
    }
    let ([h, b], x) = ([add.inputs[0], add.inputs[1]], add.outputs[0]);
    let shape = |v: ValueId| graph.value(v).shape.as_slice();
    let c = *shape(h).last()?;
    if shape(b) != [c] || shape(x) != shape(h) || graph.outputs.contains(&x) {
        return None;
    }
    let readers = &uses.readers[x.0];
    let act = *readers.first()?;
    let kind = graph.nodes[act].op_as::<ActivationOp>()?.kind;
    if !kind.fuses_with_bias() || graph.nodes[act].inputs[0] != x {
        return None;
    }
    match readers[1..] {
        [] => Some((act, kind, None)),
        [node] => {
            let ab = graph.nodes[node].op_as::<ActivationBackward>()?;
            if ab.kind != kind || graph.nodes[node].inputs[1] != x {
                return None;
            }
            let gx = graph.nodes[node].outputs[0];
            if graph.outputs.contains(&gx) {
                return None;
            }
            let operand = |n: usize| {
                let bb = graph.nodes[n].op_as::<BinaryBackward>()?;
                (bb.op == BinaryOp::Add && graph.nodes[n].inputs[0] == gx).then_some(bb.operand)
            };
            let (mut lhs, mut rhs) = (None, None);
            for &n in &uses.readers[gx.0] {
                match operand(n)? {
                    Operand::Lhs => lhs = lhs.xor(Some(n)),
                    Operand::Rhs => rhs = rhs.xor(Some(n)),
                }
            }
            let (lhs, rhs) = (lhs?, rhs?);
            Some((act, kind, Some(Backward { node, lhs, rhs })))
        }
        _ => None,
    }
}
