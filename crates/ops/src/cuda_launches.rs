//! How many CUDA kernel launches one node of each kernel makes, on wick's path (its own
//! CUDA kernels where the family has them) and on the generic path (candle's tensor ops,
//! one launch each), counted from the code of each path. `wick-prof predict` prices a
//! profile's launches with these; a kernel's count lives here, beside no name.

use crate::device_kind::DeviceKind;
use crate::kernel::Kernel;

/// Kernel launches of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaLaunches {
    /// With wick's CUDA kernels (crates/ops/cuda) where the family has them.
    pub wick: u32,
    /// With candle's device-generic tensor ops, one launch per tensor op. For a merged
    /// update: per parameter.
    pub generic: u32,
}

/// Every kernel whose launches are known.
const LAUNCHES: &[(Kernel, CudaLaunches)] = &[
    // cuDNN on both paths; the input gradient is candle's transposed convolution.
    (
        Kernel::ConvForward,
        CudaLaunches {
            wick: 1,
            generic: 1,
        },
    ),
    (
        Kernel::ConvBackwardData,
        CudaLaunches {
            wick: 1,
            generic: 1,
        },
    ),
    (
        Kernel::ConvBackwardFilter,
        CudaLaunches {
            wick: 1,
            generic: 1,
        },
    ),
    // Gradient accumulation is an addition.
    (
        Kernel::AccumulateGrad,
        CudaLaunches {
            wick: 1,
            generic: 1,
        },
    ),
    // Statistics, then normalise; the generic path: 19 tensor ops (mean, centre,
    // square, sum, scale, shift, running statistics), 3 more for the ReLU.
    (
        Kernel::BatchNormForwardTraining,
        CudaLaunches {
            wick: 2,
            generic: 19,
        },
    ),
    (
        Kernel::BatchNormReLUForwardTraining,
        CudaLaunches {
            wick: 2,
            generic: 22,
        },
    ),
    (
        Kernel::BatchNormForwardInference,
        CudaLaunches {
            wick: 1,
            generic: 7,
        },
    ),
    // Partial sums, then the input gradient; generic: 12 tensor ops, 3 for the mask.
    (
        Kernel::BatchNormBackward,
        CudaLaunches {
            wick: 2,
            generic: 12,
        },
    ),
    (
        Kernel::BatchNormReLUBackward,
        CudaLaunches {
            wick: 2,
            generic: 15,
        },
    ),
    // le, zeros, where on the generic path.
    (
        Kernel::ReLU,
        CudaLaunches {
            wick: 1,
            generic: 3,
        },
    ),
    (
        Kernel::ReLUBackward,
        CudaLaunches {
            wick: 1,
            generic: 3,
        },
    ),
    (
        Kernel::Add,
        CudaLaunches {
            wick: 1,
            generic: 1,
        },
    ),
    (
        Kernel::AddReLU,
        CudaLaunches {
            wick: 1,
            generic: 4,
        },
    ),
    // Pools: wick's kernels on both paths (plus zeroing the gradient for max).
    (
        Kernel::PoolingForward,
        CudaLaunches {
            wick: 2,
            generic: 2,
        },
    ),
    (
        Kernel::PoolingBackward,
        CudaLaunches {
            wick: 2,
            generic: 2,
        },
    ),
    // Two means (sum and divide each) / divide, broadcast, copy.
    (
        Kernel::GlobalAvgPoolForward,
        CudaLaunches {
            wick: 1,
            generic: 4,
        },
    ),
    (
        Kernel::GlobalAvgPoolBackward,
        CudaLaunches {
            wick: 1,
            generic: 3,
        },
    ),
    // A matrix product and the bias; backward two products and a sum.
    (
        Kernel::LinearForward,
        CudaLaunches {
            wick: 2,
            generic: 2,
        },
    ),
    (
        Kernel::LinearBackward,
        CudaLaunches {
            wick: 3,
            generic: 3,
        },
    ),
    // Rows, mean (and the labels' cast); generic: log-softmax (6), gather, sum, scale.
    (
        Kernel::SoftmaxCrossEntropyForward,
        CudaLaunches {
            wick: 3,
            generic: 10,
        },
    ),
    // Rows again, then the gradient (and two casts); generic: 15 tensor ops.
    (
        Kernel::SoftmaxCrossEntropyBackward,
        CudaLaunches {
            wick: 5,
            generic: 15,
        },
    ),
    // Per parameter: one launch of the multi-tensor kernel; generic: weight decay,
    // momentum (2), update (2), 7 with both.
    (
        Kernel::SgdUpdate,
        CudaLaunches {
            wick: 1,
            generic: 7,
        },
    ),
    // All parameters in one launch; generic: 7 per parameter (see `predict`).
    (
        Kernel::SgdUpdateMultiTensor,
        CudaLaunches {
            wick: 1,
            generic: 7,
        },
    ),
    (
        Kernel::AdamUpdate,
        CudaLaunches {
            wick: 1,
            generic: 12,
        },
    ),
    (
        Kernel::AdamUpdateMultiTensor,
        CudaLaunches {
            wick: 1,
            generic: 12,
        },
    ),
    (
        Kernel::Reshape,
        CudaLaunches {
            wick: 0,
            generic: 0,
        },
    ),
    (
        Kernel::Permute,
        CudaLaunches {
            wick: 0,
            generic: 0,
        },
    ),
    // Autocast's weight casts: candle's dtype conversion, one launch on either path.
    (
        Kernel::Tensor(crate::tensor::TensorKernel::Cast),
        CudaLaunches {
            wick: 1,
            generic: 1,
        },
    ),
];

impl Kernel {
    /// Launches of one node of this kernel on CUDA; `None` where wick has not counted
    /// them (the activations beyond ReLU, custom ops, ...).
    pub fn cuda_launches(self) -> Option<CudaLaunches> {
        LAUNCHES.iter().find(|(k, _)| *k == self).map(|(_, l)| *l)
    }

    /// The kernel among those with known launches whose CPU name is `name` (as a CPU
    /// profile records it).
    pub fn named(name: &str) -> Option<Kernel> {
        LAUNCHES
            .iter()
            .map(|(k, _)| *k)
            .find(|k| k.name(DeviceKind::Cpu) == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kernel_is_counted_once_and_found_by_its_name() {
        for (i, (k, _)) in LAUNCHES.iter().enumerate() {
            assert!(
                LAUNCHES[i + 1..].iter().all(|(other, _)| other != k),
                "{k:?} counted twice"
            );
            assert_eq!(Kernel::named(k.name(DeviceKind::Cpu)), Some(*k));
        }
        assert_eq!(Kernel::named("NoSuchKernel"), None);
        let adam = Kernel::AdamUpdateMultiTensor.cuda_launches().unwrap();
        assert_eq!((adam.wick, adam.generic), (1, 12));
    }
}
