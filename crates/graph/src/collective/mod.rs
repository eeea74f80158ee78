//! Data-parallel training's collective communication: the [`Communicator`] a graph's
//! gradient all-reduce nodes call (MPI, NCCL, or a single process), and the queue that
//! runs their all-reduces beside the backward pass.
//!
//! Each replica runs the same step on its shard of the batch; after backward, gradients
//! are summed over the replicas and divided by their number, so every replica applies the
//! whole batch's mean gradient (PyTorch DDP's rule). Batch-norm statistics stay per
//! replica, as in DDP without SyncBatchNorm. The engines themselves (MPI, NCCL) implement
//! this trait; wick adds no network layer of its own.

mod communicator;
mod launch_env;
mod queue;
pub use communicator::{Communicator, SingleProcess};
pub use launch_env::LaunchEnv;
pub use queue::{BucketTiming, CommQueue, Pending, DEFAULT_TIMEOUT};

#[cfg(feature = "nccl")]
mod nccl;
#[cfg(feature = "nccl")]
pub use self::nccl::NcclCommunicator;

#[cfg(feature = "mpi")]
mod mpi;
#[cfg(feature = "mpi")]
pub use self::mpi::MpiCommunicator;
