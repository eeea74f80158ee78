//! Graph passes: rewrites of a recorded graph before it runs, Paddle-style. Each pass
//! matches subgraphs by pattern and replaces each with one fused node, and reports how
//! many it matched:
//!
//! ```text
//! --- Running IR pass [fold_batch_norm] --- detected 53 subgraphs
//! ```
//!
//! OP_IDs are the node indices after the passes. Inference passes:
//! - [`fold_batch_norm`](PassName::FoldBatchNorm): an inference batch norm after a
//!   bias-free convolution becomes that convolution's weights and bias (exact algebra,
//!   rounded once);
//! - [`conv_epilogue`](PassName::ConvEpilogue): the residual add and the ReLU after a
//!   fused convolution are applied as it writes its output;
//! - [`max_pool_values`](PassName::MaxPoolValues): a max pooling whose argmax indices
//!   nothing reads computes its values alone.
//!
//! Training passes (the same arithmetic as the unfused graph, bit for bit):
//! - [`batch_norm_relu`](PassName::BatchNormRelu): batch norm + ReLU forward in one
//!   output pass, and their backward with ReLU's mask read inside batch norm's;
//! - [`add_relu`](PassName::AddRelu): add + ReLU in one pass.
//!
//! Each pass leaves a graph it has no pattern in as recorded.

mod add_relu;
mod batch_norm_relu;
mod conv_epilogue;
pub mod data_parallel;
mod fold_batch_norm;
mod max_pool_values;

use std::fmt;
use std::str::FromStr;

use crate::ir::{Graph, Node, ValueId};

/// One graph pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PassName {
    /// Folds inference batch norms into the convolutions before them.
    FoldBatchNorm,
    /// Fuses the residual add and ReLU after a fused convolution into its output write.
    ConvEpilogue,
    /// Runs max poolings whose argmax indices nothing reads without computing them.
    MaxPoolValues,
    /// Fuses training batch norm + ReLU, forward and backward.
    BatchNormRelu,
    /// Fuses add + ReLU.
    AddRelu,
}

impl PassName {
    /// Every pass, in the order the pipeline runs them.
    pub const ALL: [PassName; 5] = [
        PassName::FoldBatchNorm,
        PassName::ConvEpilogue,
        PassName::MaxPoolValues,
        PassName::BatchNormRelu,
        PassName::AddRelu,
    ];

    /// The pass's name (`fold_batch_norm`).
    pub fn as_str(self) -> &'static str {
        match self {
            PassName::FoldBatchNorm => "fold_batch_norm",
            PassName::ConvEpilogue => "conv_epilogue",
            PassName::MaxPoolValues => "max_pool_values",
            PassName::BatchNormRelu => "batch_norm_relu",
            PassName::AddRelu => "add_relu",
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }

    /// Runs the pass over `graph`; returns the number of subgraphs it replaced.
    fn run(self, graph: &mut Graph) -> usize {
        match self {
            PassName::FoldBatchNorm => fold_batch_norm::run(graph),
            PassName::ConvEpilogue => conv_epilogue::run(graph),
            PassName::MaxPoolValues => max_pool_values::run(graph),
            PassName::BatchNormRelu => batch_norm_relu::run(graph),
            PassName::AddRelu => add_relu::run(graph),
        }
    }
}

/// Which passes to run: `default` (every pass), `none`, or a comma-separated list of
/// names, as the examples' `--passes` takes it. They always run in pipeline order
/// ([`PassName::ALL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PassSet(u32);

impl PassSet {
    /// No pass: the graph runs as recorded.
    pub const NONE: PassSet = PassSet(0);

    /// Every pass.
    pub fn all() -> Self {
        PassSet(PassName::ALL.iter().fold(0, |acc, p| acc | p.bit()))
    }

    /// Whether `pass` is selected.
    pub fn contains(&self, pass: PassName) -> bool {
        self.0 & pass.bit() != 0
    }

    /// The selected passes in pipeline order.
    pub fn passes(&self) -> impl Iterator<Item = PassName> + '_ {
        PassName::ALL.into_iter().filter(|p| self.contains(*p))
    }
}

impl Default for PassSet {
    /// Every pass (the fastest correct graph).
    fn default() -> Self {
        PassSet::all()
    }
}

impl FromStr for PassSet {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "default" | "all" => return Ok(PassSet::all()),
            "none" | "" => return Ok(PassSet::NONE),
            _ => {}
        }
        let mut set = PassSet::NONE;
        for name in s.split(',').map(str::trim) {
            let pass = PassName::ALL
                .into_iter()
                .find(|p| p.as_str() == name)
                .ok_or_else(|| {
                    let known: Vec<&str> = PassName::ALL.iter().map(|p| p.as_str()).collect();
                    format!(
                        "unknown pass `{name}`: expected default, none or a comma-separated list of {}",
                        known.join(", ")
                    )
                })?;
            set.0 |= pass.bit();
        }
        Ok(set)
    }
}

impl fmt::Display for PassSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.passes().map(PassName::as_str).collect();
        if names.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&names.join(","))
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassRecord {
    /// The pass.
    pub pass: PassName,
    /// Subgraphs it matched and replaced.
    pub subgraphs: usize,
}

impl fmt::Display for PassRecord {
    /// Paddle's log line: `--- Running IR pass [NAME] --- detected N subgraphs`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "--- Running IR pass [{}] --- detected {} subgraphs",
            self.pass.as_str(),
            self.subgraphs
        )
    }
}

impl Graph {
    /// Runs the selected passes in pipeline order, logs each (`tracing`, info) and keeps
    /// their records ([`Graph::passes`]). Nodes are renumbered: OP_IDs are assigned after
    /// the passes.
    pub fn apply_passes(&mut self, set: PassSet) -> &[PassRecord] {
        for pass in set.passes() {
            let subgraphs = pass.run(self);
            let record = PassRecord { pass, subgraphs };
            tracing::info!("{record}");
            self.passes.push(record);
        }
        &self.passes
    }

    /// The passes that ran on this graph, in order.
    pub fn passes(&self) -> &[PassRecord] {
        &self.passes
    }
}

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
