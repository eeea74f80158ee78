//! The classes and phases of kernels: how the profiler groups and advises on each
//! [`Kernel`](crate::Kernel), and which part of a step it serves.

/// What kind of work a kernel does: how the profiler groups and advises on it, and how
/// graph passes find it. Every [`Kernel`](crate::Kernel) has one, by an exhaustive match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelClass {
    /// Convolutions and their gradients (compute-bound GEMMs).
    Convolution,
    /// Fully connected layers (`linear`) and their gradients.
    Linear,
    /// Matrix products of two activations or of an activation and a weight
    /// (`matmul`, Hugging Face's `Conv1D`), and their gradients.
    MatMul,
    /// Fused attention and its gradients: two products per (query, key) pair with a
    /// softmax between them, compute-bound at long sequences.
    Attention,
    /// Batch norm and group norm, their gradients and fusions (a few passes over an
    /// activation).
    Normalization,
    /// Layer norm and RMS norm and their gradients: a row's statistics (a mean and a
    /// variance, or a mean square), then a scale.
    LayerNorm,
    /// Softmax and log-softmax and their gradients: a maximum and a sum per row.
    Softmax,
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

impl KernelClass {
    /// Every class, in the order the profiler lists them when their times tie.
    pub const ALL: [KernelClass; 15] = [
        KernelClass::Convolution,
        KernelClass::Linear,
        KernelClass::MatMul,
        KernelClass::Attention,
        KernelClass::Normalization,
        KernelClass::LayerNorm,
        KernelClass::Softmax,
        KernelClass::Elementwise,
        KernelClass::Pooling,
        KernelClass::Reshape,
        KernelClass::Loss,
        KernelClass::Optimizer,
        KernelClass::Communication,
        KernelClass::Reduction,
        KernelClass::Indexing,
    ];

    /// The name the profiler's views print.
    pub fn name(self) -> &'static str {
        match self {
            KernelClass::Convolution => "convolution",
            KernelClass::Linear => "linear",
            KernelClass::MatMul => "matmul",
            KernelClass::Attention => "attention",
            KernelClass::Normalization => "batch/group norm",
            KernelClass::LayerNorm => "layer norm",
            KernelClass::Softmax => "softmax",
            KernelClass::Elementwise => "element-wise",
            KernelClass::Pooling => "pooling",
            KernelClass::Reshape => "reshape",
            KernelClass::Loss => "loss",
            KernelClass::Optimizer => "optimizer",
            KernelClass::Communication => "communication",
            KernelClass::Reduction => "reduction",
            KernelClass::Indexing => "indexing",
        }
    }
}

/// What sets a node apart from others of its kernel when that changes where its time
/// goes: the profiler's per-type rows, roofline points and advice split a kernel by it
/// (`ConvForward (depthwise)`), while SINGA's per-op lines keep the kernel's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelVariant {
    /// A convolution whose every group is one input channel (MobileNet's 3x3s): little
    /// arithmetic per byte, memory-bound.
    DepthwiseConv,
    /// A grouped convolution with several input channels per group (ResNeXt's).
    GroupedConv,
    /// A dense 1x1 convolution: a plain matrix product over the pixels.
    PointwiseConv,
}

impl KernelVariant {
    /// The label the profiler appends to the kernel's name.
    pub fn label(self) -> &'static str {
        match self {
            KernelVariant::DepthwiseConv => "depthwise",
            KernelVariant::GroupedConv => "grouped",
            KernelVariant::PointwiseConv => "1x1",
        }
    }

    /// `name (label)`: a per-type row's name.
    pub fn type_name(variant: Option<KernelVariant>, name: &str) -> String {
        match variant {
            Some(v) => format!("{name} ({})", v.label()),
            None => name.to_string(),
        }
    }
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
