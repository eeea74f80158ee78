//! Profiles side by side, and a profile carried to another machine.
//!
//! - [`diff`](mod@diff): two profiles (or two sets of runs) compared op type by op type, with
//!   bootstrap intervals and a regression verdict (`wick-prof diff`);
//! - `diff_text`: the diff's verdict and text;
//! - [`comparable`]: whether two profiles can be compared, and their machine peaks scaled;
//! - [`pass_comparison`]: the same graph with and without its passes (`--compare-passes`);
//! - [`predict`]: a GPU step predicted from a profile's FLOPs, bytes and launches against
//!   datasheets (`wick-prof predict`).

pub mod comparable;
pub mod diff;
mod diff_text;
pub mod pass_comparison;
pub mod predict;

pub use diff::{diff, diff_runs, Diff, DiffOptions, DiffRow, Outcome};
pub use predict::{DeviceSheet, GpuPrediction};
