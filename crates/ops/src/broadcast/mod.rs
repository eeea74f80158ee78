//! Element-wise arithmetic with NumPy/PyTorch broadcasting (`a * s` for a per-channel
//! scale `[N, C, 1, 1]` in squeeze-excitation, `[C, 1, 1]` in layer scale), its gradients
//! (summed back to each operand's shape) and multiplication by a constant.

mod op;
mod plane_kernels;
pub(crate) mod row_kernels;
pub(crate) mod rows;

pub use op::{BinaryOp, Operand};

use candle_core::Tensor;

use crate::cpu::{self, dispatch_float, Float};
use crate::error::{CandleContext, Result};

/// The broadcast shape of `a` and `b` by PyTorch's rules: dimensions are aligned from the
/// right, and each pair must be equal or contain a 1.
pub fn broadcast_shape(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| {
        if i < rank - s.len() {
            1
        } else {
            s[i - (rank - s.len())]
        }
    };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y => Ok(x),
            (1, y) => Ok(y),
            (x, 1) => Ok(x),
            _ => Err(crate::invalid!(
                op,
                "shapes {a:?} and {b:?} do not broadcast (dimension {i} differs and neither is 1)"
            )),
        })
        .collect()
}

/// `a op b` with broadcasting.
pub fn forward(op: BinaryOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let name = op.name();
    same_dtype(name, a, b)?;
    if a.dims() == b.dims() && cpu::on_cpu_kernel(a) {
        return dispatch_float!(name, a.dtype(), same_shape_cpu(op, a, b));
    }
    let out = broadcast_shape(name, a.dims(), b.dims())?;
    if cpu::on_cpu_kernel(a) {
        if let Some(p) = (a.dims() == out.as_slice())
            .then(|| plane_kernels::planes(a.dims(), b.dims()))
            .flatten()
        {
            return dispatch_float!(name, a.dtype(), plane_kernels::forward(op, a, b, false, &p));
        }
        if let Some(p) = (b.dims() == out.as_slice())
            .then(|| plane_kernels::planes(b.dims(), a.dims()))
            .flatten()
        {
            return dispatch_float!(name, a.dtype(), plane_kernels::forward(op, b, a, true, &p));
        }
    }
    if cpu::on_cpu_kernel(a) {
        return dispatch_float!(name, a.dtype(), row_kernels::binary(op, a, b, &out));
    }
    match op {
        BinaryOp::Add => a.broadcast_add(b),
        BinaryOp::Sub => a.broadcast_sub(b),
        BinaryOp::Mul => a.broadcast_mul(b),
        BinaryOp::Div => a.broadcast_div(b),
    }
    .ctx(name)
}

fn same_dtype(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(crate::invalid!(
            op,
            "operands have dtypes {:?} and {:?}",
            a.dtype(),
            b.dtype()
        ));
    }
    Ok(())
}

fn same_shape_cpu<T: Float>(op: BinaryOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    match op {
        BinaryOp::Add => cpu::zip_map::<T>(op.name(), a, b, |x, y| x + y),
        BinaryOp::Sub => cpu::zip_map::<T>(op.name(), a, b, |x, y| x - y),
        BinaryOp::Mul => cpu::zip_map::<T>(op.name(), a, b, |x, y| x * y),
        BinaryOp::Div => cpu::zip_map::<T>(op.name(), a, b, |x, y| x / y),
    }
}

/// The gradient of `a op b` for `operand`, given the output gradient `grad_y` (of the
/// broadcast shape), summed over the dimensions along which that operand was broadcast.
pub fn backward(
    op: BinaryOp,
    operand: Operand,
    grad_y: &Tensor,
    a: &Tensor,
    b: &Tensor,
) -> Result<Tensor> {
    let name = op.backward_name();
    let out = broadcast_shape(name, a.dims(), b.dims())?;
    crate::shape::same(
        name,
        "output gradient",
        grad_y.dims(),
        "broadcast output",
        &out,
    )?;
    let full = match (op, operand) {
        (BinaryOp::Add, _) | (BinaryOp::Sub, Operand::Lhs) => grad_y.clone(),
        (BinaryOp::Sub, Operand::Rhs) => grad_y.neg().ctx(name)?,
        (BinaryOp::Mul, Operand::Lhs) => forward(BinaryOp::Mul, grad_y, b)?,
        (BinaryOp::Mul, Operand::Rhs) => forward(BinaryOp::Mul, grad_y, a)?,
        (BinaryOp::Div, Operand::Lhs) => forward(BinaryOp::Div, grad_y, b)?,
        // d(a/b)/db = -a / b².
        (BinaryOp::Div, Operand::Rhs) => {
            let a_over_b2 = forward(BinaryOp::Div, &forward(BinaryOp::Div, a, b)?, b)?;
            forward(BinaryOp::Mul, grad_y, &a_over_b2)?
                .neg()
                .ctx(name)?
        }
    };
    let target = match operand {
        Operand::Lhs => a.dims(),
        Operand::Rhs => b.dims(),
    };
    sum_to_shape(name, &full, target)
}

/// Sums `t` over the dimensions along which a tensor of `shape` was broadcast to `t`'s
/// shape, giving a tensor of `shape`.
pub fn sum_to_shape(op: &'static str, t: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if t.dims() == shape {
        return Ok(t.clone());
    }
    if cpu::on_cpu_kernel(t) {
        if let Some(p) = plane_kernels::planes(t.dims(), shape) {
            let len = shape.iter().product();
            return dispatch_float!(
                op,
                t.dtype(),
                plane_kernels::reduce_planes(op, t, None, len, &p, shape)
            );
        }
        if broadcast_shape(op, t.dims(), shape)? != t.dims() {
            return Err(crate::invalid!(
                op,
                "{shape:?} does not broadcast to the gradient's {:?}",
                t.dims()
            ));
        }
        return dispatch_float!(op, t.dtype(), row_kernels::sum_to_shape(op, t, shape));
    }
    let lead = t.rank() - shape.len();
    let mut r = t.clone();
    for _ in 0..lead {
        r = r.sum(0).ctx(op)?;
    }
    for (d, &n) in shape.iter().enumerate() {
        if n == 1 && r.dim(d).ctx(op)? != 1 {
            r = r.sum_keepdim(d).ctx(op)?;
        }
    }
    Ok(r)
}

/// FLOPs of a binary op producing `shape`: one per element (division counted as one).
pub fn flops(shape: &[usize]) -> u64 {
    crate::shape::flop_count(1, shape)
}

/// FLOPs of one operand's gradient producing `out` elements: the product and the sum back.
pub fn backward_flops(op: BinaryOp, out: &[usize]) -> u64 {
    let per = match op {
        BinaryOp::Add | BinaryOp::Sub => 1,
        BinaryOp::Mul => 2,
        BinaryOp::Div => 4,
    };
    crate::shape::flop_count(per, out)
}

/// `x * factor`.
pub fn scale(x: &Tensor, factor: f64) -> Result<Tensor> {
    const OP: &str = "scale";
    if cpu::on_cpu_kernel(x) {
        return dispatch_float!(OP, x.dtype(), scale_cpu(x, factor));
    }
    (x * factor).ctx(OP)
}

fn scale_cpu<T: Float>(x: &Tensor, factor: f64) -> Result<Tensor> {
    let f = T::from_f64(factor);
    cpu::map::<T>("scale", x, |v| v * f)
}
