//! The classes and phases of kernels: how the profiler groups and advises on each
//! [`Kernel`](crate::Kernel), and which part of a step it serves.

/// What kind of work a kernel does: how the profiler groups and advises on it, and how
/// graph passes find it. Every [`Kernel`](crate::Kernel) has one, by an exhaustive match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelClass {
    /// Convolutions and their gradients (compute-bound GEMMs).
    Convolution,
    /// Fully connected layers, matrix products, and their gradients.
    Linear,
    /// Fused attention and its gradients: two products per (query, key) pair with a
    /// softmax between them, compute-bound at long sequences.
    Attention,
    /// Batch norm, its gradients and its fusions (a few passes over an activation).
    Normalization,
    /// One pass over the data per element, no reduction: activations, additions and
    /// their gradients (memory-bound; candidates for fusion).
    Elementwise,
    /// Pooling, global average pooling and upsampling, forward and backward.
    Pooling,
    /// A view change: no data moves.
    Reshape,
    /// A loss and its gradient.
    Loss,
    /// An optimizer's parameter update.
    Optimizer,
    /// Talks to the other data-parallel ranks.
    Communication,
    /// Reduces over dimensions: sums, means, maxima, log-sum-exp, variance, and the
    /// broadcasts of their gradients (memory-bound).
    Reduction,
    /// Moves data by index or range: slices, expansions, embedding lookups, gathers and
    /// their scatter-add gradients (memory-bound).
    Indexing,
}

/// Which part of a training step a kernel serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelPhase {
    /// The forward pass (the loss included).
    Forward,
    /// The backward pass: gradients, their sums and their all-reduce.
    Backward,
    /// The optimizer's parameter updates.
    Optimizer,
}
