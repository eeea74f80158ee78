//! # wick-graph: the buffered computation graph
//!
//! A training iteration is recorded once as a graph whose nodes are every op of the step
//! (forward ops, the loss, the backward ops and the optimizer's updates), each with an
//! `OP_ID` (its recording index) and a [`Phase`] set when it is recorded. An [`Executor`]
//! runs the graph many times, freeing each intermediate right after its last use, and
//! calls [`Hook`]s around iterations, phases and ops. wick-profiler's `TimeProfiler` is
//! such a hook: it reproduces Apache SINGA's time-profiling output and goes beyond it.
//!
//! ```no_run
//! use candle_core::{DType, Device};
//! use wick_graph::{Executor, GraphBuilder, Mode};
//! use wick_ops::{Conv2dParams, SgdParams};
//!
//! # fn main() -> wick_graph::Result<()> {
//! let mut b = GraphBuilder::new(Mode::Train, DType::F32);
//! let x = b.input("images", &[8, 3, 32, 32], DType::F32)?;
//! let y = b.input("labels", &[8], DType::U32)?;
//! let w = b.param("conv.weight", &[16, 3, 3, 3])?;
//! let h = b.conv2d(x, w, None, Conv2dParams::new(1, 1))?;
//! let h = b.relu(h)?;
//! let h = b.global_avg_pool(h)?;
//! let h = b.flatten(h)?;
//! let fc = b.param("fc.weight", &[10, 16])?;
//! let logits = b.linear(h, fc, None)?;
//! let loss = b.cross_entropy(logits, y)?;
//! b.output(loss);
//! let grads = b.backward(loss)?;
//! b.sgd(&grads, SgdParams { lr: 0.1, momentum: 0.9, ..Default::default() })?;
//! let mut exec = Executor::new(b.finish(), &Device::Cpu);
//! // exec.set(...) every parameter, feed images and labels, then exec.run()? in a loop;
//! # Ok(()) }
//! ```

pub mod atomic_write;
pub mod autodiff;
pub mod builder;
pub mod collective;
pub mod error;
pub mod executor;
pub mod hooks;
pub mod ir;
pub mod memory_plan;
pub mod nodes;
pub mod param_selector;
pub mod passes;
pub mod phase;
pub mod state_dict;

pub use atomic_write::OutputError;
pub use autodiff::Gradients;
pub use builder::{GraphBuilder, Mode};
pub use error::{GraphError, Result};
pub use executor::Executor;
pub use hooks::{Hook, InputStage, InputStages, LoaderWork, NodeInfo, StepPart};
pub use ir::{arg, args, one, BackwardCtx, Inputs, KernelResult, NewValue, NodeOp, Op};
pub use ir::{Graph, Node, Origin, Phase, Precision, ValueId, ValueInfo, ValueKind};
pub use memory_plan::{MemoryPlan, MemorySplit};
pub use param_selector::ParamSelector;
pub use passes::{PassName, PassRecord, PassSet};
pub use state_dict::{LoadMode, LoadReport};
