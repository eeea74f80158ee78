//! The text report: SINGA's documented lines first and byte-exact (`Time Profiling:`, one
//! `OP_IDn. Kernel : t sec` line per node, or the forward and backward lines), then wick's
//! lines: the optimizer, the iteration, what it covers, its spread, the step breakdown
//! and the per-op-type table. It prints what the [`Profile`] holds.

use std::fmt::Write as _;

use wick_ops::KernelClass;

use wick_graph::Phase;

use super::float_format::cpp_float;
use crate::profile::Profile;

/// Printed under `Time Profiling:` at verbosity 3 when the graph has no communication op:
/// that level prints SINGA's per-op lines for those ops only.
pub const VERBOSITY_3_NOTE: &str = "(verbosity 3 prints per-op lines only for the communication ops (Dist*), and this graph has none: use --verbosity 2 for every op)\n";

impl Profile {
    /// SINGA's lines: `Time Profiling:`, then per-op lines (when the profile has per-op
    /// timings, verbosity 2; at verbosity 3 only the communication ops
    /// ([`KernelClass::Communication`], named `Dist*`), as SINGA prints its `Dist` ops) or the forward and backward lines (verbosity 1), each time in
    /// seconds in C++ float formatting.
    pub fn singa_lines(&self) -> String {
        let mut s = String::from("Time Profiling:\n");
        if !self.shows_per_op() {
            s.push_str(&self.phase_lines());
        } else {
            let dist_only = self.verbosity >= 3;
            for op in self
                .ops
                .iter()
                .filter(|o| !dist_only || o.class == KernelClass::Communication)
            {
                let _ = writeln!(
                    s,
                    "OP_ID{}. {} : {} sec",
                    op.op_id,
                    op.name,
                    cpp_float(op.mean_sec)
                );
            }
        }
        s
    }

    /// SINGA's forward and backward lines, and wick's optimizer line after them: one line
    /// per phase the graph has (an inference graph prints only the forward line).
    pub(crate) fn phase_lines(&self) -> String {
        let mut s = String::new();
        for (phase, label, sec) in [
            (Phase::Forward, "Forward Propagation Time", self.forward_sec),
            (
                Phase::Backward,
                "Backward Propagation Time",
                self.backward_sec,
            ),
            (Phase::Optimizer, "Optimizer Time", self.optimizer_sec),
        ] {
            if self.has_phase(phase) {
                let _ = writeln!(s, "{label} : {} sec", cpp_float(sec));
            }
        }
        s
    }

    /// Whether the report prints per-op figures: it holds them and reports above
    /// verbosity 1 (a profiler recording per op but [`reporting_at`](crate::TimeProfiler::reporting_at)
    /// 1 prints what verbosity 1 prints).
    pub fn shows_per_op(&self) -> bool {
        !self.ops.is_empty() && self.verbosity != 1
    }

    /// Whether the graph has nodes in `phase` (a profile without phase rows, made by
    /// hand, counts as a training profile).
    pub fn has_phase(&self, phase: Phase) -> bool {
        self.phases.is_empty() || self.phases.iter().any(|p| p.phase == phase)
    }
}

/// SINGA's section of the report: `Time Profiling:` and its lines, the phase lines after
/// per-op lines, then, after SINGA's lines, the verbosity-3 note when the graph has no
/// communication op.
pub(crate) fn section(p: &Profile) -> String {
    let mut s = p.singa_lines();
    if p.shows_per_op() {
        s.push('\n');
        s.push_str(&p.phase_lines());
    }
    let communicates = p.ops.iter().any(|o| o.class == KernelClass::Communication);
    if p.verbosity >= 3 && p.shows_per_op() && !communicates {
        s.push_str(VERBOSITY_3_NOTE);
    }
    s
}
