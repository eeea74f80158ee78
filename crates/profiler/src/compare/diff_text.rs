//! `wick-prof diff`'s text: the verdict first (SLOWER, faster, inconclusive or no
//! significant change, with what it could have detected), the differences between the
//! runs, the flagged rows, then every row of the iteration, phases and op types.

use std::fmt::Write as _;

use crate::compare::diff::{printable, Diff, DiffRow, Outcome};

impl Diff {
    /// The verdict: the flagged rows that decide it, or no significant change with the
    /// smallest change the iteration row could have detected; and whether the runs'
    /// settings or machines differ.
    pub fn verdict(&self) -> String {
        let iteration = self.rows.iter().find(|r| r.kind == "iteration");
        let regressions: Vec<&DiffRow> = self.regressions().collect();
        let faster: Vec<&DiffRow> = self
            .rows
            .iter()
            .filter(|r| r.flagged && r.ratio < 1.0)
            .collect();
        let list = |rows: &[&DiffRow]| {
            rows.iter()
                .take(3)
                .map(|r| format!("{} x{:.3}", r.label(), r.ratio))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let flagged: Vec<&DiffRow> = self.rows.iter().filter(|r| r.flagged).collect();
        let mut s = if let (true, Some(why)) = (self.changes_inconclusive(), &self.machine_moved) {
            let gate = match self.outcome() {
                Outcome::Inconclusive => "",
                _ => "; no slowdown among them",
            };
            format!(
                "Verdict: inconclusive ({} flagged: {}; but {why}, so the machine rather than the code may have moved them{gate}; rerun both on a quiet machine)",
                flagged.len(),
                list(&flagged)
            )
        } else if !regressions.is_empty() {
            format!(
                "Verdict: SLOWER ({} flagged: {})",
                regressions.len(),
                list(&regressions)
            )
        } else if !faster.is_empty() {
            format!(
                "Verdict: faster ({} flagged: {})",
                faster.len(),
                list(&faster)
            )
        } else {
            let detectable = iteration.map_or(String::new(), |r| {
                format!(
                    "; with this noise it could only have detected an iteration change beyond x{:.3} or below x{:.3}",
                    r.detectable_slower, r.detectable_faster
                )
            });
            format!(
                "Verdict: no significant change at {:.0}%{detectable}",
                100.0 * self.confidence
            )
        };
        if !self.warnings.is_empty() {
            s.push_str(&format!(
                " - but the runs differ in {} way(s) that move times by themselves (below)",
                self.warnings.len()
            ));
        }
        s
    }

    /// The diff as text: the verdict, the differences between the runs, the flagged rows,
    /// then every row of the iteration, phases and op types.
    pub fn text(&self) -> String {
        let mut s = format!(
            "wick-prof diff: B / A per-iteration time over {} vs {} runs, bootstrap intervals at {:.0}% family-wise; flagged: interval excludes 1, change >= {:.0}%, row >= {:.0}% of the iteration{}{}\n",
            self.runs.0,
            self.runs.1,
            100.0 * self.confidence,
            100.0 * self.threshold,
            100.0 * self.min_share,
            if self.same_graph { "" } else { " (different graphs: matched by name)" },
            if self.normalized { "; times normalised by each run's machine peaks" } else { "" }
        );
        if let Some((a, b)) = self.per_image {
            let _ = writeln!(
                s,
                "per image: every time divided by its run's batch (A {a}, B {b} images)"
            );
        }
        let _ = writeln!(s, "{}", self.verdict());
        for w in &self.warnings {
            let _ = writeln!(s, "warning: {}", printable(w));
        }
        let inconclusive = self.changes_inconclusive();
        for r in self.rows.iter().filter(|r| r.flagged) {
            let what = match (inconclusive, r.ratio > 1.0) {
                (true, true) => "slower, inconclusive",
                (true, false) => "faster, inconclusive",
                (false, true) => "SLOWER",
                (false, false) => "faster",
            };
            let _ = writeln!(
                s,
                "{what}: {} x{:.3} [{:.3}, {:.3}] ({:.3} ms -> {:.3} ms)",
                r.label(),
                r.ratio,
                r.low,
                r.high,
                r.a_sec * 1e3,
                r.b_sec * 1e3
            );
        }
        let _ = writeln!(
            s,
            "{:<9} {:<36} {:>10} {:>10} {:>8} {:>17} {:>17}",
            "Kind", "Name", "A(ms)", "B(ms)", "B/A", "interval", "detectable"
        );
        for r in self.rows.iter().filter(|r| r.kind != "layer") {
            let _ = writeln!(
                s,
                "{:<9} {:<36} {:>10.3} {:>10.3} {:>8.3} [{:>6.3}, {:>6.3}] x{:>6.3} / x{:>5.3}{}",
                r.kind,
                if r.kind == r.name {
                    String::new()
                } else {
                    printable(&r.name)
                },
                r.a_sec * 1e3,
                r.b_sec * 1e3,
                r.ratio,
                r.low,
                r.high,
                r.detectable_slower,
                r.detectable_faster,
                if r.flagged { " *" } else { "" }
            );
        }
        let _ = writeln!(
            s,
            "detectable: the smallest slowdown / speed-up each row could have flagged with its own noise at this confidence"
        );
        s.push_str(&self.one_sided_text());
        s
    }

    /// The op types only one side has, and how many layers: what no row compares.
    fn one_sided_text(&self) -> String {
        let mut s = String::new();
        for side in ["A", "B"] {
            let rows: Vec<_> = self.one_sided.iter().filter(|r| r.side == side).collect();
            let types: Vec<String> = rows
                .iter()
                .filter(|r| r.kind == "op type")
                .map(|r| format!("{} {:.3} ms", printable(&r.name), r.sec * 1e3))
                .collect();
            let layers = rows.iter().filter(|r| r.kind == "layer").count();
            if !types.is_empty() || layers > 0 {
                let _ = writeln!(
                    s,
                    "only in {side} (not compared): {} op type(s): {}; {layers} layer(s)",
                    types.len(),
                    if types.is_empty() {
                        "-".into()
                    } else {
                        types.join(", ")
                    }
                );
            }
        }
        s
    }

    /// Every layer row, longest in A first (`wick-prof diff --layers`).
    pub fn layers_text(&self) -> String {
        let mut rows: Vec<&DiffRow> = self.rows.iter().filter(|r| r.kind == "layer").collect();
        rows.sort_by(|x, y| y.a_sec.total_cmp(&x.a_sec));
        let mut s = format!(
            "{:<36} {:>10} {:>10} {:>8} {:>17}\n",
            "Layer", "A(ms)", "B(ms)", "B/A", "interval"
        );
        for r in rows {
            let _ = writeln!(
                s,
                "{:<36} {:>10.3} {:>10.3} {:>8.3} [{:>6.3}, {:>6.3}]{}",
                printable(&r.name),
                r.a_sec * 1e3,
                r.b_sec * 1e3,
                r.ratio,
                r.low,
                r.high,
                if r.flagged { " *" } else { "" }
            );
        }
        s
    }
}
