//! Recording: the hook and what it reads while the executor runs.
//!
//! - [`recorder`]: [`TimeProfiler`], the hook that marks iterations, phases and ops and
//!   accumulates what a [`Profile`](crate::Profile) reports;
//! - [`timer`]: how time is read (host clock on a CPU, CUDA events on a GPU);
//! - [`slots`]: the timer marks of an iteration, derived from the phases and nodes;
//! - [`step_parts`]: the whole step between iteration starts, input included; the data
//!   loader's stages (`input_pipeline`);
//! - [`memory_probe`], [`thread_times`], [`machine_peaks`]: the memory, contention and
//!   machine-peak probes;
//! - [`gather`]: a data-parallel run's ranks, gathered to rank 0.

pub mod gather;
mod input_pipeline;
pub mod machine_peaks;
pub mod memory_probe;
pub mod recorder;
pub mod slots;
pub mod step_parts;
pub mod thread_times;
pub mod timer;

pub use memory_probe::MemoryCounter;
pub use recorder::TimeProfiler;
pub use slots::{Mark, SlotLayout};
pub use step_parts::WallClock;
pub use timer::{EventSource, EventTimer, HostTimer, Timer};
