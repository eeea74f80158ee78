//! The op families, one file each: the builder methods that record them, the node kinds
//! ([`NodeOp`](crate::NodeOp) implementations) with their backward rules, and how each
//! runs its `wick-ops` kernel.

pub mod activation;
pub mod adaptive_pool;
pub mod add;
pub mod all_reduce;
pub mod arithmetic;
pub mod attention;
pub mod batchnorm;
pub mod conv;
pub mod conv_fused;
pub mod custom;
pub mod dropout;
pub mod fused_train;
pub mod layout;
pub mod linear;
pub mod loss;
pub mod mask;
pub mod matmul;
pub mod nll;
pub mod norm;
pub mod optim;
pub mod pool;
pub mod reduce;
pub mod regression_loss;
pub mod relu;
pub mod resample;
pub mod select;
pub mod sync_batchnorm;
pub mod unary;
