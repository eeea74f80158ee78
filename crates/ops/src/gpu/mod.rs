//! wick's own CUDA kernels for the memory-bound op families, and how they are launched.
//!
//! The kernels are CUDA C, one file per family in `crates/ops/cuda/`: batch norm
//! (training forward with the fused-ReLU variant, backward with the fused ReLU mask,
//! inference forward), the element-wise activations and the residual add, global average
//! pooling, softmax cross-entropy, and the optimizer update as one launch for all
//! parameters (SGD with momentum and weight decay, Adam and AdamW).
//!
//! - [`Launch`] computes every launch configuration. It is plain Rust, compiled on every
//!   machine, so the same grid and block arithmetic runs on a GPU and in the tests.
//! - With the `cuda` feature, the families' CUDA route runs these kernels (compiled with
//!   NVRTC once per device, then cached). Each family keeps its CUDA entry points beside
//!   its CPU kernels (`batchnorm/cuda.rs`, `pool/cuda.rs`, `loss/cuda.rs`,
//!   `optim/cuda.rs`); `cuda.rs` launches them, and `elementwise` holds the element-wise
//!   kernels that the activations and the residual add share.
//! - With the `emulate` feature (wick-ops' own tests), `build.rs` compiles the same
//!   source for the host with a CPU emulation of the grid (`cuda/emulator`), and
//!   `gpu::emulated` holds the generated entry points: the tests named `emulated_*` run every
//!   kernel against wick's CPU kernels with no GPU and no CUDA installed.
//! - [`Workspace`] is the kernels' scratch memory: the executor allocates it once, at the
//!   size its memory plan gives ([`WorkspaceLayout`] per kernel call), and lends it to
//!   every kernel of a step, so a step allocates no scratch.

pub(crate) mod launch;
pub(crate) mod workspace;

pub use launch::{ChunkTable, Launch, BLOCK, CHUNK_LEN};
pub use workspace::{
    batch_norm_workspace_bytes, multi_tensor_workspace_bytes, Workspace, WorkspaceLayout,
    WORKSPACE_ALIGN,
};

#[cfg(feature = "cuda")]
pub(crate) mod cuda;
#[cfg(feature = "cuda")]
pub(crate) mod elementwise;

#[cfg(feature = "emulate")]
pub mod emulated;
