//! Upsampling (PyTorch's `F.interpolate` for 4-D inputs): nearest and bilinear
//! (`align_corners=False`), to an output size. Both are separable linear maps, `Y = A_h · X
//! · A_wᵀ` per plane, run as two matrix products (and their transposes for the gradient),
//! so every device runs them through its GEMM.

use candle_core::{Device, Tensor};

use crate::error::{OpError, Result};
use crate::shape::nchw;

const OP: &str = "upsample";

/// How an output pixel reads the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpsampleMode {
    /// The input pixel at `floor(o · in / out)` (PyTorch's `nearest`).
    Nearest,
    /// Bilinear, `align_corners=False`: source `(o + 0.5) · in / out - 0.5`, clamped at 0.
    Bilinear,
}

/// The `out × len` interpolation matrix along one axis.
fn axis(len: usize, out: usize, mode: UpsampleMode) -> Vec<f64> {
    let mut m = vec![0.0; out * len];
    let scale = len as f64 / out as f64;
    for o in 0..out {
        match mode {
            UpsampleMode::Nearest => {
                let i = ((o as f64 * scale).floor() as usize).min(len - 1);
                m[o * len + i] = 1.0;
            }
            UpsampleMode::Bilinear => {
                let src = ((o as f64 + 0.5) * scale - 0.5).max(0.0);
                let i0 = (src.floor() as usize).min(len - 1);
                let i1 = (i0 + 1).min(len - 1);
                let l = src - i0 as f64;
                m[o * len + i0] += 1.0 - l;
                m[o * len + i1] += l;
            }
        }
    }
    m
}

fn matrix(
    len: usize,
    out: usize,
    mode: UpsampleMode,
    like: &Tensor,
    device: &Device,
) -> Result<Tensor> {
    Tensor::from_vec(axis(len, out, mode), (out, len), device)
        .and_then(|t| t.to_dtype(like.dtype()))
        .map_err(|e| OpError::candle(OP, e))
}

/// Checks the sizes: a 4-D input and an output of at least one pixel.
pub fn check(input: &[usize], out: [usize; 2]) -> Result<[usize; 4]> {
    let dims = nchw(OP, "input", input)?;
    if out[0] == 0 || out[1] == 0 || dims[2] == 0 || dims[3] == 0 {
        return Err(crate::invalid!(
            OP,
            "cannot resample {}x{} to {}x{}",
            dims[2],
            dims[3],
            out[0],
            out[1]
        ));
    }
    Ok(dims)
}

/// `x` `[N, C, H, W]` resampled to `[N, C, out_h, out_w]`.
pub fn forward(x: &Tensor, out: [usize; 2], mode: UpsampleMode) -> Result<Tensor> {
    let [n, c, h, w] = check(x.dims(), out)?;
    let ah = matrix(h, out[0], mode, x, x.device())?;
    let aw = matrix(w, out[1], mode, x, x.device())?;
    let run = || -> candle_core::Result<Tensor> {
        let planes = x.reshape((n * c, h, w))?;
        let wide = planes.broadcast_matmul(&aw.t()?)?; // [NC, h, out_w]
        let y = ah.broadcast_left(n * c)?.matmul(&wide)?; // [NC, out_h, out_w]
        y.reshape((n, c, out[0], out[1]))
    };
    run().map_err(|e| OpError::candle(OP, e))
}

/// The gradient of an input of `[N, C, h, w]` from the output gradient `grad_y`.
pub fn backward(grad_y: &Tensor, input: [usize; 4], mode: UpsampleMode) -> Result<Tensor> {
    let [n, c, h, w] = input;
    let out = [grad_y.dims()[2], grad_y.dims()[3]];
    crate::shape::same(
        OP,
        "output gradient",
        grad_y.dims(),
        "output",
        &[n, c, out[0], out[1]],
    )?;
    let ah = matrix(h, out[0], mode, grad_y, grad_y.device())?;
    let aw = matrix(w, out[1], mode, grad_y, grad_y.device())?;
    let run = || -> candle_core::Result<Tensor> {
        let g = grad_y.reshape((n * c, out[0], out[1]))?;
        let narrow = g.broadcast_matmul(&aw)?; // [NC, out_h, w]
        let gx = ah.t()?.broadcast_left(n * c)?.matmul(&narrow)?; // [NC, h, w]
        gx.reshape((n, c, h, w))
    };
    run().map_err(|e| OpError::candle(OP, e))
}

/// FLOPs of either pass: two multiply-adds per output pixel and axis tap.
pub fn flops(input: &[usize], out: [usize; 2]) -> u64 {
    let (n, c, h, w) = (input[0], input[1], input[2], input[3]);
    (2 * n * c * (h * out[1] * w + out[0] * out[1] * h)) as u64
}
