//! The text report: SINGA's documented lines first and byte-exact (`Time Profiling:`, one
//! `OP_IDn. Kernel : t sec` line per node, or the forward and backward lines), then wick's
//! lines: the optimizer, the iteration, what it covers, its spread, the step breakdown
//! and the per-op-type table. It prints what the [`Profile`] holds.

use std::fmt::{self, Write as _};

use wick_ops::KernelClass;

use super::profile::Profile;
use crate::float_format::cpp_float;
use crate::ir::Phase;

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
        if self.ops.is_empty() {
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
    fn phase_lines(&self) -> String {
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

    /// Whether the graph has nodes in `phase` (a profile without phase rows, made by
    /// hand, counts as a training profile).
    pub fn has_phase(&self, phase: Phase) -> bool {
        self.phases.is_empty() || self.phases.iter().any(|p| p.phase == phase)
    }

    /// What an iteration covers, from the phases the graph has.
    fn coverage(&self) -> String {
        let phases: Vec<&str> = Phase::ALL
            .iter()
            .filter(|p| self.has_phase(**p))
            .map(|p| p.as_str())
            .collect();
        let fed = if self.has_phase(Phase::Backward) {
            "not feeding the batch nor reading the loss back"
        } else {
            "not feeding the batch nor reading the outputs back"
        };
        format!(
            "every node ({}) and the executor's work between them; {fed}",
            phases.join(", ")
        )
    }

    /// The step breakdown: each phase's share of the iteration, split into op time and
    /// the overhead inside the phase. One phase's end mark and the next one's start mark sit
    /// back to back, so the time between phases is the profiler's own and is not reported.
    fn breakdown(&self) -> String {
        let share = |t: f64| 100.0 * t / self.iteration_sec;
        let parts: Vec<String> = self
            .phases
            .iter()
            .map(|p| {
                format!(
                    "{} {:.1}% (ops {:.1}%, overhead {:.1}%)",
                    p.phase.as_str(),
                    share(p.sec),
                    share(p.ops_sec),
                    share(p.overhead_sec())
                )
            })
            .collect();
        parts.join(", ")
    }
}

impl fmt::Display for Profile {
    /// SINGA's lines, then (beyond SINGA) the phase lines after per-op lines, the
    /// iteration, the step breakdown, and, when there are per-op timings, the per-op-type
    /// table and the time per stage, block and layer (when the model named its layers).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.timed_iterations == 0 {
            return writeln!(
                f,
                "Time Profiling: nothing was timed (verbosity {}, {} timed iterations)",
                self.verbosity, self.timed_iterations
            );
        }
        f.write_str(&self.singa_lines())?;
        let communicates = self
            .ops
            .iter()
            .any(|o| o.class == KernelClass::Communication);
        if self.verbosity >= 3 && !self.ops.is_empty() && !communicates {
            f.write_str(VERBOSITY_3_NOTE)?;
        }
        if !self.ops.is_empty() {
            writeln!(f)?;
            f.write_str(&self.phase_lines())?;
        }
        writeln!(f)?;
        writeln!(
            f,
            "Iteration Time : {} sec (mean of {} timed iterations after {} skipped; {}; {})",
            cpp_float(self.iteration_sec),
            self.timed_iterations,
            self.skipped.unwrap_or(0),
            self.device,
            self.method.as_deref().unwrap_or("no timer")
        )?;
        writeln!(f, "Iteration covers : {}", self.coverage())?;
        writeln!(
            f,
            "Iteration spread : median {} sec, min {} sec, max {} sec",
            cpp_float(self.iteration_median_sec),
            cpp_float(self.iteration_min_sec),
            cpp_float(self.iteration_max_sec)
        )?;
        if let Some(contention) = &self.cpu_contention {
            f.write_str(&contention.line())?;
        }
        if self.iteration_sec > 0.0 {
            writeln!(f, "Step breakdown : {}", self.breakdown())?;
            let overhead = self.overhead_in_phases_sec();
            writeln!(
                f,
                "Ops Time : {} sec; overhead inside phases (phase time outside any op) {} sec, {:.2}%",
                cpp_float(self.ops_sec()),
                cpp_float(overhead),
                100.0 * overhead / self.iteration_sec
            )?;
        }
        f.write_str(&self.cycle_lines())?;
        if let Some(step) = &self.step {
            f.write_str(&step.lines())?;
        }
        if let Some(memory) = &self.memory {
            f.write_str(&memory.lines())?;
        }
        f.write_str(&self.placement_lines())?;
        if let Some(dist) = &self.distributed {
            writeln!(f)?;
            f.write_str(&dist.report())?;
        }
        if !self.ops.is_empty() {
            writeln!(f)?;
            f.write_str(&self.table())?;
            if self.ops.iter().any(|o| o.origin.layer.is_some()) {
                use super::layers::LayerLevel;
                writeln!(f)?;
                f.write_str(&self.layer_table(LayerLevel::Stage, usize::MAX))?;
                writeln!(f)?;
                f.write_str(&self.layer_table(LayerLevel::Block, 8))?;
                writeln!(f)?;
                f.write_str(&self.layer_table(LayerLevel::Layer, 10))?;
            }
            if let Some(machine) = &self.machine {
                writeln!(f)?;
                f.write_str(&self.roofline_table(machine))?;
            }
        }
        writeln!(f)?;
        f.write_str(&self.advice_lines())?;
        Ok(())
    }
}
