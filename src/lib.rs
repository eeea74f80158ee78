//! # wick
//!
//! A Rust deep-learning mini-framework with a built-in graph profiler, built on candle.
//! This crate re-exports wick's parts:
//!
//! - [`ops`] (`wick-ops`): forward and backward kernels, shapes, FLOPs and kernel names;
//! - [`graph`] (`wick-graph`): the buffered computation graph, executor, hooks and profiler;
//! - [`models`] (`wick-models`): the ResNet family and torchvision-named checkpoints.

pub use candle_core;
pub use wick_graph as graph;
pub use wick_models as models;
pub use wick_ops as ops;

pub mod allocator;
pub use wick_graph::device;
pub mod denormals;

/// The process settings wick's CPU figures are measured under, for a program's first line:
/// freed memory stays mapped (huge pages stay warm, see [`allocator`]) and denormal floats
/// flush to zero (see [`denormals`]).
pub fn prepare_process() {
    allocator::keep_freed_memory();
    denormals::flush_denormals_to_zero();
}
