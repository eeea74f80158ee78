//! Graph passes judged by latency (Paddle's practice): two profiles of the same model and
//! batch, one without passes and one with them, timed alternately, compared per op type,
//! per phase and per step.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::compare::diff::{diff, DiffOptions, DiffRow};
use crate::profile::data::Profile;
use wick_graph::ir::Phase;

/// The comparison of `before` (the graph as recorded) and `after` (the graph after the
/// passes) as text: per op type and per phase, ms per iteration before, after and the
/// ratio after / before, then the step's (median iteration) ratio. Op types only one graph
/// has show `-` on the other side.
pub fn compare_passes(before: &Profile, after: &Profile) -> String {
    let c = Comparison::new(before, after);
    let mut s = c.header();
    let moved_untouched = c.op_type_rows(&mut s);
    c.phase_rows(&mut s);
    let (b, a) = (before.iteration_median_sec, after.iteration_median_sec);
    let _ = writeln!(
        s,
        "Step (median iteration): before {:.3} ms, after {:.3} ms, ratio {}; mean ratio interval {}",
        b * 1e3,
        a * 1e3,
        ratio(b, a),
        c.interval("iteration", "iteration")
    );
    if !moved_untouched.is_empty() {
        let _ = writeln!(
            s,
            "Warning: op types that no pass rewrote moved beyond their interval: {}. Nothing in the passes explains them (caches, memory layout, the machine's load): read changes of this size in rewritten types as noise, or rerun with more iterations.",
            moved_untouched.join(", ")
        );
    }
    s
}

/// `after / before` to three decimals, or `-` when either is missing.
fn ratio(b: f64, a: f64) -> String {
    if b > 0.0 && a > 0.0 {
        format!("{:.3}", a / b)
    } else {
        "-".to_string()
    }
}

/// Seconds as ms to three decimals, or `-`.
fn ms(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |s| format!("{:.3}", s * 1e3))
}

/// One op type's nodes and seconds per iteration on each side.
type Sides = [Option<(usize, f64)>; 2];

/// Two profiles and the bootstrap intervals of their rows.
struct Comparison<'p> {
    before: &'p Profile,
    after: &'p Profile,
    /// Per (row kind, name): the diff's row, with its interval.
    intervals: BTreeMap<(String, String), DiffRow>,
}

impl<'p> Comparison<'p> {
    /// The two profiles with the bootstrap intervals per row, from the per-iteration
    /// samples, as `wick-prof diff` computes them.
    fn new(before: &'p Profile, after: &'p Profile) -> Self {
        let opts = DiffOptions {
            allow_different_graphs: true,
            ..Default::default()
        };
        let intervals = diff(before, after, &opts)
            .map(|d| d.rows)
            .unwrap_or_default()
            .into_iter()
            .map(|r| ((r.kind.to_string(), r.name.clone()), r))
            .collect();
        Comparison {
            before,
            after,
            intervals,
        }
    }

    fn interval(&self, kind: &str, name: &str) -> String {
        self.intervals
            .get(&(kind.to_string(), name.to_string()))
            .map_or("-".to_string(), |r| {
                format!("[{:.3}, {:.3}]", r.low, r.high)
            })
    }

    fn header(&self) -> String {
        let passes = |p: &Profile| {
            if p.run.passes.is_empty() {
                "none".to_string()
            } else {
                p.run.passes.join(", ")
            }
        };
        format!(
            "Passes compared: before = {}; after = {}. {} and {} timed iterations, run alternately. \
             Before/After: ms per iteration; Ratio: after / before (below 1: the passes made it faster).\n",
            passes(self.before),
            passes(self.after),
            self.before.timed_iterations,
            self.after.timed_iterations
        )
    }

