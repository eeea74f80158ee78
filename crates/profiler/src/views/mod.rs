//! Views: every way a [`Profile`] is shown. Each reads the profile and nothing else.
//!
//! The text report is [`REPORT`], its sections in order; `Profile`'s `Display` prints
//! them. A new view is a file here and, for the text report, one entry in [`REPORT`].
//!
//! - [`singa`]: SINGA's lines, byte-exact; [`iteration`]: the iteration and its
//!   breakdown; [`cycles`]: one row per active schedule cycle;
//! - [`step`], [`input`], [`memory`], [`placement`], [`distributed`], [`contention`]: the whole
//!   step, memory, placement and precision, data-parallel ranks, CPU contention;
//! - [`classes`]: op time per kernel class; [`table`]: the per-op-type table; [`layers`]: time per layer, block and stage;
//! - [`roofline`]: each op type against the machine's peaks; [`advice`]: recommendations;
//! - [`flame`]: folded stacks and the module tree of a flame graph;
//! - [`trace`]: the Chrome/Perfetto trace; [`html`] (with its charts): the HTML report; [`float_format`]: C++'s float formatting, as SINGA prints.

use std::fmt;

use crate::profile::Profile;

pub mod advice;
pub mod classes;
pub mod contention;
pub mod cycles;
pub mod distributed;
pub mod flame;
pub mod float_format;
pub mod html;
pub mod input;
pub mod iteration;
pub mod layers;
pub mod memory;
pub mod placement;
pub mod precision_advice;
pub mod roofline;
pub mod singa;
pub mod step;
pub mod table;
pub mod trace;

pub use advice::Recommendation;
pub use cycles::CycleRow;

/// One section of the text report: its name and its text for a profile (empty when the
/// profile has nothing for it; a section that follows a blank line starts with one).
#[derive(Clone, Copy)]
pub struct Section {
    /// What the section shows.
    pub name: &'static str,
    /// Its text.
    pub text: fn(&Profile) -> String,
}

impl fmt::Debug for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// A section shown only when the profile has per-op timings, after a blank line.
fn per_op(p: &Profile, text: impl FnOnce() -> String) -> String {
    if !p.shows_per_op() {
        String::new()
    } else {
        format!("\n{}", text())
    }
}

/// The text report, in order: SINGA's lines first and byte-exact, then wick's.
pub const REPORT: &[Section] = &[
    Section {
        name: "SINGA's lines",
        text: singa::section,
    },
    Section {
        name: "iteration",
        text: iteration::section,
    },
    Section {
        name: "schedule cycles",
        text: |p| p.cycle_lines(),
    },
    Section {
        name: "whole step",
        text: |p| p.step.as_ref().map(|s| s.lines()).unwrap_or_default(),
    },
    Section {
        name: "input pipeline",
        text: input::section,
    },
    Section {
        name: "memory",
        text: memory::section,
    },
    Section {
        name: "placement and precision",
        text: |p| p.placement_lines(),
    },
    Section {
        name: "data parallel",
        text: |p| {
            p.distributed
                .as_ref()
                .map(|d| format!("\n{}", d.report()))
                .unwrap_or_default()
        },
    },
    Section {
        name: "kernel classes",
        text: classes::section,
    },
    Section {
        name: "op types",
        text: |p| per_op(p, || p.table()),
    },
    Section {
        name: "layers",
        text: layers::section,
    },
    Section {
        name: "roofline",
        text: |p| match &p.machine {
            Some(m) => per_op(p, || p.roofline_table(m)),
            None => String::new(),
        },
    },
    Section {
        name: "recommendations",
        text: |p| format!("\n{}", p.advice_lines()),
    },
];

impl fmt::Display for Profile {
    /// Every section of [`REPORT`] in order, or one line when nothing was timed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.timed_iterations == 0 {
            return writeln!(
                f,
                "Time Profiling: nothing was timed (verbosity {}, {} timed iterations)",
                self.verbosity, self.timed_iterations
            );
        }
        for section in REPORT {
            f.write_str(&(section.text)(self))?;
        }
        Ok(())
    }
}

/// Profiles made by hand for the views' tests.
#[cfg(test)]
pub(crate) mod test_profiles {
    use wick_ops::Kernel;

    use crate::profile::data::{OpProfile, Profile};

    /// A forward node of `kernel` taking `sec` seconds, with its FLOPs and bytes.
    pub(crate) fn op(kernel: Kernel, sec: f64, flops: u64, bytes: u64) -> OpProfile {
        OpProfile {
            flops,
            bytes,
            ..OpProfile::new(kernel, sec)
        }
    }

    /// A CPU profile of one-second iterations running a convolution (`conv_sec`,
    /// `conv_gflop`, 0.1 GB or `conv_bytes`) and a ReLU (`relu_sec`, 0.1 GFLOP,
    /// `relu_bytes`).
    pub(crate) fn conv_and_relu(conv: (f64, f64, u64), relu: (f64, u64)) -> Profile {
        Profile {
            device: "Cpu".into(),
            iteration_sec: 1.0,
            ops: vec![
                op(Kernel::ConvForward, conv.0, (conv.1 * 1e9) as u64, conv.2),
                op(Kernel::ReLU, relu.0, 100_000_000, relu.1),
            ],
            ..Default::default()
        }
    }
}
