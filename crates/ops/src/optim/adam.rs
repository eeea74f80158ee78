//! Adam and AdamW with PyTorch's `torch.optim.Adam`/`AdamW` update rules (single-tensor
//! path, no amsgrad): one fused update per parameter, and global-norm gradient clipping
//! (`torch.nn.utils.clip_grad_norm_`).

use candle_core::Tensor;

use super::adam_cpu;
use super::params::AdamParams;
use crate::cpu::{self, dispatch_float};
use crate::error::{CandleContext, OpError, Result};

const OP: &str = "adam";

/// One Adam step of `param` with gradient `grad`; `step` is the 1-based step number (for
/// the bias corrections). `exp_avg` and `exp_avg_sq` are the moments from the previous
/// step (`None` before the first, when they are zero). Returns the new parameter and moments.
pub fn adam_step(
    param: &Tensor,
    grad: &Tensor,
    exp_avg: Option<&Tensor>,
    exp_avg_sq: Option<&Tensor>,
    step: u64,
    p: &AdamParams,
) -> Result<(Tensor, Tensor, Tensor)> {
    p.validate()?;
    crate::shape::same(OP, "gradient", grad.dims(), "parameter", param.dims())?;
    for (what, t) in [("exp_avg", exp_avg), ("exp_avg_sq", exp_avg_sq)] {
        if let Some(t) = t {
            crate::shape::same(OP, what, t.dims(), "parameter", param.dims())?;
        }
    }
    if step == 0 {
        return Err(OpError::invalid(OP, "the step number is 1-based, got 0"));
    }
    #[cfg(feature = "cuda")]
    if let Some(mut one) = adam_cuda(&[(param, grad, exp_avg, exp_avg_sq)], step, p)? {
        return Ok(one.remove(0));
    }
    let operands = [Some(param), Some(grad), exp_avg, exp_avg_sq];
    if operands
        .iter()
        .flatten()
        .all(|t| cpu::on_cpu_kernel(t) && t.dtype() == param.dtype())
    {
        let members = (param, grad, exp_avg, exp_avg_sq);
        return dispatch_float!(OP, param.dtype(), adam_cpu::step(members, step, p));
    }
    let mut param = param.clone();
    let mut grad = grad.clone();
    if p.weight_decay != 0.0 {
        if p.decoupled {
            param = (&param * (1.0 - p.lr * p.weight_decay)).ctx(OP)?;
        } else {
            grad = (&grad + (&param * p.weight_decay).ctx(OP)?).ctx(OP)?;
        }
    }
    let zeros = || param.zeros_like().ctx(OP);
    let m = match exp_avg {
        Some(m) => m.clone(),
        None => zeros()?,
    };
    let v = match exp_avg_sq {
        Some(v) => v.clone(),
        None => zeros()?,
    };
    // exp_avg.lerp_(grad, 1 - beta1): `m + w·(g - m)` for a weight below 1/2.
    let m = (&m + ((&grad - &m).ctx(OP)? * (1.0 - p.beta1)).ctx(OP)?).ctx(OP)?;
    // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2).
    let v = ((&v * p.beta2).ctx(OP)? + ((&grad * (1.0 - p.beta2)).ctx(OP)? * &grad).ctx(OP)?)
        .ctx(OP)?;
    let t = step as f64;
    let bias_correction1 = 1.0 - p.beta1.powf(t);
    let bias_correction2 = 1.0 - p.beta2.powf(t);
    let step_size = p.lr / bias_correction1;
    let denom = ((v.sqrt().ctx(OP)? / bias_correction2.sqrt()).ctx(OP)? + p.eps).ctx(OP)?;
    let update = ((&m / &denom).ctx(OP)? * step_size).ctx(OP)?;
    let param = (param - update).ctx(OP)?;
    Ok((param, m, v))
}

/// One Adam update's operands: the parameter, its gradient and its two moments (`None`
/// before the first step).
pub type AdamMember<'a> = (
    &'a Tensor,
    &'a Tensor,
    Option<&'a Tensor>,
    Option<&'a Tensor>,
);

/// [`adam_step`] on many parameters with the same settings and step number. On CUDA, when
/// every parameter is a tensor of one dtype (f32, f64, bf16 or f16), it is **one launch for all of
/// them**; elsewhere one update after another.
pub fn adam_step_multi_tensor(
    members: &[AdamMember<'_>],
    step: u64,
    p: &AdamParams,
) -> Result<Vec<(Tensor, Tensor, Tensor)>> {
    #[cfg(feature = "cuda")]
    if let Some(out) = adam_cuda(members, step, p)? {
        return Ok(out);
    }
    members
        .iter()
        .map(|&(w, g, m, v)| adam_step(w, g, m, v, step, p))
        .collect()
}

/// The multi-tensor kernel on copies of `members` (one launch), or `None` when they do
/// not qualify. New tensors, as on every path.
#[cfg(feature = "cuda")]
fn adam_cuda(
    members: &[AdamMember<'_>],
    step: u64,
    p: &AdamParams,
) -> Result<Option<Vec<(Tensor, Tensor, Tensor)>>> {
    let Some(&(first, ..)) = members.first() else {
        return Ok(Some(Vec::new()));
    };
    let qualifies = members.iter().all(|&(w, ..)| {
        crate::route::route(w.device()) == crate::route::Route::Cuda
            && w.dtype() == first.dtype()
            && crate::gpu::cuda::has_kernel_with_16_bit(w.dtype())
    });
    if !qualifies {
        return Ok(None);
    }
    p.validate()?;
    let mut out = Vec::with_capacity(members.len());
    for &(w, g, m, v) in members {
        crate::shape::same(OP, "gradient", g.dims(), "parameter", w.dims())?;
        let fresh = |t: Option<&Tensor>| match t {
            Some(t) => {
                crate::shape::same(OP, "moment", t.dims(), "parameter", w.dims())?;
                t.contiguous().ctx(OP)?.copy().ctx(OP)
            }
            None => w.zeros_like().ctx(OP),
        };
        out.push((fresh(Some(w))?, fresh(m)?, fresh(v)?));
    }
    let refs = |f: fn(&(Tensor, Tensor, Tensor)) -> &Tensor| out.iter().map(f).collect::<Vec<_>>();
    let (ws, ms, vs) = (refs(|t| &t.0), refs(|t| &t.1), refs(|t| &t.2));
    let grads: Vec<&Tensor> = members.iter().map(|m| m.1).collect();
    super::cuda::adam_multi_tensor(OP, &ws, &grads, [&ms, &vs], step, p)?;
    Ok(Some(out))
}
