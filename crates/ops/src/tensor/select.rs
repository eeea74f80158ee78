//! Data moved by range or by index, as `torch.narrow`, `Tensor.expand`,
//! `torch.index_select`, `torch.gather` and `F.embedding` (with `padding_idx`), with their
//! gradients (zeros with the gradient placed, sums over expanded dimensions, and
//! scatter-adds).

use candle_core::{DType, Tensor};

use super::{candle, cpu_kernels, dense, dim_index, is_index_dtype};
use crate::error::{OpError, Result};
use crate::route::{route, Route};

/// The shape of `narrow(x, dim, start, length)`; `dim` already non-negative.
pub fn narrow_shape(shape: &[usize], dim: usize, start: usize, len: usize) -> Result<Vec<usize>> {
    let n = shape[dim];
    if start.checked_add(len).is_none_or(|end| end > n) {
        return Err(crate::invalid!(
            "narrow",
            "start {start} + length {len} is past dimension {dim} of size {n} (shape {shape:?})"
        ));
    }
    let mut out = shape.to_vec();
    out[dim] = len;
    Ok(out)
}

/// `x` from `start` for `len` along `dim`, copied.
pub fn narrow(x: &Tensor, dim: usize, start: usize, len: usize) -> Result<Tensor> {
    dense(
        "narrow",
        x.narrow(dim, start, len).map_err(candle("narrow"))?,
    )
}

/// `narrow`'s gradient: `gy` placed at `start` along `dim` in zeros of `shape`.
pub fn narrow_backward(gy: &Tensor, shape: &[usize], dim: usize, start: usize) -> Result<Tensor> {
    let c = candle("narrow");
    let len = gy.dim(dim).map_err(&c)?;
    let mut parts = Vec::with_capacity(3);
    let zeros = |n: usize| {
        let mut s = shape.to_vec();
        s[dim] = n;
        Tensor::zeros(s, gy.dtype(), gy.device())
    };
    if start > 0 {
        parts.push(zeros(start).map_err(&c)?);
    }
    parts.push(gy.clone());
    let after = shape[dim] - start - len;
    if after > 0 {
        parts.push(zeros(after).map_err(&c)?);
    }
    Tensor::cat(&parts, dim).map_err(c)
}

/// `torch.split` with the pieces' `sizes` along `dim` (summing to its size): each piece
/// copied.
pub fn split(x: &Tensor, dim: usize, sizes: &[usize]) -> Result<Vec<Tensor>> {
    let mut start = 0;
    sizes
        .iter()
        .map(|&len| {
            let part = narrow(x, dim, start, len);
            start += len;
            part
        })
        .collect()
}

/// `split`'s gradient: the pieces' gradients joined along `dim`, zeros for a piece with
/// none (`None`), into one tensor of `shape`, in one pass.
pub fn split_backward(
    grads: &[Option<&Tensor>],
    shape: &[usize],
    dim: usize,
    sizes: &[usize],
) -> Result<Tensor> {
    let c = candle("split");
    let Some(like) = grads.iter().flatten().next() else {
        return Err(OpError::invalid("split", "no piece has a gradient"));
    };
    let parts: Vec<Tensor> = grads
        .iter()
        .zip(sizes)
        .map(|(g, &len)| match g {
            Some(g) => Ok((*g).clone()),
            None => {
                let mut s = shape.to_vec();
                s[dim] = len;
                Tensor::zeros(s, like.dtype(), like.device())
            }
        })
        .collect::<candle_core::Result<_>>()
        .map_err(&c)?;
    Tensor::cat(&parts, dim).map_err(c)
}

