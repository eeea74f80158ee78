//! The time profiler: a [`Hook`](crate::Hook) that reproduces Apache SINGA's
//! time-profiling output and fixes its flaws.
//!
//! Measuring is kept apart from reporting, as in PyTorch's profiler:
//! - [`schedule`]: which iterations are timed ([`Schedule`]: PyTorch's wait / warmup /
//!   active / repeat, SINGA's skip) and what is recorded ([`RecordLevel`]);
//! - [`slots`]: the timer marks of an iteration, derived from the phases and nodes;
//! - [`recorder`]: the hook itself, [`TimeProfiler`], which marks and accumulates;
//! - [`profile`]: the result, [`Profile`], plain numbers ([`json`]: its JSON);
//! - [`singa`]: SINGA's text lines and wick's report around them;
//! - [`table`]: the per-op-type table;
//! - [`layers`]: time per layer, block and stage (forward, backward, optimizer);
//! - [`trace`]: the Chrome/Perfetto trace;
//! - [`step`]: the whole training step, input wait, copy and loss read-back included;
//! - [`memory`]: the predicted memory peak and its split, beside the measured one;
//! - [`roofline`]: each op type against this machine's measured peaks ([`machine_peaks`]);
//! - [`advice`]: recommendations, each fired by a measured figure;
//! - [`ranks`]: a data-parallel run's ranks, buckets and overlap, gathered to rank 0
//!   ([`gather`]).
//!
//! Verbosity 0 times nothing. 1: every phase (forward, backward, optimizer), the whole
//! iteration, and the op time inside each phase (so the overhead inside phases is known).
//! 2: also every op, reported per OP_ID. The first `skip` iterations run untimed; every
//! figure is a mean over the timed iterations, each op's over the iterations that timed it.

pub mod advice;
pub mod comparable;
pub mod contention;
pub mod cycles;
pub mod diff;
pub mod gather;
pub mod gpu_prediction;
pub mod html;
pub mod html_charts;
pub mod json;
pub mod layers;
pub mod machine_peaks;
pub mod memory;
pub mod pass_comparison;
pub mod profile;
pub mod ranks;
pub mod recorder;
pub mod roofline;
pub mod samples;
pub mod schedule;
pub mod singa;
pub mod slots;
pub mod stats;
pub mod step;
pub mod table;
pub mod trace;
pub mod validate;

pub use advice::Recommendation;
pub use contention::CpuContention;
pub use cycles::CycleRow;
pub use diff::{diff, diff_runs, Diff, DiffOptions, DiffRow};
pub use gpu_prediction::{DeviceSheet, GpuPrediction};
pub use layers::{LayerLevel, LayerRow};
pub use machine_peaks::MachinePeaks;
pub use memory::{MemoryCategory, MemoryCounter, MemoryProfile, OpMemory};
pub use profile::{OpProfile, OpTypeRow, PhaseProfile, Profile};
pub use ranks::{BucketProfile, DistProfile, RankProfile};
pub use recorder::TimeProfiler;
pub use roofline::{Bound, RoofDistance, RooflineRow};
pub use samples::{RunInfo, Samples, SCHEMA};
pub use schedule::{RecordLevel, Schedule};
pub use slots::{Mark, SlotLayout};
pub use step::{InputVerdict, StepProfile, WallClock};
