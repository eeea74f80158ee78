//! The optimizers' kernels, one file each: [`sgd`] (SGD with momentum, weight decay and
//! Nesterov, PyTorch's `torch.optim.SGD`), [`adam`] (Adam and AdamW) and [`clip`]
//! (`clip_grad_norm_`). Each updates in place where it can, checks every updated
//! parameter for non-finite values, and has a multi-tensor form that updates every
//! parameter in one call (one launch on CUDA, `cuda.rs`).

pub mod adam;
mod adam_cpu;
pub mod clip;
#[cfg(feature = "cuda")]
mod cuda;
mod params;
pub mod sgd;

pub use adam::{adam_step, adam_step_multi_tensor, AdamMember};
pub use clip::clip_factor;
pub use params::{AdamParams, AdamStepConstants, SgdParams};
pub use sgd::{
    sgd_step, sgd_step_in_place, sgd_step_in_place_checked, sgd_step_multi_tensor_in_place,
    FiniteCheck, SgdMember, SgdUpdated,
};
