//! Graph passes judged by latency (Paddle's practice): two profiles of the same model and
//! batch, one without passes and one with them, timed alternately, compared per op type,
//! per phase and per step.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::profile::Profile;
use crate::ir::Phase;

/// The comparison of `before` (the graph as recorded) and `after` (the graph after the
/// passes) as text: per op type and per phase, ms per iteration before, after and the
/// ratio after / before, then the step's (median iteration) ratio. Op types only one graph
/// has show `-` on the other side.
pub fn compare_passes(before: &Profile, after: &Profile) -> String {
    let ratio = |b: f64, a: f64| {
        if b > 0.0 && a > 0.0 {
            format!("{:.3}", a / b)
        } else {
            "-".to_string()
        }
    };
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |s| format!("{:.3}", s * 1e3));
    let passes = |p: &Profile| {
        if p.run.passes.is_empty() {
            "none".to_string()
        } else {
            p.run.passes.join(", ")
        }
    };
    let mut s = format!(
        "Passes compared: before = {}; after = {}. {} and {} timed iterations, run alternately. \
         Before/After: ms per iteration; Ratio: after / before (below 1: the passes made it faster).\n",
        passes(before),
        passes(after),
        before.timed_iterations,
        after.timed_iterations
    );
    let mut kinds: BTreeMap<String, [Option<(usize, f64)>; 2]> = BTreeMap::new();
    for (side, p) in [before, after].into_iter().enumerate() {
        for row in p.by_type() {
            kinds.entry(row.name).or_default()[side] = Some((row.nodes, row.total_sec));
        }
    }
    let mut rows: Vec<_> = kinds.into_iter().collect();
    // Longest first, by the larger of the two sides.
    rows.sort_by(|a, b| {
        let key =
            |r: &[Option<(usize, f64)>; 2]| r.iter().flatten().map(|(_, t)| *t).fold(0.0, f64::max);
        key(&b.1).total_cmp(&key(&a.1))
    });
    let _ = writeln!(
        s,
        "{:<34} {:>9} {:>9} {:>11} {:>11} {:>7}",
        "Kernel", "Nodes(b)", "Nodes(a)", "Before(ms)", "After(ms)", "Ratio"
    );
    for (name, [b, a]) in &rows {
        let nodes = |v: &Option<(usize, f64)>| v.map_or("-".to_string(), |(n, _)| n.to_string());
        let (bt, at) = (b.map(|v| v.1), a.map(|v| v.1));
        let _ = writeln!(
            s,
            "{:<34} {:>9} {:>9} {:>11} {:>11} {:>7}",
            name,
            nodes(b),
            nodes(a),
            ms(bt),
            ms(at),
            ratio(bt.unwrap_or(0.0), at.unwrap_or(0.0))
        );
    }
    let _ = writeln!(
        s,
        "{:<34} {:>9} {:>9} {:>11} {:>11} {:>7}",
        "Phase", "", "", "Before(ms)", "After(ms)", "Ratio"
    );
    let phase = |p: &Profile, ph: Phase| p.phases.iter().find(|x| x.phase == ph).map(|x| x.sec);
    for ph in Phase::ALL {
        let (b, a) = (phase(before, ph), phase(after, ph));
        if b.is_none() && a.is_none() {
            continue;
        }
        let _ = writeln!(
            s,
            "{:<34} {:>9} {:>9} {:>11} {:>11} {:>7}",
            ph.as_str(),
            "",
            "",
            ms(b),
            ms(a),
            ratio(b.unwrap_or(0.0), a.unwrap_or(0.0))
        );
    }
    let (b, a) = (before.iteration_median_sec, after.iteration_median_sec);
    let _ = writeln!(
        s,
        "Step (median iteration): before {:.3} ms, after {:.3} ms, ratio {}",
        b * 1e3,
        a * 1e3,
        ratio(b, a)
    );
    s
}
