//! Softmax, layer norm (over the last dimension, or over the channels of `[N, C, ...]` as
//! ConvNeXt's `LayerNorm2d`), RMS norm (over the last dimension) and group norm, forward
//! and backward, on candle's tensor ops; softmax, both layer norms and RMS norm on the CPU
//! by their own kernels (`softmax_cpu`, `layer_norm_cpu`, `layer_norm_channels_cpu`).
//! Statistics are recomputed from the input in backward instead of being kept from
//! forward: one more pass over the input, and one less tensor alive between the passes.

use candle_core::{DType, Tensor, D};

use crate::error::{CandleContext, OpError, Result};
use crate::layer_norm_cpu::RowNorm;
use crate::softmax_cpu::SoftmaxKind;

const SOFTMAX: &str = "softmax";
const LAYER_NORM: &str = "layer_norm";
const LAYER_NORM_2D: &str = "layer_norm2d";
const RMS_NORM: &str = "rms_norm";
const GROUP_NORM: &str = "group_norm";

/// Checks that `dim` is a dimension of `shape`.
pub fn check_dim(op: &'static str, shape: &[usize], dim: usize) -> Result<()> {
    if dim >= shape.len() {
        return Err(crate::invalid!(
            op,
            "dimension {dim} is out of range for shape {shape:?}"
        ));
    }
    Ok(())
}

/// Softmax of `x` along `dim`.
pub fn softmax(x: &Tensor, dim: usize) -> Result<Tensor> {
    check_dim(SOFTMAX, x.dims(), dim)?;
    if crate::cpu::on_cpu_kernel(x) {
        return crate::softmax_cpu::forward_on_cpu(x, dim, SoftmaxKind::Softmax);
    }
    let shifted = x
        .broadcast_sub(&x.max_keepdim(dim).ctx(SOFTMAX)?)
        .ctx(SOFTMAX)?;
    let e = shifted.exp().ctx(SOFTMAX)?;
    e.broadcast_div(&e.sum_keepdim(dim).ctx(SOFTMAX)?)
        .ctx(SOFTMAX)
}

/// Softmax's input gradient from its output `y`: `y · (g - Σ g·y)` along `dim`.
pub fn softmax_backward(grad_y: &Tensor, y: &Tensor, dim: usize) -> Result<Tensor> {
    crate::shape::same(
        SOFTMAX,
        "output gradient",
        grad_y.dims(),
        "output",
        y.dims(),
    )?;
    check_dim(SOFTMAX, y.dims(), dim)?;
    if crate::cpu::on_cpu_kernel(y) {
        return crate::softmax_cpu::backward_on_cpu(grad_y, y, dim, SoftmaxKind::Softmax);
    }
    let dot = (grad_y * y).ctx(SOFTMAX)?.sum_keepdim(dim).ctx(SOFTMAX)?;
    (y * grad_y.broadcast_sub(&dot).ctx(SOFTMAX)?).ctx(SOFTMAX)
}

/// `(x̂, 1/σ)` of the rows of `x` (normalised along its last dimension) by `norm`'s
/// statistics: centred on the row's mean for layer norm, on 0 for RMS norm.
fn normalize_rows(
    norm: RowNorm,
    op: &'static str,
    x: &Tensor,
    eps: f64,
) -> Result<(Tensor, Tensor)> {
    let centred = match norm {
        RowNorm::Layer => x
            .broadcast_sub(&x.mean_keepdim(D::Minus1).ctx(op)?)
            .ctx(op)?,
        RowNorm::Rms => x.clone(),
    };
    let var = centred.sqr().ctx(op)?.mean_keepdim(D::Minus1).ctx(op)?;
    let rstd = (var + eps).ctx(op)?.sqrt().ctx(op)?.recip().ctx(op)?;
    Ok((centred.broadcast_mul(&rstd).ctx(op)?, rstd))
}

/// The gradient through the row normalisation, from `g` = dL/dx̂:
/// `(g - mean(g) - x̂·mean(g·x̂)) / σ` per row for layer norm, without the `mean(g)` term
/// for RMS norm (whose statistics do not depend on a mean).
fn normalize_rows_backward(
    norm: RowNorm,
    op: &'static str,
    g: &Tensor,
    (xhat, rstd): (&Tensor, &Tensor),
) -> Result<Tensor> {
    let centred = match norm {
        RowNorm::Layer => g
            .broadcast_sub(&g.mean_keepdim(D::Minus1).ctx(op)?)
            .ctx(op)?,
        RowNorm::Rms => g.clone(),
    };
    let mean_gx = (g * xhat).ctx(op)?.mean_keepdim(D::Minus1).ctx(op)?;
    let inner = centred
        .sub(&xhat.broadcast_mul(&mean_gx).ctx(op)?)
        .ctx(op)?;
    inner.broadcast_mul(rstd).ctx(op)
}

