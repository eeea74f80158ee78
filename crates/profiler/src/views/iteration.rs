//! The iteration's lines: its mean time, what it covers, its spread, CPU contention, and
//! the step breakdown by phase with the overhead inside phases.

use std::fmt::Write as _;

use wick_graph::Phase;

use super::float_format::cpp_float;
use crate::profile::Profile;

impl Profile {
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

/// The iteration section: a blank line, then the iteration lines.
pub(crate) fn section(p: &Profile) -> String {
    let mut s = String::new();
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "Iteration Time : {} sec (mean of {} timed iterations after {} skipped; {}; {})",
        cpp_float(p.iteration_sec),
        p.timed_iterations,
        p.skipped.unwrap_or(0),
        p.device,
        p.method.as_deref().unwrap_or("no timer")
    );
    let _ = writeln!(s, "Iteration covers : {}", p.coverage());
    let _ = writeln!(
        s,
        "Iteration spread : median {} sec, min {} sec, max {} sec",
        cpp_float(p.iteration_median_sec),
        cpp_float(p.iteration_min_sec),
        cpp_float(p.iteration_max_sec)
    );
    if let Some(contention) = &p.cpu_contention {
        s.push_str(&contention.line());
    }
    if p.iteration_sec > 0.0 {
        let _ = writeln!(s, "Step breakdown : {}", p.breakdown());
        let overhead = p.overhead_in_phases_sec();
        let _ = writeln!(
            s,
            "Ops Time : {} sec; overhead inside phases (phase time outside any op) {} sec, {:.2}%",
            cpp_float(p.ops_sec()),
            cpp_float(overhead),
            100.0 * overhead / p.iteration_sec
        );
    }
    s
}
