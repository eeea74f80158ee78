//! Which iterations the profiler times: a value of its own, as PyTorch's profiler
//! schedule is.

/// The profiling schedule: the first `skip` iterations are warm-up and run untimed
/// (SINGA's skip count; its default is 5), every later one is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Untimed warm-up iterations at the start.
    pub skip: usize,
}

impl Schedule {
    /// Skips the first `skip` iterations, then times every one.
    pub fn skip(skip: usize) -> Self {
        Schedule { skip }
    }

    /// Whether the iteration that follows `seen` earlier ones is timed.
    pub fn is_timed(&self, seen: usize) -> bool {
        seen >= self.skip
    }
}