/// Checks a layer norm's affine parameters against the input's last dimension.
pub fn check_layer_norm(
    x: &[usize],
    weight: Option<&[usize]>,
    bias: Option<&[usize]>,
) -> Result<()> {
    check_last_dim(LAYER_NORM, x, [weight, bias])
}

/// Checks a norm over the last dimension: `x` has one, and its weight and bias match it.
fn check_last_dim(
    op: &'static str,
    x: &[usize],
    [weight, bias]: [Option<&[usize]>; 2],
) -> Result<()> {
    let Some(&d) = x.last() else {
        return Err(OpError::invalid(op, "the input is 0-dimensional"));
    };
    for (what, s) in [("weight", weight), ("bias", bias)] {
        if let Some(s) = s {
            crate::shape::same(op, what, s, "the input's last dimension", &[d])?;
        }
    }
    Ok(())
}

/// Layer norm over the last dimension, with an optional affine `weight` and `bias`.
pub fn layer_norm(
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    check_layer_norm(x.dims(), weight.map(|w| w.dims()), bias.map(|b| b.dims()))?;
    row_norm(RowNorm::Layer, x, [weight, bias], eps)
}

/// A norm over the last dimension (layer or RMS), its shapes checked by the caller: on
/// its CPU kernel when `x` runs on one (the dtypes checked there), else on candle's ops.
fn row_norm(
    norm: RowNorm,
    x: &Tensor,
    weight_bias: [Option<&Tensor>; 2],
    eps: f64,
) -> Result<Tensor> {
    let op = norm.op();
    let [weight, bias] = weight_bias;
    let kernel = || {
        use crate::layer_norm_cpu::forward;
        crate::cpu::dispatch_float!(op, x.dtype(), forward(norm, x, (weight, bias), eps))
    };
    if let Some(y) = cpu_forward(op, x, weight_bias, kernel) {
        return y;
    }
    let (xhat, _) = normalize_rows(norm, op, x, eps)?;
    affine(op, xhat, weight, bias)
}

/// A norm's forward on its CPU kernel, when `x` runs on one: the affine parameters'
/// dtypes checked, then `kernel`. `None` for the generic path.
fn cpu_forward(
    op: &'static str,
    x: &Tensor,
    [weight, bias]: [Option<&Tensor>; 2],
    kernel: impl FnOnce() -> Result<Tensor>,
) -> Option<Result<Tensor>> {
    crate::cpu::on_cpu_kernel(x).then(|| {
        crate::cpu::same_dtype(op, x.dtype(), &affine_params(weight, bias))?;
        kernel()
    })
}

/// A norm's gradients on its CPU kernel, when `x` runs on one: the dtypes checked, then
/// `kernel`'s input, weight and bias gradients, as many as the norm has. `None` for the
/// generic path.
fn cpu_backward(
    op: &'static str,
    (grad_y, x): (&Tensor, &Tensor),
    (weight, has_bias): (Option<&Tensor>, bool),
    kernel: impl FnOnce() -> Result<(Tensor, Tensor, Tensor)>,
) -> Option<Result<NormGrads>> {
    crate::cpu::on_cpu_kernel(x).then(|| {
        check_backward_dtypes(op, grad_y, x, weight)?;
        Ok(NormGrads::of_kernel(kernel()?, weight.is_some(), has_bias))
    })
}

/// The affine parameters given, named, for dtype checks.
fn affine_params<'a>(
    weight: Option<&'a Tensor>,
    bias: Option<&'a Tensor>,
) -> Vec<(&'static str, &'a Tensor)> {
    let mut v = Vec::new();
    if let Some(w) = weight {
        v.push(("weight", w));
    }
    if let Some(b) = bias {
        v.push(("bias", b));
    }
    v
}

fn affine(
    op: &'static str,
    xhat: Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
) -> Result<Tensor> {
    let y = match weight {
        Some(w) => xhat.broadcast_mul(w).ctx(op)?,
        None => xhat,
    };
    match bias {
        Some(b) => y.broadcast_add(b).ctx(op),
        None => Ok(y),
    }
}