    /// Every op type of either side, longest first (by the larger side).
    fn op_types(&self) -> Vec<(String, Sides)> {
        let mut kinds: BTreeMap<String, Sides> = BTreeMap::new();
        for (side, p) in [self.before, self.after].into_iter().enumerate() {
            for row in p.by_type() {
                kinds.entry(row.name).or_default()[side] = Some((row.nodes, row.total_sec));
            }
        }
        let mut rows: Vec<_> = kinds.into_iter().collect();
        let key = |r: &Sides| r.iter().flatten().map(|(_, t)| *t).fold(0.0, f64::max);
        rows.sort_by(|a, b| key(&b.1).total_cmp(&key(&a.1)));
        rows
    }

    /// The op-type table; returns the untouched types that moved beyond their interval.
    fn op_type_rows(&self, s: &mut String) -> Vec<String> {
        let mut moved_untouched = Vec::new();
        let _ = writeln!(
            s,
            "{:<34} {:>9} {:>9} {:>11} {:>11} {:>7} {:>17}  Passes",
            "Kernel", "Nodes(b)", "Nodes(a)", "Before(ms)", "After(ms)", "Ratio", "95% interval"
        );
        for (name, [b, a]) in &self.op_types() {
            let nodes =
                |v: &Option<(usize, f64)>| v.map_or("-".to_string(), |(n, _)| n.to_string());
            let (bt, at) = (b.map(|v| v.1), a.map(|v| v.1));
            let moved = self
                .intervals
                .get(&("op type".to_string(), name.clone()))
                .filter(|r| r.low > 1.0 || r.high < 1.0);
            let note = match (untouched(self.before, self.after, name), moved) {
                (false, _) => "rewritten",
                (true, None) => "untouched",
                (true, Some(r)) => {
                    moved_untouched.push(format!(
                        "{name} x{:.3} [{:.3}, {:.3}]",
                        r.ratio, r.low, r.high
                    ));
                    "untouched, yet moved (!)"
                }
            };
            let _ = writeln!(
                s,
                "{:<34} {:>9} {:>9} {:>11} {:>11} {:>7} {:>17}  {note}",
                name,
                nodes(b),
                nodes(a),
                ms(bt),
                ms(at),
                ratio(bt.unwrap_or(0.0), at.unwrap_or(0.0)),
                self.interval("op type", name)
            );
        }
        moved_untouched
    }

    /// The phase table: each phase either graph has.
    fn phase_rows(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "{:<34} {:>9} {:>9} {:>11} {:>11} {:>7} {:>17}",
            "Phase", "", "", "Before(ms)", "After(ms)", "Ratio", "95% interval"
        );
        let phase = |p: &Profile, ph: Phase| p.phases.iter().find(|x| x.phase == ph).map(|x| x.sec);
        for ph in Phase::ALL {
            let (b, a) = (phase(self.before, ph), phase(self.after, ph));
            if b.is_none() && a.is_none() {
                continue;
            }
            let _ = writeln!(
                s,
                "{:<34} {:>9} {:>9} {:>11} {:>11} {:>7} {:>17}",
                ph.as_str(),
                "",
                "",
                ms(b),
                ms(a),
                ratio(b.unwrap_or(0.0), a.unwrap_or(0.0)),
                self.interval("phase", ph.as_str())
            );
        }
    }
}

/// Whether no pass touched op type `name`: the same nodes, with the same input and
/// output shapes, in both graphs.
fn untouched(before: &Profile, after: &Profile, name: &str) -> bool {
    type Shapes<'p> = (&'p Vec<Vec<usize>>, &'p Vec<Vec<usize>>);
    fn shapes<'p>(p: &'p Profile, name: &str) -> Vec<Shapes<'p>> {
        let mut v: Vec<Shapes<'p>> = p
            .ops
            .iter()
            .filter(|o| o.type_name() == name)
            .map(|o| (&o.input_shapes, &o.output_shapes))
            .collect();
        v.sort();
        v
    }
    let (b, a) = (shapes(before, name), shapes(after, name));
    !b.is_empty() && b == a
}
