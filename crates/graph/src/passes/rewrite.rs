//! What the pattern-matching passes share: who reads and writes each value
//! ([`Uses`]), and dropping matched nodes from a graph ([`remove_nodes`]).

use crate::ir::{Graph, Node, Op, ValueId};

/// Who reads and who writes each value, for pattern matching.
pub(crate) struct Uses {
    /// For each value, the nodes that read it, in order.
    pub readers: Vec<Vec<usize>>,
    /// For each value, the node that writes it last (its producer for intermediates).
    pub writer: Vec<Option<usize>>,
}

impl Uses {
    pub(crate) fn of(graph: &Graph) -> Self {
        let mut readers = vec![Vec::new(); graph.values.len()];
        let mut writer = vec![None; graph.values.len()];
        for (i, node) in graph.nodes.iter().enumerate() {
            for v in &node.inputs {
                readers[v.0].push(i);
            }
            for v in &node.outputs {
                writer[v.0] = Some(i);
            }
        }
        Uses { readers, writer }
    }

    /// The one node that reads `v`, if exactly one does and `v` is not a graph output.
    pub(crate) fn only_reader(&self, graph: &Graph, v: ValueId) -> Option<usize> {
        match self.readers[v.0].as_slice() {
            [one] if !graph.outputs.contains(&v) => Some(*one),
            _ => None,
        }
    }
}

/// Drops the nodes marked in `removed` and renumbers the rest; backward nodes' links to
/// their forward node follow the renumbering.
pub(crate) fn remove_nodes(graph: &mut Graph, removed: &[bool]) {
    let mut new_id = vec![None; graph.nodes.len()];
    let mut next = 0;
    for (i, gone) in removed.iter().enumerate() {
        if !gone {
            new_id[i] = Some(next);
            next += 1;
        }
    }
    let nodes: Vec<Node> = std::mem::take(&mut graph.nodes)
        .into_iter()
        .zip(removed)
        .filter(|(_, gone)| !**gone)
        .map(|(mut node, _)| {
            node.origin.forward_op = node.origin.forward_op.and_then(|f| new_id[f]);
            node
        })
        .collect();
    graph.nodes = nodes;
}

/// Each node that `pick` takes, with what it took, in graph order: collected before a
/// pass rewrites the graph.
pub(crate) fn picked<T>(graph: &Graph, pick: impl Fn(&Node) -> Option<T>) -> Vec<(usize, T)> {
    let nodes = graph.nodes.iter().enumerate();
    nodes.filter_map(|(i, n)| Some((i, pick(n)?))).collect()
}

/// A pattern-matching pass's edits: the nodes its matches replaced and now drop, and how
/// many matches it made.
pub(crate) struct Edits {
    removed: Vec<bool>,
    matched: usize,
}

impl Edits {
    pub(crate) fn new(graph: &Graph) -> Self {
        Edits {
            removed: vec![false; graph.nodes.len()],
            matched: 0,
        }
    }

    /// Counts one match, whose fused node made the nodes `gone` redundant.
    pub(crate) fn matched(&mut self, gone: &[usize]) {
        gone.iter().for_each(|&n| self.removed[n] = true);
        self.matched += 1;
    }

    /// Whether an earlier match already dropped node `i`.
    pub(crate) fn is_removed(&self, i: usize) -> bool {
        self.removed[i]
    }

    /// Drops the redundant nodes from `graph`; returns the number of matches.
    pub(crate) fn apply(self, graph: &mut Graph) -> usize {
        remove_nodes(graph, &self.removed);
        self.matched
    }
}

/// The node that replaces a matched pattern: `op` reading `inputs` and writing
/// `outputs`, with `flops`, in the phase and layer of the pattern's node `like`.
pub(crate) fn fused(
    op: Op,
    inputs: Vec<ValueId>,
    outputs: Vec<ValueId>,
    flops: u64,
    like: &Node,
) -> Node {
    Node {
        op,
        inputs,
        outputs,
        phase: like.phase,
        flops,
        origin: like.origin.clone(),
    }
}
