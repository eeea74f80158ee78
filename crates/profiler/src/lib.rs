//! # wick-profiler: the time profiler
//!
//! A [`Hook`](wick_graph::Hook) on wick-graph's executor that reproduces Apache SINGA's
//! time-profiling output byte for byte and goes beyond it: where a step goes, why, and
//! what to do. Recording is kept apart from the result and its views, as in PyTorch's
//! profiler (`profiler.py` records; `key_averages` and its formats are separate):
//!
//! - [`record`]: the hook ([`TimeProfiler`]), the timers, the slots of an iteration, the
//!   machine-peak, memory and contention probes, and the gathering of data-parallel ranks.
//!   Only this part touches the executor.
//! - [`profile`]: the result, [`Profile`], plain numbers: its JSON, per-iteration samples,
//!   validation, and the value types it records ([`Schedule`], [`MachinePeaks`], ...).
//! - [`views`]: every way a profile is shown: SINGA's text and wick's report around it
//!   ([`views::REPORT`], the sections in order), the tables, layers, step, memory,
//!   roofline, advice, cycles, the Chrome trace and the HTML report.
//! - [`compare`]: two profiles side by side (diff, comparability, passes) and a GPU step
//!   predicted from a profile.
//!
//! The modules depend one way: `record` → `profile`; `compare` → `profile`; `views` →
//! `compare` (the HTML report shows a diff), `profile`. `wick-prof` uses `profile`,
//! `views` and `compare` only.
//!
//! ```no_run
//! use candle_core::{DType, Device};
//! use wick_graph::{Executor, GraphBuilder, Mode};
//! use wick_profiler::TimeProfiler;
//!
//! # fn main() -> wick_graph::Result<()> {
//! let mut b = GraphBuilder::new(Mode::Train, DType::F32);
//! let x = b.input("x", &[8, 16], DType::F32)?;
//! let w = b.param("fc.weight", &[4, 16])?;
//! let y = b.linear(x, w, None)?;
//! b.output(y);
//! let mut exec = Executor::new(b.finish(), &Device::Cpu);
//! exec.add_hook(TimeProfiler::new(2, 5))?;
//! // exec.set(...) the weight, feed x, then exec.run()? in a loop; finally:
//! exec.hook::<TimeProfiler>().unwrap().print();
//! # Ok(()) }
//! ```

pub mod compare;
pub mod profile;
pub mod record;
pub mod views;

pub use compare::{
    diff, diff_runs, DeviceSheet, Diff, DiffOptions, DiffRow, GpuPrediction, Outcome,
};
pub use profile::{
    Bound, BucketProfile, CpuContention, DistProfile, InputVerdict, LayerLevel, LayerRow,
    MachinePeaks, MemoryCategory, MemoryProfile, OpMemory, OpProfile, OpTypeRow, PhaseProfile,
    Profile, RankProfile, RecordLevel, RoofDistance, RooflineRow, RunInfo, Samples, Schedule,
    StepProfile, SCHEMA,
};
pub use record::{
    EventSource, EventTimer, HostTimer, Mark, MemoryCounter, SlotLayout, TimeProfiler, Timer,
    WallClock,
};
pub use views::{CycleRow, Recommendation};