/// The shape of `x.expand(sizes)`, PyTorch's way: new dimensions in front, `-1` keeps a
/// dimension, and only dimensions of size 1 grow.
pub fn expand_shape(shape: &[usize], sizes: &[isize]) -> Result<Vec<usize>> {
    let err = |m: String| OpError::invalid("expand", m);
    if sizes.len() < shape.len() {
        return Err(err(format!(
            "{} sizes {sizes:?} for shape {shape:?}: at least {} are needed",
            sizes.len(),
            shape.len()
        )));
    }
    let lead = sizes.len() - shape.len();
    let mut out = Vec::with_capacity(sizes.len());
    for (i, &s) in sizes.iter().enumerate() {
        let have = if i >= lead {
            Some(shape[i - lead])
        } else {
            None
        };
        let n = match (s, have) {
            (-1, Some(h)) => h,
            (-1, None) => return Err(err(format!("size -1 at new dimension {i} of {sizes:?}"))),
            (s, _) if s < 0 => return Err(err(format!("size {s} in {sizes:?}"))),
            (s, Some(h)) if h != 1 && h != s as usize => {
                return Err(err(format!(
                    "dimension {i} has size {h} in {shape:?}, which can only expand from 1 (to {s})"
                )))
            }
            (s, _) => s as usize,
        };
        out.push(n);
    }
    Ok(out)
}

/// `x` broadcast to `shape`, copied.
pub fn expand(x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    const OP: &str = "expand";
    if route(x.device()) == Route::Cpu {
        // The shape rule first: the rows assume `x` broadcasts to `shape`.
        if crate::broadcast::broadcast_shape(OP, x.dims(), shape)? != shape {
            return Err(crate::invalid!(
                OP,
                "{:?} does not broadcast to {shape:?}",
                x.dims()
            ));
        }
        match x.dtype() {
            DType::F32 => return cpu_kernels::expand::<f32>(OP, x, shape),
            DType::F64 => return cpu_kernels::expand::<f64>(OP, x, shape),
            DType::U8 => return cpu_kernels::expand::<u8>(OP, x, shape),
            DType::U32 => return cpu_kernels::expand::<u32>(OP, x, shape),
            DType::I64 => return cpu_kernels::expand::<i64>(OP, x, shape),
            _ => {}
        }
    }
    dense("expand", x.broadcast_as(shape).map_err(candle("expand"))?)
}

/// An error unless `index` has an index dtype; `what` names it.
pub fn check_index_dtype(op: &'static str, what: &str, dtype: DType) -> Result<()> {
    if !is_index_dtype(dtype) {
        return Err(crate::invalid!(
            op,
            "{what} must be integer (u8, u32 or i64), got {dtype:?}"
        ));
    }
    Ok(())
}

/// An error naming the first index outside `0..size` (or equal to `skip`, which is allowed).
pub fn check_index_range(
    op: &'static str,
    index: &Tensor,
    size: usize,
    skip: Option<i64>,
) -> Result<()> {
    let values = index
        .flatten_all()
        .and_then(|t| t.to_dtype(DType::I64))
        .and_then(|t| t.to_vec1::<i64>())
        .map_err(candle(op))?;
    let bad = values
        .iter()
        .enumerate()
        .find(|(_, &v)| (v < 0 || v as usize >= size) && Some(v) != skip);
    if let Some((i, v)) = bad {
        return Err(crate::invalid!(
            op,
            "index {v} (element {i} of the indices) is out of range for size {size}"
        ));
    }
    Ok(())
}

/// `x.index_select(dim, index)` with `index` 1-D.
pub fn index_select(x: &Tensor, dim: usize, index: &Tensor) -> Result<Tensor> {
    check_index_range(
        "index_select",
        index,
        x.dim(dim).map_err(candle("index_select"))?,
        None,
    )?;
    x.index_select(index, dim).map_err(candle("index_select"))
}

/// `index_select`'s gradient: `gy` index-added into zeros of `shape`.
pub fn index_select_backward(
    gy: &Tensor,
    shape: &[usize],
    dim: usize,
    index: &Tensor,
) -> Result<Tensor> {
    let c = candle("index_select");
    let z = Tensor::zeros(shape, gy.dtype(), gy.device()).map_err(&c)?;
    z.index_add(index, &gy.contiguous().map_err(&c)?, dim)
        .map_err(c)
}

