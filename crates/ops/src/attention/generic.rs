//! Attention from candle's ops on any device: the scores, the softmax and the
//! probabilities as `[heads, L, S]` tensors (the unfused graph's memory), the backward
//! drawing the probabilities again from the saved log-sum-exp as the fused kernels do.

use candle_core::{Tensor, D};

use super::mask;
use super::params::{Attention, AttentionGrads, AttentionOutput, AttentionShape, Call, OP};
use crate::error::{CandleContext, Result};

/// `[heads, rows, cols]` of a `[.., rows, cols]` tensor.
fn flat(t: &Tensor, rows: usize, cols: usize, heads: usize) -> Result<Tensor> {
    t.contiguous().ctx(OP)?.reshape((heads, rows, cols)).ctx(OP)
}

/// The logits `q·kᵀ·scale + mask` as `[heads, L, S]` (the causal rule as −∞).
fn logits(
    shape: &AttentionShape,
    q: &Tensor,
    k: &Tensor,
    mask: Option<&Tensor>,
    a: &Attention,
) -> Result<Tensor> {
    let (h, l, s, e) = (shape.heads(), shape.queries, shape.keys, shape.qk_dim);
    let (q, k) = (flat(q, l, e, h)?, flat(k, s, e, h)?);
    let kt = k.transpose(1, 2).ctx(OP)?.contiguous().ctx(OP)?;
    let scores = (q.matmul(&kt).ctx(OP)? * a.scale).ctx(OP)?;
    let mut bias = match mask {
        Some(m) => {
            let add = mask::additive(OP, m, q.dtype())?;
            let mut full = shape.lead.clone();
            full.extend([l, s]);
            Some(
                add.broadcast_as(full)
                    .ctx(OP)?
                    .contiguous()
                    .ctx(OP)?
                    .reshape((h, l, s))
                    .ctx(OP)?,
            )
        }
        None => None,
    };
    if a.causal {
        let values: Vec<f64> = (0..l * s)
            .map(|x| {
                if x % s > x / s {
                    f64::NEG_INFINITY
                } else {
                    0.0
                }
            })
            .collect();
        let causal = Tensor::from_vec(values, (1, l, s), q.device())
            .ctx(OP)?
            .to_dtype(q.dtype())
            .ctx(OP)?;
        bias = Some(causal);
    }
    match bias {
        Some(b) => scores.broadcast_add(&b).ctx(OP),
        None => Ok(scores),
    }
}

/// `t` with −∞ replaced by `with`.
fn replace_neg_inf(t: &Tensor, with: f64) -> Result<Tensor> {
    let hit = t.eq(f64::NEG_INFINITY).ctx(OP)?;
    let fill = Tensor::full(with, t.dims(), t.device())
        .ctx(OP)?
        .to_dtype(t.dtype())
        .ctx(OP)?;
    hit.where_cond(&fill, t).ctx(OP)
}

/// The scaled dropout mask of the `[heads, L, S]` weights (wick's dropout draws).
fn dropout_mask(
    shape: &AttentionShape,
    a: &Attention,
    step: u64,
    like: &Tensor,
) -> Result<Option<Tensor>> {
    if a.dropout_p == 0.0 {
        return Ok(None);
    }
    let dims = [shape.heads(), shape.queries, shape.keys];
    crate::dropout::mask(
        &dims,
        a.dropout_p,
        a.seed,
        step,
        like.dtype(),
        like.device(),
    )
    .map(Some)
}

pub(super) fn forward(c: &Call<'_>) -> Result<AttentionOutput> {
    let (shape, [q, k, v], mask, a, step) = c.parts();
    let logits = logits(shape, q, k, mask, a)?;
    let max = replace_neg_inf(&logits.max_keepdim(D::Minus1).ctx(OP)?, 0.0)?;
    let p = logits.broadcast_sub(&max).ctx(OP)?.exp().ctx(OP)?;
    let sum = p.sum_keepdim(D::Minus1).ctx(OP)?;
    let lse = (max + sum.log().ctx(OP)?).ctx(OP)?;
    // A row that sees no key has sum 0: weights 0 (PyTorch's output 0), not 0/0.
    let empty = sum.eq(0.0).ctx(OP)?;
    let safe = empty.where_cond(&sum.ones_like().ctx(OP)?, &sum).ctx(OP)?;
    let mut w = p.broadcast_div(&safe).ctx(OP)?;
    if let Some(m) = dropout_mask(shape, a, step, &w)? {
        w = (w * m).ctx(OP)?;
    }
    let (h, s, ev) = (shape.heads(), shape.keys, shape.v_dim);
    let out = w.matmul(&flat(v, s, ev, h)?).ctx(OP)?;
    Ok(AttentionOutput {
        out: out.reshape(shape.out()).ctx(OP)?,
        lse: lse
            .reshape(shape.lse())
            .ctx(OP)?
            .to_dtype(super::lse_dtype(q.dtype()))
            .ctx(OP)?,
    })
}

pub(super) fn backward(c: &Call<'_>, y: &AttentionOutput, dy: &Tensor) -> Result<AttentionGrads> {
    let (shape, [q, k, v], mask, a, step) = c.parts();
    let (h, l, s, e, ev) = shape.dims();
    let logits = logits(shape, q, k, mask, a)?;
    let lse = y.lse.to_dtype(q.dtype()).ctx(OP)?;
    let lse = replace_neg_inf(&flat(&lse, l, 1, h)?, f64::INFINITY)?;
    let p = logits.broadcast_sub(&lse).ctx(OP)?.exp().ctx(OP)?;
    let dout = flat(dy, l, ev, h)?;
    let drop = dropout_mask(shape, a, step, &p)?;
    let weights = match &drop {
        Some(m) => (&p * m).ctx(OP)?,
        None => p.clone(),
    };
    let t = |x: &Tensor| x.transpose(1, 2).ctx(OP)?.contiguous().ctx(OP);
    let dv = t(&weights)?.matmul(&dout).ctx(OP)?;
    let mut dp = dout.matmul(&t(&flat(v, s, ev, h)?)?).ctx(OP)?;
    if let Some(m) = &drop {
        dp = (dp * m).ctx(OP)?;
    }
    let delta = (&dout * flat(&y.out, l, ev, h)?)
        .ctx(OP)?
        .sum_keepdim(D::Minus1)
        .ctx(OP)?;
    let ds = ((p * dp.broadcast_sub(&delta).ctx(OP)?).ctx(OP)? * a.scale).ctx(OP)?;
    let dq = ds.matmul(&flat(k, s, e, h)?).ctx(OP)?;
    let dk = t(&ds)?.matmul(&flat(q, l, e, h)?).ctx(OP)?;
    Ok(AttentionGrads {
        q: dq.reshape(q.dims()).ctx(OP)?,
        k: dk.reshape(k.dims()).ctx(OP)?,
        v: dv.reshape(v.dims()).ctx(OP)?,
    })
}
