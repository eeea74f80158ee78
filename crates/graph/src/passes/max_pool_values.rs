//! `max_pool_values`: a max pooling whose argmax indices nothing reads (no backward, not
//! a graph output: an inference graph) runs its values-only kernel and drops the indices
//! output, instead of tracking and writing an index per output it never needs.

use std::sync::Arc;

use wick_ops::pool::PoolKind;

use super::rewrite::Uses;
use crate::ir::Graph;
use crate::nodes::pool::Pool2d;

pub(super) fn run(graph: &mut Graph) -> usize {
    let uses = Uses::of(graph);
    let mut matched = 0;
    for node in &mut graph.nodes {
        let Some(pool) = node.op_as::<Pool2d>() else {
            continue;
        };
        if pool.kind != PoolKind::Max || !pool.indices || node.outputs.len() != 2 {
            continue;
        }
        let indices = node.outputs[1];
        if !uses.readers[indices.0].is_empty() || graph.outputs.contains(&indices) {
            continue;
        }
        let op = Pool2d {
            indices: false,
            ..pool.clone()
        };
        node.op = Arc::new(op);
        node.outputs.truncate(1);
        matched += 1;
    }
    matched
}