/// A normalisation's gradients: input, weight and bias.
#[derive(Debug, Clone)]
pub struct NormGrads {
    /// dL/dx.
    pub input: Tensor,
    /// dL/dweight (when the norm has a weight).
    pub weight: Option<Tensor>,
    /// dL/dbias (when the norm has a bias).
    pub bias: Option<Tensor>,
}

impl NormGrads {
    /// A CPU kernel's `(input, Σ g·x̂, Σ g)` as the gradients the norm has.
    fn of_kernel((input, dw, db): (Tensor, Tensor, Tensor), weight: bool, bias: bool) -> Self {
        NormGrads {
            input,
            weight: weight.then_some(dw),
            bias: bias.then_some(db),
        }
    }
}

/// Checks that a norm's backward operands share the input's dtype, naming the operand.
fn check_backward_dtypes(
    op: &'static str,
    grad_y: &Tensor,
    x: &Tensor,
    weight: Option<&Tensor>,
) -> Result<()> {
    let mut operands = affine_params(weight, None);
    operands.push(("output gradient", grad_y));
    crate::cpu::same_dtype(op, x.dtype(), &operands)
}

/// Layer norm's gradients, recomputing the statistics from `x`.
pub fn layer_norm_backward(
    grad_y: &Tensor,
    x: &Tensor,
    weight: Option<&Tensor>,
    has_bias: bool,
    eps: f64,
) -> Result<NormGrads> {
    row_norm_backward(RowNorm::Layer, (grad_y, x), (weight, has_bias), eps)
}

/// The gradients of a norm over the last dimension (layer or RMS), recomputing the
/// statistics from `x`.
fn row_norm_backward(
    norm: RowNorm,
    (grad_y, x): (&Tensor, &Tensor),
    (weight, has_bias): (Option<&Tensor>, bool),
    eps: f64,
) -> Result<NormGrads> {
    let op = norm.op();
    crate::shape::same(op, "output gradient", grad_y.dims(), "input", x.dims())?;
    let kernel = || {
        use crate::layer_norm_cpu::backward;
        crate::cpu::dispatch_float!(op, x.dtype(), backward(norm, (grad_y, x), weight, eps))
    };
    if let Some(grads) = cpu_backward(op, (grad_y, x), (weight, has_bias), kernel) {
        return grads;
    }
    let (xhat, rstd) = normalize_rows(norm, op, x, eps)?;
    let g = match weight {
        Some(w) => grad_y.broadcast_mul(w).ctx(op)?,
        None => grad_y.clone(),
    };
    let input = normalize_rows_backward(norm, op, &g, (&xhat, &rstd))?;
    let d = *x.dims().last().unwrap_or(&1);
    let rows = |t: Tensor| -> Result<Tensor> { t.reshape(((), d)).ctx(op)?.sum(0).ctx(op) };
    Ok(NormGrads {
        input,
        weight: match weight {
            Some(_) => Some(rows((grad_y * &xhat).ctx(op)?)?),
            None => None,
        },
        bias: if has_bias {
            Some(rows(grad_y.clone())?)
        } else {
            None
        },
    })
}

/// The `eps` of PyTorch's `rms_norm` when it is given none: `torch.finfo(dtype).eps`, the
/// gap between 1 and the next value of `x`'s dtype (`None` for a dtype that is not a
/// float).
pub fn rms_norm_default_eps(dtype: DType) -> Option<f64> {
    match dtype {
        DType::F64 => Some(f64::EPSILON),
        DType::F32 => Some(f64::from(f32::EPSILON)),
        DType::F16 => Some(f64::from(half::f16::EPSILON)),
        DType::BF16 => Some(f64::from(half::bf16::EPSILON)),
        _ => None,
    }
}

/// Checks an RMS norm's weight against the input's last dimension.
pub fn check_rms_norm(x: &[usize], weight: Option<&[usize]>) -> Result<()> {
    check_last_dim(RMS_NORM, x, [weight, None])
}

/// RMS norm over the last dimension with an optional `weight` (PyTorch's `F.rms_norm(x,
/// [d], weight, eps)`, `nn.RMSNorm`): `x / √(mean(x²) + eps) · weight`.
pub fn rms_norm(x: &Tensor, weight: Option<&Tensor>, eps: f64) -> Result<Tensor> {
    check_rms_norm(x.dims(), weight.map(|w| w.dims()))?;
    row_norm(RowNorm::Rms, x, [weight, None], eps)
}

