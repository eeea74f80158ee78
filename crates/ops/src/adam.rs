//! Adam and AdamW with PyTorch's `torch.optim.Adam`/`AdamW` update rules (single-tensor
//! path, no amsgrad): one fused update per parameter, and global-norm gradient clipping
//! (`torch.nn.utils.clip_grad_norm_`).

use candle_core::{DType, Tensor};

use crate::error::{CandleContext, OpError, Result};

const OP: &str = "adam";

/// The settings of Adam and AdamW.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamParams {
    /// Learning rate.
    pub lr: f64,
    /// Decay of the first moment's running average.
    pub beta1: f64,
    /// Decay of the second moment's running average.
    pub beta2: f64,
    /// Added to the denominator.
    pub eps: f64,
    /// Weight decay: an L2 penalty added to the gradient (Adam), or decoupled (AdamW:
    /// `p *= 1 - lr · weight_decay` before the update).
    pub weight_decay: f64,
    /// AdamW's decoupled weight decay.
    pub decoupled: bool,
}

impl AdamParams {
    /// `torch.optim.Adam`'s defaults at learning rate `lr` (betas 0.9, 0.999, eps 1e-8,
    /// no weight decay).
    pub fn adam(lr: f64) -> Self {
        AdamParams {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            decoupled: false,
        }
    }

    /// `torch.optim.AdamW`'s defaults at learning rate `lr` (weight decay 0.01).
    pub fn adamw(lr: f64) -> Self {
        AdamParams {
            weight_decay: 0.01,
            decoupled: true,
            ..Self::adam(lr)
        }
    }

    /// Checks the settings as PyTorch does.
    pub fn validate(&self) -> Result<()> {
        let ok = |v: f64| v.is_finite() && v >= 0.0;
        let beta = |b: f64| (0.0..1.0).contains(&b);
        if !ok(self.lr)
            || !ok(self.eps)
            || !ok(self.weight_decay)
            || !beta(self.beta1)
            || !beta(self.beta2)
        {
            return Err(OpError::invalid(
                OP,
                format!(
                    "lr, eps and weight decay must be non-negative and betas in [0, 1), got lr {}, betas ({}, {}), eps {}, weight decay {}",
                    self.lr, self.beta1, self.beta2, self.eps, self.weight_decay
                ),
            ));
        }
        Ok(())
    }

    /// FLOPs of one update of a parameter with `n` elements.
    pub fn flops(&self, n: usize) -> u64 {
        crate::shape::flop_count(12, &[n])
    }
}

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
/// every parameter is an f32 or f64 tensor of one dtype, it is **one launch for all of
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
        crate::kernel::route(w.device()) == crate::kernel::Route::Cuda
            && w.dtype() == first.dtype()
            && matches!(w.dtype(), DType::F32 | DType::F64)
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
    crate::gpu::optimizer::adam_multi_tensor(OP, &ws, &grads, [&ms, &vs], step, p)?;
    Ok(Some(out))
}

/// The factor `clip_grad_norm_` multiplies every gradient by: `min(1, max_norm / (‖g‖ + 1e-6))`
/// with `‖g‖` the L2 norm of all the gradients together (accumulated in f64). Returns the
/// total norm and the factor.
pub fn clip_factor(grads: &[&Tensor], max_norm: f64) -> Result<(f64, f64)> {
    const CLIP: &str = "clip_grad_norm";
    if !(max_norm.is_finite() && max_norm > 0.0) {
        return Err(OpError::invalid(
            CLIP,
            format!("max_norm must be positive, got {max_norm}"),
        ));
    }
    let mut sum = 0.0f64;
    for g in grads {
        let sq = g
            .to_dtype(DType::F64)
            .ctx(CLIP)?
            .sqr()
            .ctx(CLIP)?
            .sum_all()
            .ctx(CLIP)?
            .to_scalar::<f64>()
            .ctx(CLIP)?;
        sum += sq;
    }
    let total = sum.sqrt();
    let coef = (max_norm / (total + 1e-6)).min(1.0);
    Ok((total, coef))
}
