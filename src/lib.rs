//! # wick
//!
//! A Rust deep-learning mini-framework with a built-in graph profiler, built on candle.
//! This crate re-exports wick's parts:
//!
//! - [`ops`] (`wick-ops`): forward and backward kernels, shapes, FLOPs and kernel names;
//! - [`graph`] (`wick-graph`): the buffered computation graph, passes, executor and hooks;
//! - [`profiler`] (`wick-profiler`): the time profiler, a hook on the executor, its views
//!   and its comparisons;
//! - [`models`] (`wick-models`): the ResNet family and torchvision-named checkpoints.

pub use candle_core;
pub use wick_graph as graph;
pub use wick_models as models;
pub use wick_ops as ops;
pub use wick_profiler as profiler;

/// The README's Rust blocks, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub mod allocator;
pub mod denormals;
pub mod device;
pub mod file_roles;

/// The process settings wick's CPU figures are measured under, for a program's first line:
/// freed memory stays mapped (huge pages stay warm, see [`allocator`]) and denormal floats
/// flush to zero (see [`denormals`]).
pub fn prepare_process() {
    allocator::keep_freed_memory();
    denormals::flush_denormals_to_zero();
}

/// An error and its causes as one line for a user: `outer: cause: root cause`, skipping a
/// cause whose text the line already holds (many errors quote their source). The
/// examples and `wick-prof` print errors this way, without a backtrace.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = String::new();
    let mut next = Some(error);
    while let Some(e) = next {
        let text = e.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        next = e.source();
    }
    line
}

#[cfg(test)]
mod tests {
    #[test]
    fn error_chain_prints_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let quoted = wick_models::ModelError::Io {
            path: "w.safetensors".into(),
            source: io,
        };
        // The model error's text already quotes its source: the OS message appears once.
        let line = super::error_chain(&quoted);
        assert_eq!(line, "w.safetensors: no such file");
        let wrapped = std::io::Error::other(quoted);
        assert_eq!(super::error_chain(&wrapped), "w.safetensors: no such file");
    }
}
