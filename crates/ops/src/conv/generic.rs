//! The device-generic convolution: candle's `conv2d` and `conv_transpose2d`, which run on
//! every candle device (cuDNN or im2col + cuBLAS on CUDA). The output padding is handled
//! here so that strided non-square inputs come out right.

use candle_core::{Device, Tensor};

use super::params::{Geom, OP};
use crate::error::{CandleContext, OpError, Result};

pub(super) fn forward(g: &Geom, x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (s, pad, d) = isotropic(g, x.device())?;
    x.conv2d(w, pad, s, d, g.groups).ctx(OP)
}

pub(super) fn backward_data(g: &Geom, grad_out: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (s, pad, d) = isotropic(g, grad_out.device())?;
    // The unpadded transposed convolution covers padded rows 0..full_h; input row i is
    // padded row i + pad. Rows past full_h were never read by a window (the stride skipped
    // them): their gradient is zero. candle's conv_transpose2d has one output padding for
    // both axes, which cannot express that for non-square inputs, so crop here instead.
    let full_h = (g.oh - 1) * s + d * (g.kh - 1) + 1;
    let full_w = (g.ow - 1) * s + d * (g.kw - 1) + 1;
    let per_group = |grad: &Tensor, w: &Tensor| -> Result<Tensor> {
        let dx = grad.conv_transpose2d(w, 0, 0, s, d).ctx(OP)?;
        let dx = dx
            .pad_with_zeros(2, 0, (pad + g.h).saturating_sub(full_h))
            .ctx(OP)?;
        let dx = dx
            .pad_with_zeros(3, 0, (pad + g.w).saturating_sub(full_w))
            .ctx(OP)?;
        dx.narrow(2, pad, g.h)
            .ctx(OP)?
            .narrow(3, pad, g.w)
            .ctx(OP)?
            .contiguous()
            .ctx(OP)
    };
    by_groups(g.groups, (grad_out, 1), (w, 0), 1, per_group)
}

pub(super) fn backward_filter(g: &Geom, grad_out: &Tensor, x: &Tensor) -> Result<Tensor> {
    let (s, pad, d) = isotropic(g, x.device())?;
    // dW[o, c, i, j] = sum_{n, y, x} grad[n, o, y, x] * xpad[n, c, y*s + i*d, x*s + j*d]:
    // a convolution of x (channels as batch) with grad (as kernel), stride d, dilation s.
    let per_group = |grad: &Tensor, x: &Tensor| -> Result<Tensor> {
        let xt = x.transpose(0, 1).ctx(OP)?.contiguous().ctx(OP)?;
        let gt = grad.transpose(0, 1).ctx(OP)?.contiguous().ctx(OP)?;
        let dw = xt.conv2d(&gt, pad, d, s, 1).ctx(OP)?; // [cin_g, cout_g, >=kh, >=kw]
        let dw = dw.narrow(2, 0, g.kh).ctx(OP)?.narrow(3, 0, g.kw).ctx(OP)?;
        dw.transpose(0, 1).ctx(OP)?.contiguous().ctx(OP)
    };
    by_groups(g.groups, (grad_out, 1), (x, 1), 0, per_group)
}

/// Runs `f` on each group's slices of `a` and `b` (each split along the given dimension)
/// and concatenates the results along `cat_dim`; one call when there is one group.
fn by_groups(
    groups: usize,
    (a, a_dim): (&Tensor, usize),
    (b, b_dim): (&Tensor, usize),
    cat_dim: usize,
    f: impl Fn(&Tensor, &Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    if groups == 1 {
        return f(a, b);
    }
    let a_parts = a.chunk(groups, a_dim).ctx(OP)?;
    let b_parts = b.chunk(groups, b_dim).ctx(OP)?;
    let parts = a_parts
        .iter()
        .zip(&b_parts)
        .map(|(x, y)| f(x, y))
        .collect::<Result<Vec<_>>>()?;
    Tensor::cat(&parts, cat_dim).ctx(OP)
}

/// (stride, padding, dilation) when each is the same along H and W (candle's conv takes
/// one value for both), else an error.
fn isotropic(g: &Geom, device: &Device) -> Result<(usize, usize, usize)> {
    let p = &g.p;
    if p.stride[0] != p.stride[1] || p.padding[0] != p.padding[1] || p.dilation[0] != p.dilation[1]
    {
        return Err(unsupported_anisotropic(device));
    }
    Ok((p.stride[0], p.padding[0], p.dilation[0]))
}

fn unsupported_anisotropic(device: &Device) -> OpError {
    OpError::Unsupported {
        op: OP,
        what: format!(
            "different stride, padding or dilation along H and W on {:?} (candle's conv takes one value for both)",
            device.location()
        ),
    }
}