/// The shape check of `torch.gather(x, dim, index)`: `index` of `x`'s rank, no larger
/// than `x` in any dimension but `dim`; the output has `index`'s shape.
pub fn gather_shape(x: &[usize], dim: isize, index: &[usize]) -> Result<(usize, Vec<usize>)> {
    let d = dim_index("gather", x.len(), dim)?;
    let fits = index.len() == x.len()
        && index
            .iter()
            .zip(x)
            .enumerate()
            .all(|(i, (&a, &b))| i == d || a <= b);
    if !fits {
        return Err(crate::invalid!(
            "gather",
            "index shape {index:?} does not fit input shape {x:?} along dimension {d}"
        ));
    }
    Ok((d, index.to_vec()))
}

/// `torch.gather(x, dim, index)`.
pub fn gather(x: &Tensor, dim: usize, index: &Tensor) -> Result<Tensor> {
    check_index_range("gather", index, x.dim(dim).map_err(candle("gather"))?, None)?;
    let index = index.contiguous().map_err(candle("gather"))?;
    x.contiguous()
        .and_then(|x| x.gather(&index, dim))
        .map_err(candle("gather"))
}

/// `gather`'s gradient: `gy` scatter-added into zeros of `shape`.
pub fn gather_backward(gy: &Tensor, shape: &[usize], dim: usize, index: &Tensor) -> Result<Tensor> {
    let c = candle("gather");
    let z = Tensor::zeros(shape, gy.dtype(), gy.device()).map_err(&c)?;
    let index = index.contiguous().map_err(&c)?;
    z.scatter_add(&index, &gy.contiguous().map_err(&c)?, dim)
        .map_err(c)
}

/// The shape of `F.embedding(indices, weight)`: `indices`' shape then the embedding size.
pub fn embedding_shape(indices: &[usize], weight: &[usize]) -> Result<Vec<usize>> {
    let [_, d] = weight else {
        return Err(crate::invalid!(
            "embedding",
            "the weight must be [num_embeddings, embedding_dim], got {weight:?}"
        ));
    };
    let mut out = indices.to_vec();
    out.push(*d);
    Ok(out)
}

/// `F.embedding(indices, weight)`: the rows of `weight` (any index shape).
pub fn embedding(indices: &Tensor, weight: &Tensor) -> Result<Tensor> {
    let c = candle("embedding");
    let (rows, d) = weight.dims2().map_err(&c)?;
    check_index_range("embedding", indices, rows, None)?;
    let flat = indices.flatten_all().map_err(&c)?;
    let mut out = indices.dims().to_vec();
    out.push(d);
    weight
        .index_select(&flat, 0)
        .and_then(|t| t.reshape(out))
        .map_err(c)
}

/// `embedding`'s weight gradient: each index's row of `gy` added to its weight row; the
/// row `padding_idx` gets none.
pub fn embedding_backward(
    gy: &Tensor,
    indices: &Tensor,
    weight_shape: &[usize],
    padding_idx: Option<usize>,
) -> Result<Tensor> {
    let c = candle("embedding");
    let d = weight_shape[1];
    let flat = indices.flatten_all().map_err(&c)?;
    let rows = gy
        .reshape(((), d))
        .and_then(|g| g.contiguous())
        .map_err(&c)?;
    let rows = match padding_idx {
        Some(p) => {
            let keep = flat
                .ne(p as f64)
                .and_then(|m| m.to_dtype(gy.dtype()))
                .map_err(&c)?;
            rows.broadcast_mul(&keep.unsqueeze(1).map_err(&c)?)
                .map_err(&c)?
        }
        None => rows,
    };
    let z = Tensor::zeros(weight_shape, gy.dtype(), gy.device()).map_err(&c)?;
    z.index_add(&flat, &rows, 0).map_err(c)
}
