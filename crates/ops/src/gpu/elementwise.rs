//! The element-wise kernels of `crates/ops/cuda/elementwise.cu`: the activations (ReLU
//! and the `Activation` family share them) and the residual add, with and without ReLU,
//! in f32, f64, bf16 and f16 (the 16-bit ones compute in float).

use candle_core::Tensor;

use super::cuda::{
    contiguous, device_of, dispatch_with_16_bit, empty_like, launch, output, suffix_with_16_bit,
    view, wrap, Source,
};
use super::Launch;
use crate::error::Result;

/// `<base>_forward_<dtype>` of crates/ops/cuda/elementwise.cu on `x`.
pub(crate) fn activation_forward(
    op: &'static str,
    base: &str,
    x: &Tensor,
    slope: f64,
) -> Result<Tensor> {
    let n = x.elem_count();
    if n == 0 {
        return empty_like(op, x, x.dims());
    }
    let (dev, x) = (device_of(op, x)?, contiguous(op, x)?);
    let name = format!("{base}_forward_{}", suffix_with_16_bit(op, x.dtype())?);
    dispatch_with_16_bit!(op, x.dtype(), T, S => {
        let (xs, xl) = x.storage_and_layout();
        let xv = view::<T>(op, &xs, xl)?;
        let mut y = output::<T>(op, &dev, n)?;
        let (len, slope) = (n as i64, slope as S);
        launch!(op, dev, Source::Elementwise, name, Launch::elementwise(n), [&xv, &mut y, &len, &slope]);
        Ok(wrap(y, &dev, x.dims()))
    })
}

/// `<base>_backward_<dtype>`: the input gradient from the output gradient and the saved
/// input (or output).
pub(crate) fn activation_backward(
    op: &'static str,
    base: &str,
    grad_y: &Tensor,
    saved: &Tensor,
    slope: f64,
) -> Result<Tensor> {
    let n = grad_y.elem_count();
    if n == 0 {
        return empty_like(op, grad_y, grad_y.dims());
    }
    let dev = device_of(op, grad_y)?;
    let (g, s) = (contiguous(op, grad_y)?, contiguous(op, saved)?);
    let name = format!("{base}_backward_{}", suffix_with_16_bit(op, g.dtype())?);
    dispatch_with_16_bit!(op, g.dtype(), T, S => {
        let ((gs, gl), (ss, sl)) = (g.storage_and_layout(), s.storage_and_layout());
        let (gv, sv) = (view::<T>(op, &gs, gl)?, view::<T>(op, &ss, sl)?);
        let mut dx = output::<T>(op, &dev, n)?;
        let (len, slope) = (n as i64, slope as S);
        launch!(op, dev, Source::Elementwise, name, Launch::elementwise(n), [&gv, &sv, &mut dx, &len, &slope]);
        Ok(wrap(dx, &dev, g.dims()))
    })
}

/// `add` or `add_relu` of two tensors of one shape and dtype.
pub(crate) fn binary(op: &'static str, base: &str, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let n = a.elem_count();
    if n == 0 {
        return empty_like(op, a, a.dims());
    }
    let dev = device_of(op, a)?;
    let (a, b) = (contiguous(op, a)?, contiguous(op, b)?);
    let name = format!("{base}_{}", suffix_with_16_bit(op, a.dtype())?);
    dispatch_with_16_bit!(op, a.dtype(), T, _S => {
        let ((as_, al), (bs, bl)) = (a.storage_and_layout(), b.storage_and_layout());
        let (av, bv) = (view::<T>(op, &as_, al)?, view::<T>(op, &bs, bl)?);
        let mut y = output::<T>(op, &dev, n)?;
        let len = n as i64;
        launch!(op, dev, Source::Elementwise, name, Launch::elementwise(n), [&av, &bv, &mut y, &len]);
        Ok(wrap(y, &dev, a.dims()))
    })
}
