//! Time per layer, block and stage: each node's time goes to the layer that recorded it
//! (backward nodes to their forward node's layer, optimizer nodes to their parameter's),
//! split by phase. Every node counts once, so the rows of a level add up to the phases'
//! op time.

use serde::Serialize;
use wick_graph::ir::Phase;

use crate::profile::data::Profile;

/// How finely [`Profile::by_layer`] groups: the full module path, or a prefix of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerLevel {
    /// The module that recorded the node: `layer1.0.conv2`, `bn1`, `fc`.
    Layer,
    /// The first two path components: the residual block `layer1.0` (`conv1` alone).
    Block,
    /// The first path component: the stage `layer1` (`conv1`, `fc`, ...).
    Stage,
}

impl LayerLevel {
    /// The row name of a node recorded by layer `path` at this level.
    fn key(self, path: &str) -> String {
        let parts = match self {
            LayerLevel::Layer => return path.to_string(),
            LayerLevel::Block => 2,
            LayerLevel::Stage => 1,
        };
        path.split('.').take(parts).collect::<Vec<_>>().join(".")
    }
}

/// The row of nodes recorded outside any layer (`GraphBuilder::in_layer`).
pub const NO_LAYER: &str = "(no layer)";

/// One layer's (block's, stage's) time per iteration, by phase.
#[derive(Debug, Clone, Serialize)]
pub struct LayerRow {
    /// The module path (or its prefix).
    pub name: String,
    /// Seconds per iteration in its forward nodes.
    pub forward_sec: f64,
    /// Seconds per iteration in its backward nodes.
    pub backward_sec: f64,
    /// Seconds per iteration in its optimizer updates.
    pub optimizer_sec: f64,
    /// The sum of the three.
    pub total_sec: f64,
    /// Share of all op time in an iteration.
    pub share: f64,
    /// Trainable parameters it updates (elements).
    pub parameters: u64,
    /// FLOPs per iteration, all phases.
    pub flops: u64,
    /// Nodes per iteration.
    pub nodes: usize,
}

impl Profile {
    /// Time per layer, block or stage, longest first (needs per-op timings: verbosity 2).
    pub fn by_layer(&self, level: LayerLevel) -> Vec<LayerRow> {
        let mut rows: Vec<LayerRow> = Vec::new();
        for op in &self.ops {
            let name = match &op.origin.layer {
                Some(path) => level.key(path),
                None => NO_LAYER.to_string(),
            };
            let i = match rows.iter().position(|r| r.name == name) {
                Some(i) => i,
                None => {
                    rows.push(LayerRow {
                        name,
                        forward_sec: 0.0,
                        backward_sec: 0.0,
                        optimizer_sec: 0.0,
                        total_sec: 0.0,
                        share: 0.0,
                        parameters: 0,
                        flops: 0,
                        nodes: 0,
                    });
                    rows.len() - 1
                }
            };
            let r = &mut rows[i];
            match op.phase {
                Phase::Forward => r.forward_sec += op.mean_sec,
                Phase::Backward => r.backward_sec += op.mean_sec,
                Phase::Optimizer => r.optimizer_sec += op.mean_sec,
            }
            r.total_sec += op.mean_sec;
            r.parameters += op.parameter_elements;
            r.flops = r.flops.saturating_add(op.flops);
            r.nodes += 1;
        }
        let all: f64 = rows.iter().map(|r| r.total_sec).sum();
        for r in &mut rows {
            r.share = if all > 0.0 { r.total_sec / all } else { 0.0 };
        }
        rows.sort_by(|a, b| b.total_sec.total_cmp(&a.total_sec));
        rows
    }
}
