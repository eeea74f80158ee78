//! # wick-ops: the kernels of wick
//!
//! Forward and backward kernels for the op set of the ResNet family and its training,
//! written on candle [`Tensor`](candle_core::Tensor)s. Each op family lives in its own
//! module and offers:
//!
//! - a settings type with **output-shape inference** that returns a clear [`OpError`]
//!   (naming the op and the shapes) for invalid shapes or settings, never a panic;
//! - a **forward** kernel and the **backward** kernels its gradients need;
//! - a **FLOP count** and the **kernel name** ([`Kernel`]) that profilers print.
//!
//! On the CPU the heavy kernels (convolution and its two gradients, the pools) are
//! wick's own: im2col + GEMM through the `gemm` crate, split across images on all
//! cores. Every op also has a device-generic path built from candle's tensor ops, so a
//! tensor on another device gets a result or a clear [`OpError::Unsupported`].
//!
//! wick never uses candle's autograd (whose max-pool, upsample and strided non-square
//! convolution gradients are wrong); every gradient here is checked against finite
//! differences and PyTorch fixtures.
//!
//! This crate knows nothing about graphs: `wick-graph` records these kernels as nodes.

pub mod activation;
mod activation_lanes;
pub mod attention;
pub mod batchnorm;
pub mod bf16;
pub mod bias_activation;
pub mod broadcast;
pub mod compare;
pub mod conv;
mod cpu;
pub mod cuda_launches;
pub mod device_kind;
pub mod dropout;
pub mod elementwise;
pub mod error;
pub mod gpu;
pub mod kernel;
pub mod kernel_class;
mod layer_norm_channels_cpu;
mod layer_norm_cpu;
pub mod layout;
pub mod linear;
mod linear_cpu;
mod linear_few_rows;
mod linear_low_precision;
pub mod loss;
pub mod norm;
pub mod numeric;
pub mod optim;
pub mod pool;
pub mod regression_loss;
pub mod relu;
pub mod resample;
pub mod route;
pub mod shape;
mod softmax_cpu;
pub mod tensor;
mod vector_math;

pub use activation::Activation;
pub use batchnorm::{BatchNorm2dParams, BatchNormGrads, BatchNormOutput};
pub use bf16::Products;
pub use broadcast::{BinaryOp, Operand};
pub use compare::{max_abs_diff, max_abs_diff_values, max_rel_diff, max_rel_diff_values};
pub use conv::Conv2dParams;
pub use cuda_launches::CudaLaunches;
pub use device_kind::DeviceKind;
pub use elementwise::add;
pub use error::{OpError, Result};
pub use kernel::{CustomKernel, Kernel, KernelClass, KernelPhase, KernelVariant};
pub use linear::{linear, LinearGrads};
pub use loss::{cross_entropy, cross_entropy_backward};
pub use numeric::{first_non_finite, first_non_finite_of};
pub use optim::AdamParams;
pub use optim::{sgd_step, SgdParams};
pub use pool::{Pool2dParams, PoolKind};
pub use regression_loss::ElementwiseLoss;
pub use relu::{relu, relu_backward};
pub use route::{KernelPath, KernelPathGuard};
