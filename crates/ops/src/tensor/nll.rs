//! `F.log_softmax` and `F.nll_loss` over `[C]`, `[N, C]` or `[N, C, d1, ...]` with
//! `ignore_index`, `label_smoothing` (as `F.cross_entropy` defines it) and the three
//! reductions, with their gradients. `cross_entropy` beyond the fused `[N, C]` kernel is
//! these two.

use candle_core::{DType, Tensor};

use super::candle;
use super::reduce::{Reduce, Reduction};
use super::select::check_index_dtype;
use crate::error::{OpError, Result};
use crate::softmax_cpu::SoftmaxKind;

/// `log_softmax(x, dim)`: `x - logsumexp(x, dim)` (the stable log-sum-exp of
/// [`Reduction::LogSumExp`]).
pub fn log_softmax(x: &Tensor, dim: usize) -> Result<Tensor> {
    crate::norm::check_dim("log_softmax", x.dims(), dim)?;
    if crate::cpu::on_cpu_kernel(x) {
        return crate::softmax_cpu::forward_on_cpu(x, dim, SoftmaxKind::LogSoftmax);
    }
    let lse = Reduce {
        op: Reduction::LogSumExp,
        dims: vec![dim],
        keepdim: true,
        correction: 1,
    }
    .forward(x)?;
    x.broadcast_sub(&lse).map_err(candle("log_softmax"))
}

/// `log_softmax`'s gradient from its output `y`: `gy - exp(y) · Σ gy`.
pub fn log_softmax_backward(gy: &Tensor, y: &Tensor, dim: usize) -> Result<Tensor> {
    crate::shape::same(
        "log_softmax",
        "output gradient",
        gy.dims(),
        "output",
        y.dims(),
    )?;
    crate::norm::check_dim("log_softmax", y.dims(), dim)?;
    if crate::cpu::on_cpu_kernel(y) {
        return crate::softmax_cpu::backward_on_cpu(gy, y, dim, SoftmaxKind::LogSoftmax);
    }
    let c = candle("log_softmax");
    let total = gy.sum_keepdim(dim).map_err(&c)?;
    let p = y.exp().map_err(&c)?;
    gy.sub(&p.broadcast_mul(&total).map_err(&c)?).map_err(c)
}

/// How a loss reduces over its elements, as PyTorch's `reduction=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LossReduction {
    /// The mean over the counted elements (for `nll_loss`: those not ignored).
    #[default]
    Mean,
    /// The sum.
    Sum,
    /// One loss per element, unreduced.
    None,
}

/// `nll_loss`'s settings (and `cross_entropy`'s, which adds the `log_softmax`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NllLoss {
    /// A target value that counts for nothing (PyTorch's default -100).
    pub ignore_index: Option<i64>,
    /// `ε` in `(1 - ε)·nll + ε·mean over classes of -log p` (`cross_entropy`'s).
    pub label_smoothing: f64,
    /// How the per-element losses reduce.
    pub reduction: LossReduction,
}

impl Default for NllLoss {
    fn default() -> Self {
        NllLoss {
            ignore_index: Some(-100),
            label_smoothing: 0.0,
            reduction: LossReduction::Mean,
        }
    }
}

impl NllLoss {
    /// The loss's shape for log-probabilities `[N, C, d...]` (or `[C]`) and target
    /// `[N, d...]` (or `[]`): a scalar, or the target's shape unreduced.
    pub fn out_shape(
        &self,
        input: &[usize],
        target: &[usize],
        target_dtype: DType,
    ) -> Result<Vec<usize>> {
        const OP: &str = "nll_loss";
        check_index_dtype(OP, "the target", target_dtype)?;
        let expected: Vec<usize> = match input.len() {
            0 => return Err(OpError::invalid(OP, "the input has no class dimension")),
            1 => vec![],
            _ => std::iter::once(input[0])
                .chain(input[2..].iter().copied())
                .collect(),
        };
        if target != expected {
            return Err(crate::invalid!(
                OP,
                "input {input:?} needs target {expected:?}, got {target:?}"
            ));
        }
        if !(0.0..=1.0).contains(&self.label_smoothing) {
            return Err(crate::invalid!(
                OP,
                "label_smoothing must be in [0, 1], got {}",
                self.label_smoothing
            ));
        }
        Ok(match self.reduction {
            LossReduction::None => target.to_vec(),
            _ => vec![],
        })
    }

    /// FLOPs of the forward over log-probabilities of `shape`.
    pub fn flops(&self, shape: &[usize]) -> u64 {
        let n: usize = shape.iter().product();
        if self.label_smoothing > 0.0 {
            2 * n as u64
        } else {
            (n / shape.get(1).or(shape.first()).copied().unwrap_or(1).max(1)) as u64
        }
    }

