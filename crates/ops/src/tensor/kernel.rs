//! The tensor language's kernels as the profiler sees them: name, class and phase.

use super::mask::Comparison;
use super::reduce::Reduction;
use super::unary::UnaryFn;
use crate::kernel_class::{KernelClass, KernelPhase};

/// A kernel of the tensor language ([`Kernel::Tensor`](crate::Kernel::Tensor)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TensorKernel {
    /// `matmul` forward.
    MatMul,
    /// `matmul`'s two gradients.
    MatMulBackward,
    /// An element-wise function of one tensor.
    Unary(UnaryFn),
    /// Its gradient.
    UnaryBackward(UnaryFn),
    /// A reduction over dimensions.
    Reduce(Reduction),
    /// Its gradient, broadcast back over the reduced dimensions.
    ReduceBackward(Reduction),
    /// `narrow` (a range along one dimension, copied).
    Narrow,
    /// `narrow`'s gradient: the output gradient placed in zeros.
    NarrowBackward,
    /// `split`/`chunk`: every piece along one dimension, copied, in one node.
    Split,
    /// `split`'s gradient: the pieces' gradients joined (zeros for a piece with none).
    SplitBackward,
    /// `expand`: broadcast to a larger shape.
    Expand,
    /// `expand`'s gradient: the sum over the expanded dimensions.
    ExpandBackward,
    /// `index_select` forward.
    IndexSelect,
    /// `index_select`'s gradient (an index-add).
    IndexSelectBackward,
    /// `gather` forward.
    Gather,
    /// `gather`'s gradient (a scatter-add).
    GatherBackward,
    /// `embedding` forward: rows of the weight.
    Embedding,
    /// `embedding`'s weight gradient (a scatter-add of rows).
    EmbeddingBackward,
    /// An element-wise comparison, giving a mask.
    Compare(Comparison),
    /// `where(cond, a, b)`.
    Where,
    /// `where`'s gradient to one of its two operands.
    WhereBackward,
    /// `masked_fill`.
    MaskedFill,
    /// `masked_fill`'s gradient.
    MaskedFillBackward,
    /// A conversion between float dtypes (`x.to(dtype)`; autocast's casts).
    Cast,
    /// A cast's gradient, converted back to the input's dtype.
    CastBackward,
    /// `detach`: the same values, no gradient.
    Detach,
    /// `log_softmax` forward.
    LogSoftmaxForward,
    /// `log_softmax` backward.
    LogSoftmaxBackward,
    /// `nll_loss` forward (`cross_entropy` beyond `[N, C]` is `log_softmax` then this).
    NllLossForward,
    /// `nll_loss` backward.
    NllLossBackward,
}

impl TensorKernel {
    /// How the profiler groups it.
    pub fn class(self) -> KernelClass {
        use KernelClass as C;
        use TensorKernel::*;
        match self {
            MatMul | MatMulBackward => C::MatMul,
            Unary(_) | UnaryBackward(_) | Compare(_) | Where | WhereBackward | MaskedFill
            | MaskedFillBackward => C::Elementwise,
            Reduce(_) | ReduceBackward(_) | ExpandBackward => C::Reduction,
            Narrow | NarrowBackward | Expand | Split | SplitBackward => C::Indexing,
            IndexSelect | IndexSelectBackward | Gather | GatherBackward => C::Indexing,
            Embedding | EmbeddingBackward => C::Indexing,
            Detach => C::Reshape,
            Cast | CastBackward => C::Elementwise,
            LogSoftmaxForward | LogSoftmaxBackward => C::Softmax,
            NllLossForward | NllLossBackward => C::Loss,
        }
    }

    /// The part of the step it serves; `None` for ops that serve both passes alike.
    pub fn phase(self) -> Option<KernelPhase> {
        use TensorKernel::*;
        Some(match self {
            MatMul | Unary(_) | Reduce(_) | Narrow | Split | Expand | IndexSelect | Gather => {
                KernelPhase::Forward
            }
            Embedding | Compare(_) | Where | MaskedFill | LogSoftmaxForward | NllLossForward => {
                KernelPhase::Forward
            }
            MatMulBackward | UnaryBackward(_) | ReduceBackward(_) | NarrowBackward
            | SplitBackward => KernelPhase::Backward,
            ExpandBackward | IndexSelectBackward | GatherBackward | EmbeddingBackward => {
                KernelPhase::Backward
            }
            WhereBackward | MaskedFillBackward | LogSoftmaxBackward | NllLossBackward => {
                KernelPhase::Backward
            }
            Cast => KernelPhase::Forward,
            CastBackward => KernelPhase::Backward,
            Detach => return None,
        })
    }

    /// The name profilers print.
    pub fn name(self) -> &'static str {
        use TensorKernel::*;
        match self {
            MatMul => "MatMulForward",
            MatMulBackward => "MatMulBackward",
            Unary(f) => f.name(),
            UnaryBackward(f) => f.backward_name(),
            Reduce(r) => r.name(),
            ReduceBackward(r) => r.backward_name(),
            Narrow => "Narrow",
            NarrowBackward => "NarrowBackward",
            Split => "Split",
            SplitBackward => "SplitBackward",
            Expand => "Expand",
            ExpandBackward => "ExpandBackward",
            IndexSelect => "IndexSelect",
            IndexSelectBackward => "IndexSelectBackward",
            Gather => "Gather",
            GatherBackward => "GatherBackward",
            Embedding => "EmbeddingForward",
            EmbeddingBackward => "EmbeddingBackward",
            Compare(c) => c.name(),
            Where => "Where",
            WhereBackward => "WhereBackward",
            MaskedFill => "MaskedFill",
            MaskedFillBackward => "MaskedFillBackward",
            Detach => "Detach",
            Cast => "Cast",
            CastBackward => "CastBackward",
            LogSoftmaxForward => "LogSoftmaxForward",
            LogSoftmaxBackward => "LogSoftmaxBackward",
            NllLossForward => "NllLossForward",
            NllLossBackward => "NllLossBackward",
        }
    }
}
