//! The op families, one file each: the builder methods that record them, the node kinds
//! ([`NodeOp`](crate::NodeOp) implementations) with their backward rules, and how each
//! runs its `wick-ops` kernel.

pub mod all_reduce;
pub mod batchnorm;
pub mod conv;
pub mod conv_fused;
pub mod elementwise;
pub mod fused_train;
pub mod linear;
pub mod loss;
pub mod optim;
pub mod pool;
pub mod sync_batchnorm;
