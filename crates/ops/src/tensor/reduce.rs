//! Reductions over dimensions with `keepdim`, as `torch.sum`, `torch.mean`,
//! `torch.amax`, `torch.amin`, `torch.logsumexp`, `torch.var` (with `correction`),
//! `torch.argmax` and `torch.argmin`, and their gradients.

use candle_core::{DType, Tensor};

use super::reduce_rows;
pub use super::reduction::Reduction;
use super::{candle, dims_index};
use crate::cpu::dispatch_float;
use crate::error::{OpError, Result};

/// A reduction with its dimensions (sorted, non-negative) and settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Reduce {
    /// Which reduction.
    pub op: Reduction,
    /// The dimensions reduced, sorted.
    pub dims: Vec<usize>,
    /// Whether the reduced dimensions stay, with size 1.
    pub keepdim: bool,
    /// For [`Reduction::Var`]: the divisor is `n - correction`.
    pub correction: usize,
}

impl Reduce {
    /// `op` over `dims` of a tensor of shape `shape` (PyTorch's negative dimensions; an
    /// empty list reduces every dimension). `argmax` and `argmin` take one dimension.
    pub fn new(op: Reduction, shape: &[usize], dims: &[isize], keepdim: bool) -> Result<Self> {
        let name = op.op_name();
        let dims = dims_index(name, shape.len(), dims)?;
        if !op.differentiable() && dims.len() != 1 {
            return Err(crate::invalid!(
                name,
                "takes one dimension, got {} of shape {shape:?}",
                dims.len()
            ));
        }
        if let Some(&d) = dims.iter().find(|&&d| shape[d] == 0) {
            if !matches!(op, Reduction::Sum | Reduction::Mean | Reduction::LogSumExp) {
                return Err(crate::invalid!(
                    name,
                    "dimension {d} of shape {shape:?} is empty: no {name} exists"
                ));
            }
        }
        Ok(Reduce {
            op,
            dims,
            keepdim,
            correction: 1,
        })
    }

    /// The output shape for input shape `shape`.
    pub fn out_shape(&self, shape: &[usize]) -> Vec<usize> {
        let mut out = Vec::with_capacity(shape.len());
        for (d, &n) in shape.iter().enumerate() {
            if !self.dims.contains(&d) {
                out.push(n);
            } else if self.keepdim {
                out.push(1);
            }
        }
        out
    }

    /// The output dtype for input dtype `dtype` (`u32` indices for argmax and argmin).
    pub fn out_dtype(&self, dtype: DType) -> DType {
        if self.op.differentiable() {
            dtype
        } else {
            DType::U32
        }
    }

    /// The shape with the reduced dimensions kept as 1.
    fn kept_shape(&self, shape: &[usize]) -> Vec<usize> {
        let mut s = shape.to_vec();
        for &d in &self.dims {
            s[d] = 1;
        }
        s
    }

    /// How many elements each output element reduces.
    fn group(&self, shape: &[usize]) -> usize {
        self.dims.iter().map(|&d| shape[d]).product()
    }

    /// FLOPs of the forward over an input of `shape`.
    pub fn flops(&self, shape: &[usize]) -> u64 {
        let n: usize = shape.iter().product();
        let per = match self.op {
            Reduction::LogSumExp | Reduction::Var => 4,
            _ => 1,
        };
        (per * n) as u64
    }

    /// FLOPs of the gradient over an input of `shape`.
    pub fn backward_flops(&self, shape: &[usize]) -> u64 {
        let n: usize = shape.iter().product();
        let per = match self.op {
            Reduction::Sum => 0,
            Reduction::Mean => 1,
            _ => 3,
        };
        (per * n) as u64
    }

