//! The result: [`Profile`], plain numbers that every view reads and JSON carries.
//!
//! - [`data`]: the profile, its phases, ops and op-type rows; [`classes`]: its op time
//!   per kernel class; [`layers`] and
//!   [`roofline`]: its rows per layer and per op type against the machine's peaks;
//! - [`json`], [`samples`], [`validate`]: its file format, per-iteration samples and the
//!   checks a profile read from a file must pass;
//! - [`schedule`], [`machine_peaks`], [`step`], [`input_pipeline`], [`memory`],
//!   [`contention`], [`ranks`]: the values a profile records;
//! - [`stats`]: the median the views share.

pub mod classes;
pub mod contention;
pub mod data;
pub mod input_pipeline;
pub mod json;
pub mod layers;
pub mod machine_peaks;
pub mod memory;
pub mod ranks;
pub mod roofline;
pub mod samples;
pub mod schedule;
pub mod stats;
pub mod step;
pub mod validate;

pub use classes::ClassRow;
pub use contention::CpuContention;
pub use data::{OpProfile, OpTypeRow, PhaseProfile, Profile};
pub use input_pipeline::{InputPipeline, LoaderThread};
pub use layers::{LayerLevel, LayerRow};
pub use machine_peaks::MachinePeaks;
pub use memory::{MemoryCategory, MemoryProfile, OpMemory};
pub use ranks::{BucketProfile, DistProfile, RankProfile};
pub use roofline::{Bound, RoofDistance, RooflineRow};
pub use samples::{RunInfo, Samples, SCHEMA};
pub use schedule::{RecordLevel, Schedule};
pub use step::{InputVerdict, StepProfile};
