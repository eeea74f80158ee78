//! Attention masks (checked by [`AttentionShape::check_mask`]), made additive (a
//! boolean mask's "may not attend" becomes −∞), and addressed through broadcast strides,
//! so a `[L, S]` mask shared by every head is never copied per head.

use candle_core::{DType, Tensor};

use super::params::AttentionShape;
use crate::error::{CandleContext, Result};

/// `m` as an additive mask in `dtype`: a boolean mask's zeros become −∞, its nonzeros 0.
pub(super) fn additive(op: &'static str, m: &Tensor, dtype: DType) -> Result<Tensor> {
    if m.dtype() != DType::U8 {
        return Ok(m.clone());
    }
    let zeros = m.zeros_like().ctx(op)?.to_dtype(dtype).ctx(op)?;
    let blocked = Tensor::full(f64::NEG_INFINITY, m.dims(), m.device())
        .ctx(op)?
        .to_dtype(dtype)
        .ctx(op)?;
    m.where_cond(&zeros, &blocked).ctx(op)
}

/// Where each (batch, head) slice's mask starts, and the row and column strides: the
/// additive mask's value for slice `h`, query `i`, key `j` is at
/// `offsets[h] + i·row + j·col` of its contiguous data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Addressing {
    pub(crate) offsets: Vec<usize>,
    pub(crate) row: usize,
    pub(crate) col: usize,
}

impl Addressing {
    pub(super) fn new(op: &'static str, dims: &[usize], shape: &AttentionShape) -> Result<Self> {
        let st = shape.mask_strides(op, dims)?;
        let lead = shape.lead.len();
        let mut offsets = Vec::with_capacity(shape.heads());
        let mut index = vec![0usize; lead];
        for _ in 0..shape.heads() {
            offsets.push(index.iter().zip(&st).map(|(i, s)| i * s).sum());
            for d in (0..lead).rev() {
                index[d] += 1;
                if index[d] < shape.lead[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        Ok(Addressing {
            offsets,
            row: st[lead],
            col: st[lead + 1],
        })
    }
}

/// An additive mask on the host, read by the CPU kernel.
pub(crate) struct Bias<T> {
    pub(crate) data: Vec<T>,
    pub(crate) at: Addressing,
}

impl<T: candle_core::WithDType> Bias<T> {
    pub(super) fn new(op: &'static str, m: &Tensor, shape: &AttentionShape) -> Result<Self> {
        let add = additive(op, m, T::DTYPE)?;
        let data = add.flatten_all().ctx(op)?.to_vec1::<T>().ctx(op)?;
        Ok(Bias {
            data,
            at: Addressing::new(op, m.dims(), shape)?,
        })
    }

    /// Slice `h`'s values of query row `i`, addressed by key.
    #[inline(always)]
    pub(crate) fn row(&self, h: usize, i: usize) -> (&[T], usize) {
        (
            &self.data[self.at.offsets[h] + i * self.at.row..],
            self.at.col,
        )
    }
}
