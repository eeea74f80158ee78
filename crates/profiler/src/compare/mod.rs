//! Profiles side by side, and a profile carried to another machine.
//!
//! - [`diff`](mod@diff): two profiles (or two sets of runs) compared op type by op type, with
//!   bootstrap intervals and a regression verdict (`wick-prof diff`);
//! - `diff_text`: the diff's verdict and text;
//! - [`comparable`]: whether two profiles can be compared, and their machine peaks scaled;
//! - [`pass_comparison`]: the same graph with and without its passes (`--compare-passes`);
//! - [`predict`]: a GPU step predicted from a profile's FLOPs, bytes and launches against
//!   datasheets (`wick-prof predict`);
//! - [`torch_import`], [`torch_names`]: a PyTorch profiler trace read as a profile, its
//!   ops named in wick's vocabulary (`wick-prof import-torch`), for a diff against wick.

pub mod comparable;
pub mod diff;
mod diff_text;
pub mod pass_comparison;
pub mod predict;
pub mod torch_import;
pub mod torch_names;

pub use diff::{diff, diff_runs, Diff, DiffOptions, DiffRow, Outcome};
pub use predict::{DeviceSheet, GpuPrediction};
pub use torch_import::{import_torch_trace, ImportError};
