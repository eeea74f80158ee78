//! Masks and selection by mask: comparisons (`torch.eq`, `ne`, `lt`, `le`, `gt`, `ge`,
//! against a tensor with broadcasting or a scalar) giving `u8` masks, `torch.where` and
//! `Tensor.masked_fill`, with their gradients.

use candle_core::{DType, Tensor};

use super::{candle, cpu_kernels};
use crate::broadcast::{broadcast_shape, sum_to_shape};
use crate::cpu::dispatch_float;
use crate::error::Result;

/// An element-wise comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Comparison {
    /// `a == b`.
    Eq,
    /// `a != b`.
    Ne,
    /// `a < b`.
    Lt,
    /// `a <= b`.
    Le,
    /// `a > b`.
    Gt,
    /// `a >= b`.
    Ge,
}

impl Comparison {
    /// The kernel's name.
    pub fn name(self) -> &'static str {
        match self {
            Comparison::Eq => "Eq",
            Comparison::Ne => "Ne",
            Comparison::Lt => "Lt",
            Comparison::Le => "Le",
            Comparison::Gt => "Gt",
            Comparison::Ge => "Ge",
        }
    }

    /// The builder call's name.
    pub fn op_name(self) -> &'static str {
        match self {
            Comparison::Eq => "eq",
            Comparison::Ne => "ne",
            Comparison::Lt => "lt",
            Comparison::Le => "le",
            Comparison::Gt => "gt",
            Comparison::Ge => "ge",
        }
    }

    fn candle_op(self) -> candle_core::op::CmpOp {
        use candle_core::op::CmpOp;
        match self {
            Comparison::Eq => CmpOp::Eq,
            Comparison::Ne => CmpOp::Ne,
            Comparison::Lt => CmpOp::Lt,
            Comparison::Le => CmpOp::Le,
            Comparison::Gt => CmpOp::Gt,
            Comparison::Ge => CmpOp::Ge,
        }
    }
}

/// What a comparison compares against.
#[derive(Debug, Clone, Copy)]
pub enum Rhs<'a> {
    /// A tensor, broadcast against the other.
    Tensor(&'a Tensor),
    /// A scalar.
    Scalar(f64),
}

/// `a cmp b` as a `u8` mask (1 where true), broadcasting.
pub fn compare(cmp: Comparison, a: &Tensor, b: Rhs<'_>) -> Result<Tensor> {
    let op = cmp.op_name();
    let c = candle(op);
    match b {
        Rhs::Scalar(v) => a.cmp(v, cmp.candle_op()).map_err(c),
        Rhs::Tensor(b) => {
            let shape = broadcast_shape(op, a.dims(), b.dims())?;
            let (a, b) = (
                a.broadcast_as(shape.as_slice()),
                b.broadcast_as(shape.as_slice()),
            );
            a.and_then(|a| a.cmp(&b?, cmp.candle_op())).map_err(c)
        }
    }
}

/// An error unless `dtype` can be a mask (`u8`, as comparisons give).
pub fn check_mask_dtype(op: &'static str, dtype: DType) -> Result<()> {
    if dtype != DType::U8 {
        return Err(crate::invalid!(
            op,
            "the mask must be u8 (as comparisons give), got {dtype:?}"
        ));
    }
    Ok(())
}

/// The shape of `where(cond, a, b)`: the three broadcast together.
pub fn where_shape(cond: &[usize], a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let ab = broadcast_shape("where", a, b)?;
    broadcast_shape("where", cond, &ab)
}

/// `torch.where(cond, a, b)`: `a` where `cond` is non-zero, else `b`, broadcasting.
pub fn where_(cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let c = candle("where");
    let shape = where_shape(cond.dims(), a.dims(), b.dims())?;
    check_mask_dtype("where", cond.dtype())?;
    if crate::cpu::on_cpu_kernel(a) && a.dtype() == b.dtype() && crate::cpu::on_cpu_kernel(b) {
        return dispatch_float!("where", a.dtype(), cpu_kernels::where_(cond, a, b, &shape));
    }
    let s = shape.as_slice();
    let (cond, a, b) = (cond.broadcast_as(s), a.broadcast_as(s), b.broadcast_as(s));
    cond.and_then(|m| m.where_cond(&a?, &b?)).map_err(c)
}