    /// The loss of log-probabilities `logp` against class indices `target`.
    pub fn forward(&self, logp: &Tensor, target: &Tensor) -> Result<Tensor> {
        let rows = Rows::of(logp, target, self.ignore_index)?;
        let c = candle("nll_loss");
        let eps = self.label_smoothing;
        let picked = rows
            .logp
            .gather(&rows.safe_target.unsqueeze(1).map_err(&c)?, 1)
            .map_err(&c)?;
        let mut loss = picked
            .squeeze(1)
            .and_then(|p| p.affine(-(1.0 - eps), 0.0))
            .map_err(&c)?;
        if eps > 0.0 {
            let smooth = rows
                .logp
                .sum_keepdim(1)
                .and_then(|s| s.squeeze(1))
                .map_err(&c)?;
            let smooth = smooth.affine(-eps / rows.classes as f64, 0.0).map_err(&c)?;
            loss = loss.add(&smooth).map_err(&c)?;
        }
        let loss = loss.mul(&rows.valid).map_err(&c)?;
        match self.reduction {
            LossReduction::None => loss.reshape(target.dims()).map_err(c),
            LossReduction::Sum => loss.sum_all().map_err(c),
            LossReduction::Mean => loss
                .sum_all()
                .and_then(|s| s.affine(1.0 / rows.counted, 0.0))
                .map_err(c),
        }
    }

    /// The gradient of `logp` for the loss's gradient `gy` (a scalar, or the target's
    /// shape unreduced).
    pub fn backward(&self, gy: &Tensor, logp: &Tensor, target: &Tensor) -> Result<Tensor> {
        let rows = Rows::of(logp, target, self.ignore_index)?;
        let c = candle("nll_loss");
        let (eps, k) = (self.label_smoothing, rows.classes);
        let r = rows.valid.dim(0).map_err(&c)?;
        // Per row: the loss's gradient, times 1 for a counted row and 0 for an ignored one.
        let per_row = match self.reduction {
            LossReduction::None => gy.reshape(r).map_err(&c)?,
            LossReduction::Sum => gy.reshape(1).and_then(|g| g.broadcast_as(r)).map_err(&c)?,
            LossReduction::Mean => gy
                .reshape(1)
                .and_then(|g| g.affine(1.0 / rows.counted, 0.0)?.broadcast_as(r))
                .map_err(&c)?,
        };
        let per_row = per_row
            .mul(&rows.valid)
            .and_then(|g| g.unsqueeze(1))
            .map_err(&c)?;
        let classes = Tensor::arange(0u32, k as u32, logp.device()).map_err(&c)?;
        let target_col = rows
            .safe_target
            .to_dtype(DType::U32)
            .and_then(|t| t.unsqueeze(1))
            .map_err(&c)?;
        let one_hot = target_col
            .broadcast_eq(&classes.unsqueeze(0).map_err(&c)?)
            .and_then(|m| m.to_dtype(logp.dtype()))
            .map_err(&c)?;
        let g = one_hot
            .affine(-(1.0 - eps), -eps / k as f64)
            .and_then(|g| g.broadcast_mul(&per_row))
            .map_err(&c)?;
        rows.unflatten(g)
    }
}

/// The log-probabilities as rows `[R, C]` with their targets, and which rows count.
struct Rows {
    /// `[R, C]`, classes last.
    logp: Tensor,
    /// `[R]` targets with ignored ones replaced by 0 (any valid class).
    safe_target: Tensor,
    /// `[R]` 1 for a counted row, 0 for an ignored one, in the input's dtype.
    valid: Tensor,
    /// How many rows count.
    counted: f64,
    /// C.
    classes: usize,
    /// The input's shape, to put a gradient back.
    shape: Vec<usize>,
}

impl Rows {
    fn of(logp: &Tensor, target: &Tensor, ignore: Option<i64>) -> Result<Rows> {
        const OP: &str = "nll_loss";
        let c = candle(OP);
        let shape = logp.dims().to_vec();
        let classes = if shape.len() == 1 { shape[0] } else { shape[1] };
        let rows = if shape.len() == 1 {
            logp.unsqueeze(0).map_err(&c)?
        } else {
            let n = shape[0];
            let x = logp.reshape((n, classes, ())).map_err(&c)?;
            x.transpose(1, 2)
                .and_then(|t| t.reshape(((), classes)))
                .map_err(&c)?
        };
        let t = target
            .flatten_all()
            .and_then(|t| t.to_dtype(DType::I64))
            .map_err(&c)?;
        let values = t.to_vec1::<i64>().map_err(&c)?;
        let mut valid = Vec::with_capacity(values.len());
        let mut safe = Vec::with_capacity(values.len());
        for (i, &v) in values.iter().enumerate() {
            if Some(v) == ignore {
                valid.push(0.0);
                safe.push(0u32);
            } else if v < 0 || v as usize >= classes {
                return Err(crate::invalid!(
                    OP,
                    "target {v} (element {i}) is out of range for {classes} classes"
                ));
            } else {
                valid.push(1.0);
                safe.push(v as u32);
            }
        }
        let counted = valid.iter().sum::<f64>();
        let dev = logp.device();
        let valid = Tensor::new(valid, dev)
            .and_then(|v| v.to_dtype(logp.dtype()))
            .map_err(&c)?;
        let safe_target = Tensor::new(safe, dev).map_err(&c)?;
        Ok(Rows {
            logp: rows,
            safe_target,
            valid,
            counted,
            classes,
            shape,
        })
    }

    /// A `[R, C]` gradient back in the input's layout.
    fn unflatten(&self, g: Tensor) -> Result<Tensor> {
        let c = candle("nll_loss");
        if self.shape.len() == 1 {
            return g.reshape(self.shape.as_slice()).map_err(c);
        }
        let (n, k) = (self.shape[0], self.classes);
        g.reshape((n, (), k))
            .and_then(|g| {
                g.transpose(1, 2)?
                    .contiguous()?
                    .reshape(self.shape.as_slice())
            })
            .map_err(c)
    }
}