    /// The reduction of `x`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let op = self.op.op_name();
        let c = candle(op);
        if let Some(group) = self.cpu_rows(x, x.dims()) {
            let (r, out) = (self.op, self.out_shape(x.dims()));
            let corr = self.correction;
            return dispatch_float!(
                op,
                x.dtype(),
                reduce_rows::reduce_rows(r, corr, x, group, &out)
            );
        }
        let kept = match self.op {
            Reduction::Sum => x.sum_keepdim(self.dims.clone()).map_err(c)?,
            Reduction::Mean => x.mean_keepdim(self.dims.clone()).map_err(c)?,
            Reduction::Amax | Reduction::Amin => self.extreme(x).map_err(c)?,
            Reduction::LogSumExp => self.logsumexp(x).map_err(c)?,
            Reduction::Var => {
                let n = self.group(x.dims()) as f64;
                let mean = x.mean_keepdim(self.dims.clone()).map_err(&c)?;
                let d = x.broadcast_sub(&mean).map_err(&c)?;
                let ss = d.sqr().and_then(|s| s.sum_keepdim(self.dims.clone()));
                ss.and_then(|s| s.affine(1.0 / (n - self.correction as f64), 0.0))
                    .map_err(c)?
            }
            Reduction::Argmax => x.argmax_keepdim(self.dims[0]).map_err(c)?,
            Reduction::Argmin => x.argmin_keepdim(self.dims[0]).map_err(c)?,
        };
        let out = self.out_shape(x.dims());
        kept.reshape(out).map_err(candle(op))
    }

    /// The group size when the CPU row kernels run it: `t` on the CPU in f32 or f64, a
    /// differentiable reduction, over whole rows of an input of `shape` (see
    /// [`trailing_group`](reduce_rows::trailing_group)).
    fn cpu_rows(&self, t: &Tensor, shape: &[usize]) -> Option<usize> {
        if !crate::cpu::on_cpu_kernel(t) || !self.op.differentiable() {
            return None;
        }
        reduce_rows::trailing_group(shape, &self.dims).map(|(_, group)| group)
    }

    /// The maximum or minimum over the dimensions, kept.
    fn extreme(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let mut y = x.clone();
        for &d in &self.dims {
            y = match self.op {
                Reduction::Amax => y.max_keepdim(d)?,
                _ => y.min_keepdim(d)?,
            };
        }
        Ok(y)
    }

    /// `m + log Σ exp(x - m)` with `m` the maximum (0 where it is infinite, so that an
    /// all `-inf` group gives `-inf` and a `+inf` gives `+inf`, as PyTorch's).
    fn logsumexp(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let mut m = x.clone();
        for &d in &self.dims {
            m = m.max_keepdim(d)?;
        }
        let finite = m.abs()?.lt(f64::INFINITY)?;
        let m = finite.where_cond(&m, &m.zeros_like()?)?;
        let s = x.broadcast_sub(&m)?.exp()?.sum_keepdim(self.dims.clone())?;
        s.log()?.add(&m)
    }

    /// Whether the gradient reads the forward's input and its output (a sum's or a
    /// mean's reads neither, only the input's shape).
    pub fn backward_reads(&self) -> (bool, bool) {
        match self.op {
            Reduction::Sum | Reduction::Mean => (false, false),
            Reduction::Var => (true, false),
            _ => (true, true),
        }
    }

    /// The gradient of an input of `shape` for output gradient `gy`, with the forward's
    /// input `x` and output `y` where [`backward_reads`](Reduce::backward_reads) says
    /// (an argmax has no gradient: an error).
    pub fn backward(
        &self,
        gy: &Tensor,
        shape: &[usize],
        x: Option<&Tensor>,
        y: Option<&Tensor>,
    ) -> Result<Tensor> {
        let op = self.op.op_name();
        let c = candle(op);
        let missing = || OpError::invalid(op, "the gradient needs the forward's tensors");
        let (reads_x, reads_y) = self.backward_reads();
        if let (Some(group), true, true) = (
            self.cpu_rows(gy, shape)
                .filter(|g| gy.elem_count() * g == shape.iter().product::<usize>()),
            !reads_x || x.is_some_and(|x| x.dims() == shape && x.dtype() == gy.dtype()),
            !reads_y
                || y.is_some_and(|y| y.elem_count() == gy.elem_count() && y.dtype() == gy.dtype()),
        ) {
            let (r, corr) = (self.op, self.correction);
            let (x, y) = (x.filter(|_| reads_x), y.filter(|_| reads_y));
            return dispatch_float!(
                op,
                gy.dtype(),
                reduce_rows::reduce_rows_backward(r, corr, gy, x, y, group, shape)
            );
        }
        let kept = self.kept_shape(shape);
        let gy = gy.reshape(kept.as_slice()).map_err(&c)?;
        let n = self.group(shape) as f64;
        let g = match self.op {
            Reduction::Sum => gy.broadcast_as(shape).and_then(|g| g.contiguous()),
            Reduction::Mean => gy
                .affine(1.0 / n, 0.0)
                .and_then(|g| g.broadcast_as(shape)?.contiguous()),
            Reduction::Amax | Reduction::Amin => {
                let (x, y) = (x.ok_or_else(missing)?, y.ok_or_else(missing)?);
                let y = y.reshape(kept.as_slice()).map_err(&c)?;
                let hit = x
                    .broadcast_eq(&y)
                    .and_then(|m| m.to_dtype(x.dtype()))
                    .map_err(&c)?;
                let ties = hit.sum_keepdim(self.dims.clone()).map_err(&c)?;
                hit.broadcast_mul(&gy.div(&ties).map_err(&c)?)
            }
            Reduction::LogSumExp => {
                let (x, y) = (x.ok_or_else(missing)?, y.ok_or_else(missing)?);
                let y = y.reshape(kept.as_slice()).map_err(&c)?;
                x.broadcast_sub(&y)
                    .and_then(|d| d.exp()?.broadcast_mul(&gy))
            }
            Reduction::Var => {
                let x = x.ok_or_else(missing)?;
                let mean = x.mean_keepdim(self.dims.clone()).map_err(&c)?;
                let scale = 2.0 / (n - self.correction as f64);
                x.broadcast_sub(&mean)
                    .and_then(|d| d.broadcast_mul(&gy)?.affine(scale, 0.0))
            }
            Reduction::Argmax | Reduction::Argmin => {
                return Err(OpError::invalid(op, "has no gradient"))
            }
        };
        g.map_err(c)
    }
}
