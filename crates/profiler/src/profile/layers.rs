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
    /// The stage and one more component: ResNet's residual block `layer1.0`,
    /// MobileNet's `features.3.conv`, a ViT layer's `self_attention`.
    Block,
    /// The stage: ResNet's `layer1`; torchvision's numbered `features.3` blocks, a ViT's
    /// `encoder.layers.encoder_layer_0`, GPT-2's `transformer.h.0`; else the first
    /// component (`conv1`, `fc`, `classifier`).
    Stage,
}

impl LayerLevel {
    /// The row name of a node recorded by layer `path` at this level.
    fn key(self, path: &str) -> String {
        let parts: Vec<&str> = path.split('.').collect();
        let stage = stage_components(&parts);
        let n = match self {
            LayerLevel::Layer => return path.to_string(),
            LayerLevel::Block => stage + 1,
            LayerLevel::Stage => stage,
        };
        parts[..n.min(parts.len())].join(".")
    }
}

/// How many leading components of a module path name its stage: a first component that
/// is numbered itself (ResNet's `layer1`, `conv1`) alone; otherwise the path through its
/// first index (`3`, `encoder_layer_0`: a container's numbered child) that holds more
/// modules (`features.3`, `encoder.layers.encoder_layer_0`, `transformer.h.0`);
/// otherwise the first component (`block.conv1` is in `block`, `classifier.1` in
/// `classifier`).
fn stage_components(parts: &[&str]) -> usize {
    let digit_last = |c: &str| c.chars().last().is_some_and(|ch| ch.is_ascii_digit());
    if parts.first().is_some_and(|c| digit_last(c)) {
        return 1;
    }
    let index = |c: &str| {
        let digits = c.trim_end_matches(|ch: char| ch.is_ascii_digit());
        digits.len() < c.len() && (digits.is_empty() || digits.ends_with('_'))
    };
    parts
        .iter()
        .enumerate()
        .position(|(i, c)| index(c) && i + 1 < parts.len())
        .map_or(1, |i| i + 1)
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

#[cfg(test)]
mod tests {
    use super::LayerLevel;

    #[test]
    fn stages_and_blocks_follow_each_familys_module_names() {
        let cases = [
            ("layer1.0.conv2", "layer1", "layer1.0"),
            ("conv1", "conv1", "conv1"),
            ("fc", "fc", "fc"),
            ("features.3.conv.1.0", "features.3", "features.3.conv"),
            ("features.0.2", "features.0", "features.0.2"),
            ("classifier.1", "classifier", "classifier.1"),
            (
                "encoder.layers.encoder_layer_0.mlp.0",
                "encoder.layers.encoder_layer_0",
                "encoder.layers.encoder_layer_0.mlp",
            ),
            (
                "transformer.h.0.attn",
                "transformer.h.0",
                "transformer.h.0.attn",
            ),
            ("lm_head", "lm_head", "lm_head"),
            ("block.conv1.bn", "block", "block.conv1"),
            ("block.conv1", "block", "block.conv1"),
        ];
        for (path, stage, block) in cases {
            assert_eq!(LayerLevel::Stage.key(path), stage, "{path}");
            assert_eq!(LayerLevel::Block.key(path), block, "{path}");
            assert_eq!(LayerLevel::Layer.key(path), path);
        }
    }
}
