//! One report per active cycle of a repeating [`Schedule`] (PyTorch's
//! `on_trace_ready` fires once per cycle), and the spread between cycles: a figure that
//! moves between cycles of one run is noise, not a change in the code.

use std::fmt::Write as _;

use serde::Serialize;

use crate::profile::data::Profile;
use crate::profile::schedule::Schedule;
use crate::profile::stats::median;
use wick_graph::ir::Phase;

/// The timed iterations of one active cycle.
#[derive(Debug, Clone, Serialize)]
pub struct CycleRow {
    /// The cycle's number, from 1.
    pub cycle: usize,
    /// Its timed iterations.
    pub iterations: usize,
    /// Mean, median, fastest and slowest iteration, seconds.
    pub mean_sec: f64,
    /// See `mean_sec`.
    pub median_sec: f64,
    /// See `mean_sec`.
    pub min_sec: f64,
    /// See `mean_sec`.
    pub max_sec: f64,
    /// Mean seconds of each phase (forward, backward, optimizer; 0 for a phase the graph
    /// lacks).
    pub phase_sec: [f64; 3],
}

impl Profile {
    /// One row per active cycle of the schedule, from the per-iteration samples. A
    /// schedule without `active` (SINGA's skip) has one cycle.
    pub fn cycles(&self) -> Vec<CycleRow> {
        let s = &self.samples;
        let per_cycle = match self.schedule.active {
            0 => s.iterations.len().max(1),
            n => n,
        };
        s.iterations
            .chunks(per_cycle)
            .enumerate()
            .map(|(i, times)| {
                let first = i * per_cycle;
                let mut phase_sec = [0.0; 3];
                let phases = s.phases.get(first..first + times.len()).unwrap_or(&[]);
                for p in phases {
                    for (sum, v) in phase_sec.iter_mut().zip(p) {
                        *sum += v / phases.len() as f64;
                    }
                }
                CycleRow {
                    cycle: i + 1,
                    iterations: times.len(),
                    mean_sec: times.iter().sum::<f64>() / times.len() as f64,
                    median_sec: median(times),
                    min_sec: times.iter().copied().fold(f64::INFINITY, f64::min),
                    max_sec: times.iter().copied().fold(0.0, f64::max),
                    phase_sec,
                }
            })
            .collect()
    }

    /// A line when the run ended before the schedule's cycles did (fewer cycles than
    /// `repeat`, or a last cycle short of `active`), so no one reads two cycles as three.
    fn unfinished_schedule_line(&self, rows: &[CycleRow]) -> String {
        let Schedule {
            wait,
            warmup,
            active,
            repeat,
        } = self.schedule;
        if repeat == 0 || active == 0 || self.timed_iterations == 0 {
            return String::new();
        }
        let complete = rows.iter().filter(|r| r.iterations >= active).count();
        if complete >= repeat {
            return String::new();
        }
        format!(
            "Schedule : {complete} of its {repeat} cycles ran to the end ({} timed iterations of {}): the run ended first; {} iterations complete the schedule\n",
            self.timed_iterations,
            active * repeat,
            (wait + warmup + active) * repeat
        )
    }

    /// The per-cycle report and the spread of the cycle means; empty with one cycle.
    pub fn cycle_lines(&self) -> String {
        let rows = self.cycles();
        let mut s = self.unfinished_schedule_line(&rows);
        if rows.len() < 2 {
            return s;
        }
        s += &format!(
            "Per cycle (schedule {}; one report per active cycle). Mean/Median/Min/Max: ms of one iteration; phases: mean ms.\n",
            self.schedule
        );
        let _ = writeln!(
            s,
            "{:<6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "Cycle",
            "Iterations",
            "Mean(ms)",
            "Median(ms)",
            "Min(ms)",
            "Max(ms)",
            "Fwd(ms)",
            "Bwd(ms)",
            "Opt(ms)"
        );
        for r in &rows {
            let phase = |p: Phase| {
                if self.has_phase(p) {
                    format!("{:.3}", r.phase_sec[p as usize] * 1e3)
                } else {
                    "-".into()
                }
            };
            let _ = writeln!(
                s,
                "{:<6} {:>10} {:>10.3} {:>10.3} {:>10.3} {:>10.3} {:>10} {:>10} {:>10}",
                r.cycle,
                r.iterations,
                r.mean_sec * 1e3,
                r.median_sec * 1e3,
                r.min_sec * 1e3,
                r.max_sec * 1e3,
                phase(Phase::Forward),
                phase(Phase::Backward),
                phase(Phase::Optimizer)
            );
        }
        let means: Vec<f64> = rows.iter().map(|r| r.mean_sec).collect();
        let (lo, hi) = (
            means.iter().copied().fold(f64::INFINITY, f64::min),
            means.iter().copied().fold(0.0, f64::max),
        );
        let mid = median(&means);
        let _ = writeln!(
            s,
            "Cycle spread : cycle means from {:.3} to {:.3} ms, {:.1}% of their median {:.3} ms (a change smaller than this is within this run's own noise)",
            lo * 1e3,
            hi * 1e3,
            100.0 * (hi - lo) / mid.max(f64::MIN_POSITIVE),
            mid * 1e3
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use crate::{Profile, Schedule};

    #[test]
    fn iterations_split_by_active_cycle_with_their_spread() {
        let mut p = Profile {
            schedule: Schedule::new(1, 1, 2, 3),
            ..Default::default()
        };
        p.samples.iterations = vec![0.010, 0.012, 0.020, 0.022, 0.011, 0.013];
        p.samples.phases = p
            .samples
            .iterations
            .iter()
            .map(|t| [t / 2.0, t / 2.0, 0.0])
            .collect();
        let rows = p.cycles();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[1].iterations, 2);
        assert!((rows[1].mean_sec - 0.021).abs() < 1e-12);
        assert!((rows[1].phase_sec[0] - 0.0105).abs() < 1e-12);
        let text = p.cycle_lines();
        assert!(
            text.contains("cycle means from 11.000 to 21.000 ms"),
            "{text}"
        );
        p.timed_iterations = 6;
        assert!(!p.cycle_lines().contains("Schedule :"));
        // A run that ended in the second cycle says so.
        p.timed_iterations = 3;
        p.samples.iterations.truncate(3);
        p.samples.phases.truncate(3);
        assert!(
            p.cycle_lines().starts_with(
                "Schedule : 1 of its 3 cycles ran to the end (3 timed iterations of 6): the run ended first; 12 iterations complete the schedule\n"
            ),
            "{}",
            p.cycle_lines()
        );
        // SINGA's skip: one cycle, no per-cycle report.
        p.schedule = Schedule::skip(5);
        assert_eq!(p.cycles().len(), 1);
        assert!(p.cycle_lines().is_empty());
    }
}