/// RMS norm's input and weight gradients, recomputing the statistics from `x`.
pub fn rms_norm_backward(
    grad_y: &Tensor,
    x: &Tensor,
    weight: Option<&Tensor>,
    eps: f64,
) -> Result<NormGrads> {
    check_rms_norm(x.dims(), weight.map(|w| w.dims()))?;
    row_norm_backward(RowNorm::Rms, (grad_y, x), (weight, false), eps)
}

/// Checks a channel layer norm's input `[N, C, ...]` and per-channel parameters.
pub fn check_layer_norm2d(
    x: &[usize],
    weight: Option<&[usize]>,
    bias: Option<&[usize]>,
) -> Result<()> {
    if x.len() < 2 {
        return Err(crate::invalid!(
            LAYER_NORM_2D,
            "the input must be [N, C, ...], got {x:?}"
        ));
    }
    for (what, s) in [("weight", weight), ("bias", bias)] {
        if let Some(s) = s {
            crate::shape::same(LAYER_NORM_2D, what, s, "channels", &[x[1]])?;
        }
    }
    Ok(())
}

/// The permutations of an `[N, C, ...]` input to channels-last and back.
fn channels_last_perms(rank: usize) -> (Vec<usize>, Vec<usize>) {
    let to: Vec<usize> = [0].into_iter().chain(2..rank).chain([1]).collect();
    let back: Vec<usize> = [0, rank - 1].into_iter().chain(1..rank - 1).collect();
    (to, back)
}

/// Permutes `t` by `perm` into contiguous storage.
fn permuted(t: &Tensor, perm: &[usize]) -> Result<Tensor> {
    t.permute(perm)
        .ctx(LAYER_NORM_2D)?
        .contiguous()
        .ctx(LAYER_NORM_2D)
}

/// Layer norm over the channels (dimension 1) of an `[N, C, ...]` input, with an optional
/// per-channel `weight` and `bias`: torchvision's `LayerNorm2d` without its permutes.
pub fn layer_norm2d(
    x: &Tensor,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    check_layer_norm2d(x.dims(), weight.map(|w| w.dims()), bias.map(|b| b.dims()))?;
    let kernel = || {
        use crate::layer_norm_channels_cpu::forward;
        crate::cpu::dispatch_float!(LAYER_NORM_2D, x.dtype(), forward(x, weight, bias, eps))
    };
    if let Some(y) = cpu_forward(LAYER_NORM_2D, x, [weight, bias], kernel) {
        return y;
    }
    let (to, back) = channels_last_perms(x.rank());
    let y = layer_norm(&permuted(x, &to)?, weight, bias, eps)?;
    permuted(&y, &back)
}

/// The channel layer norm's gradients, recomputing the statistics from `x`.
pub fn layer_norm2d_backward(
    grad_y: &Tensor,
    x: &Tensor,
    weight: Option<&Tensor>,
    has_bias: bool,
    eps: f64,
) -> Result<NormGrads> {
    let op = LAYER_NORM_2D;
    check_layer_norm2d(x.dims(), weight.map(|w| w.dims()), None)?;
    crate::shape::same(op, "output gradient", grad_y.dims(), "input", x.dims())?;
    let kernel = || {
        use crate::layer_norm_channels_cpu::backward;
        crate::cpu::dispatch_float!(op, x.dtype(), backward(grad_y, x, weight, eps))
    };
    if let Some(grads) = cpu_backward(op, (grad_y, x), (weight, has_bias), kernel) {
        return grads;
    }
    let (to, back) = channels_last_perms(x.rank());
    let g = layer_norm_backward(
        &permuted(grad_y, &to)?,
        &permuted(x, &to)?,
        weight,
        has_bias,
        eps,
    )?;
    Ok(NormGrads {
        input: permuted(&g.input, &back)?,
        ..g
    })
}

/// Checks a group norm's settings against an input `[N, C, ...]`.
pub fn check_group_norm(x: &[usize], groups: usize, weight: Option<&[usize]>) -> Result<()> {
    if x.len() < 2 {
        return Err(crate::invalid!(
            GROUP_NORM,
            "the input must be [N, C, ...], got {x:?}"
        ));
    }
    if groups == 0 || !x[1].is_multiple_of(groups) {
        return Err(crate::invalid!(
            GROUP_NORM,
            "{} channels do not split into {groups} groups",
            x[1]
        ));
    }
    if let Some(w) = weight {
        crate::shape::same(GROUP_NORM, "weight", w, "channels", &[x[1]])?;
    }
    Ok(())
}

