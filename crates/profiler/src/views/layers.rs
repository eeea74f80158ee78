//! The layer tables: time per layer, block and stage, from [`Profile::by_layer`].

use std::fmt::Write as _;

use crate::profile::data::Profile;
use crate::profile::layers::{LayerLevel, LayerRow};

impl Profile {
    /// The per-layer table as text: the `top` longest rows of `level` and a line for the
    /// rest, with a header that defines every column.
    pub fn layer_table(&self, level: LayerLevel, top: usize) -> String {
        let rows = self.by_layer(level);
        let (what, column) = match level {
            LayerLevel::Layer => ("layer", "Layer"),
            LayerLevel::Block => ("block", "Block"),
            LayerLevel::Stage => ("stage", "Stage"),
        };
        let mut s = format!(
            "Per-{what} time ({} {what}s; backward nodes count for the layer whose forward node they differentiate, updates for their parameter's). \
             Fwd/Bwd/Opt/Total: ms per iteration; Share: of all op time; Params: elements of the parameters its optimizer nodes update (0 in inference graphs); GFLOP: per iteration, all phases.\n",
            rows.len()
        );
        let _ = writeln!(
            s,
            "{:<26} {:>10} {:>10} {:>10} {:>10} {:>7} {:>11} {:>9}",
            column, "Fwd(ms)", "Bwd(ms)", "Opt(ms)", "Total(ms)", "Share", "Params", "GFLOP"
        );
        let line = |s: &mut String, r: &LayerRow| {
            let _ = writeln!(
                s,
                "{:<26} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>6.1}% {:>11} {:>9.3}",
                r.name,
                r.forward_sec * 1e3,
                r.backward_sec * 1e3,
                r.optimizer_sec * 1e3,
                r.total_sec * 1e3,
                r.share * 100.0,
                r.parameters,
                r.flops as f64 / 1e9
            );
        };
        for r in rows.iter().take(top) {
            line(&mut s, r);
        }
        if rows.len() > top {
            let rest = &rows[top..];
            let sum = |f: fn(&LayerRow) -> f64| rest.iter().map(f).sum::<f64>();
            let others = LayerRow {
                name: format!("({} more)", rest.len()),
                forward_sec: sum(|r| r.forward_sec),
                backward_sec: sum(|r| r.backward_sec),
                optimizer_sec: sum(|r| r.optimizer_sec),
                total_sec: sum(|r| r.total_sec),
                share: sum(|r| r.share),
                parameters: rest.iter().map(|r| r.parameters).sum(),
                flops: rest.iter().fold(0u64, |a, r| a.saturating_add(r.flops)),
                nodes: rest.iter().map(|r| r.nodes).sum(),
            };
            line(&mut s, &others);
        }
        s
    }
}

/// The report's layer section (per-op profiles whose model named its layers): every
/// stage, the top 8 blocks and the top 10 layers, each after a blank line.
pub(crate) fn section(p: &Profile) -> String {
    if !p.shows_per_op() || !p.ops.iter().any(|o| o.origin.layer.is_some()) {
        return String::new();
    }
    [
        (LayerLevel::Stage, usize::MAX),
        (LayerLevel::Block, 8),
        (LayerLevel::Layer, 10),
    ]
    .iter()
    .map(|&(level, rows)| format!("\n{}", p.layer_table(level, rows)))
    .collect()
}