/// `where`'s gradient to `a` (`to_a`) or `b`: `gy` where that operand was chosen, summed
/// to `shape`.
pub fn where_backward(gy: &Tensor, cond: &Tensor, to_a: bool, shape: &[usize]) -> Result<Tensor> {
    let c = candle("where");
    if crate::cpu::on_cpu_kernel(gy) && cond.dtype() == DType::U8 {
        let g = dispatch_float!(
            "where",
            gy.dtype(),
            cpu_kernels::where_chosen(gy, cond, to_a)
        )?;
        return sum_to_shape("where", &g, shape);
    }
    let cond = cond.broadcast_as(gy.dims()).map_err(&c)?;
    let zeros = gy.zeros_like().map_err(&c)?;
    let g = if to_a {
        cond.where_cond(gy, &zeros)
    } else {
        cond.where_cond(&zeros, gy)
    };
    sum_to_shape("where", &g.map_err(c)?, shape)
}

/// An error unless `mask` broadcasts to `x`'s shape (PyTorch's `masked_fill` rule).
pub fn check_masked_fill(x: &[usize], mask: &[usize]) -> Result<()> {
    let shape = broadcast_shape("masked_fill", x, mask)?;
    if shape != x {
        return Err(crate::invalid!(
            "masked_fill",
            "the mask {mask:?} does not broadcast to the input {x:?}"
        ));
    }
    Ok(())
}

/// `x.masked_fill(mask, value)`: `value` where `mask` is non-zero.
pub fn masked_fill(x: &Tensor, mask: &Tensor, value: f64) -> Result<Tensor> {
    let c = candle("masked_fill");
    check_masked_fill(x.dims(), mask.dims())?;
    if crate::cpu::on_cpu_kernel(x) && mask.dtype() == DType::U8 {
        return dispatch_float!(
            "masked_fill",
            x.dtype(),
            cpu_kernels::masked_fill(x, mask, value)
        );
    }
    // One element broadcast to `x`'s shape: no full-size constant is written.
    let fill = Tensor::new(value, x.device())
        .and_then(|v| v.to_dtype(x.dtype()))
        .and_then(|v| v.broadcast_as(x.dims()))
        .map_err(&c)?;
    mask.broadcast_as(x.dims())
        .and_then(|m| m.where_cond(&fill, x))
        .map_err(c)
}

/// `masked_fill`'s gradient: `gy` where the mask is zero, which is `gy` filled with 0
/// where the mask is non-zero.
pub fn masked_fill_backward(gy: &Tensor, mask: &Tensor) -> Result<Tensor> {
    masked_fill(gy, mask, 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KernelPath;
    use candle_core::Device;

    /// A finite fill through a broadcast mask: `value` where the mask row is set, `x`
    /// elsewhere, the same on wick's CPU kernel and on candle's generic path.
    #[test]
    fn a_finite_fill_lands_where_the_mask_is_set_on_both_paths() {
        let x = Tensor::arange(0f32, 6., &Device::Cpu)
            .and_then(|t| t.reshape((2, 3)))
            .unwrap();
        let mask = Tensor::new(&[[1u8], [0]], &Device::Cpu).unwrap();
        let want = vec![vec![2.5f32, 2.5, 2.5], vec![3., 4., 5.]];
        for path in [KernelPath::Auto, KernelPath::Generic] {
            let y = path.scope(|| masked_fill(&x, &mask, 2.5)).unwrap();
            assert_eq!(y.to_vec2::<f32>().unwrap(), want, "{path:?}");
        }
    }
}