/// `[N, C, S]` view of `x` and the per-channel broadcast shape `[1, C, 1]`.
fn grouped_views(x: &Tensor, groups: usize) -> Result<(Tensor, Tensor)> {
    let (n, c) = (x.dim(0).ctx(GROUP_NORM)?, x.dim(1).ctx(GROUP_NORM)?);
    let by_group = x.reshape((n, groups, ())).ctx(GROUP_NORM)?;
    let by_channel = x.reshape((n, c, ())).ctx(GROUP_NORM)?;
    Ok((by_group, by_channel))
}

/// The generic tensor ops [`group_norm`] runs with its affine: the statistics and the
/// normalisation (`normalize_rows`: 2 means, subtract, square, add ε, square root,
/// reciprocal, multiply) then scale and shift. Reshapes are views and not counted.
pub const GROUP_NORM_OPS: u32 = 10;
/// The generic tensor ops [`group_norm_backward`] runs with weight and bias: the
/// statistics again (8), the weight's scale (1), `normalize_rows_backward` (7), the
/// weight's gradient (3) and the bias's (2).
pub const GROUP_NORM_BACKWARD_OPS: u32 = 21;

/// Group norm of `x` `[N, C, ...]` with `groups` groups and an optional per-channel affine.
pub fn group_norm(
    x: &Tensor,
    groups: usize,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    check_group_norm(x.dims(), groups, weight.map(|w| w.dims()))?;
    let op = GROUP_NORM;
    let (by_group, _) = grouped_views(x, groups)?;
    let (xhat, _) = normalize_rows(RowNorm::Layer, op, &by_group, eps)?;
    let c = x.dim(1).ctx(op)?;
    let xhat = xhat.reshape((x.dim(0).ctx(op)?, c, ())).ctx(op)?;
    let channel = |t: &Tensor| t.reshape((1, c, 1)).ctx(op);
    let (w, b) = (
        weight.map(channel).transpose()?,
        bias.map(channel).transpose()?,
    );
    affine(op, xhat, w.as_ref(), b.as_ref())?
        .reshape(x.dims())
        .ctx(op)
}

/// Group norm's gradients, recomputing the statistics from `x`.
pub fn group_norm_backward(
    grad_y: &Tensor,
    x: &Tensor,
    groups: usize,
    weight: Option<&Tensor>,
    has_bias: bool,
    eps: f64,
) -> Result<NormGrads> {
    let op = GROUP_NORM;
    check_group_norm(x.dims(), groups, weight.map(|w| w.dims()))?;
    crate::shape::same(op, "output gradient", grad_y.dims(), "input", x.dims())?;
    let (n, c) = (x.dim(0).ctx(op)?, x.dim(1).ctx(op)?);
    let (by_group, _) = grouped_views(x, groups)?;
    let (xhat, rstd) = normalize_rows(RowNorm::Layer, op, &by_group, eps)?;
    let gy = grad_y.reshape((n, c, ())).ctx(op)?;
    let g = match weight {
        Some(w) => gy.broadcast_mul(&w.reshape((1, c, 1)).ctx(op)?).ctx(op)?,
        None => gy.clone(),
    };
    let g = g.reshape((n, groups, ())).ctx(op)?;
    let input = normalize_rows_backward(RowNorm::Layer, op, &g, (&xhat, &rstd))?
        .reshape(x.dims())
        .ctx(op)?;
    let per_channel = |t: Tensor| -> Result<Tensor> { t.sum(2).ctx(op)?.sum(0).ctx(op) };
    let xhat = xhat.reshape((n, c, ())).ctx(op)?;
    Ok(NormGrads {
        input,
        weight: match weight {
            Some(_) => Some(per_channel((&gy * &xhat).ctx(op)?)?),
            None => None,
        },
        bias: if has_bias {
            Some(per_channel(gy)?)
        } else {
            None
        },
    })
}

/// FLOPs of a normalisation over `shape` (statistics, normalise, affine).
pub fn norm_flops(shape: &[usize]) -> u64 {
    crate::shape::flop_count(8, shape)
}

/// FLOPs of a normalisation's backward over `shape`.
pub fn norm_backward_flops(shape: &[usize]) -> u64 {
    crate::shape::flop_count(14, shape)
}

/// FLOPs of a softmax over `shape`.
pub fn softmax_flops(shape: &[usize]) -> u64 {
    crate::shape::flop_count(4, shape)
}
