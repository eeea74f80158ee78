//! Transposed convolution (PyTorch's `ConvTranspose2d`): the input gradient of a
//! convolution, run forward. Its three passes are the convolution's own kernels with the
//! roles swapped, so each runs wick's CPU convolution (im2col + GEMM, depthwise, Winograd
//! where they apply) or candle's on other devices.
//!
//! The weight has PyTorch's layout `[C_in, C_out / groups, kh, kw]`: that of the
//! convolution from the output back to the input.

use candle_core::Tensor;

use super::{conv2d, conv2d_backward_data, conv2d_backward_filter, Conv2dParams};
use crate::error::{OpError, Result};
use crate::shape::nchw;

const OP: &str = "conv_transpose2d";

/// The output shape of a transposed convolution of `input` `[N, C_in, H, W]` by `weight`
/// `[C_in, C_out / groups, kh, kw]`: `(H - 1)·stride - 2·padding + dilation·(k - 1) +
/// output_padding + 1` per side. `output_padding` must be below the stride (or the
/// dilation), as in PyTorch.
pub fn output_shape(
    input: &[usize],
    weight: &[usize],
    p: &Conv2dParams,
    output_padding: [usize; 2],
) -> Result<[usize; 4]> {
    let [n, c_in, h, w] = nchw(OP, "input", input)?;
    let [wc_in, cout_g, kh, kw] = nchw(OP, "weight", weight)?;
    if wc_in != c_in {
        return Err(crate::invalid!(OP, "input has {c_in} channels but the weight {weight:?} expects {wc_in} ([C_in, C_out / groups, kh, kw])"));
    }
    let side = |i: usize, len: usize, k: usize| -> Result<usize> {
        let op = output_padding[i];
        if op >= p.stride[i].max(p.dilation[i]) {
            return Err(crate::invalid!(
                OP,
                "output padding {op} must be smaller than the stride {} or the dilation {}",
                p.stride[i],
                p.dilation[i]
            ));
        }
        let full = (len.max(1) - 1) * p.stride[i] + p.dilation[i] * (k - 1) + op + 1;
        full.checked_sub(2 * p.padding[i])
            .filter(|v| *v > 0)
            .ok_or_else(|| {
                crate::invalid!(
                    OP,
                    "padding {} leaves no output from an input side of {len}",
                    p.padding[i]
                )
            })
    };
    let out = [n, cout_g * p.groups, side(0, h, kh)?, side(1, w, kw)?];
    // The convolution back from the output must give the input's shape.
    let back = p.output_shape(&out, weight)?;
    if back != [n, c_in, h, w] {
        return Err(crate::invalid!(
            OP,
            "no output size maps back to the input {input:?} with these settings"
        ));
    }
    Ok(out)
}

/// Forward: `y = conv_transpose(x, weight) + bias`.
pub fn forward(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    p: &Conv2dParams,
    output_padding: [usize; 2],
) -> Result<Tensor> {
    let out = output_shape(x.dims(), weight.dims(), p, output_padding)?;
    let y = conv2d_backward_data(x, weight, &out, p)?;
    match bias {
        Some(b) => {
            crate::shape::same(OP, "bias", b.dims(), "output channels", &[out[1]])?;
            let b = b
                .reshape((1, out[1], 1, 1))
                .map_err(|e| OpError::candle(OP, e))?;
            y.broadcast_add(&b).map_err(|e| OpError::candle(OP, e))
        }
        None => Ok(y),
    }
}

/// The input gradient: the output gradient convolved with the weight.
pub fn backward_data(grad_y: &Tensor, weight: &Tensor, p: &Conv2dParams) -> Result<Tensor> {
    conv2d(grad_y, weight, None, p)
}

/// The weight gradient.
pub fn backward_filter(
    grad_y: &Tensor,
    x: &Tensor,
    weight_shape: &[usize],
    p: &Conv2dParams,
) -> Result<Tensor> {
    conv2d_backward_filter(x, grad_y, weight_shape, p)
}

/// FLOPs of the forward pass (those of the convolution it transposes).
pub fn flops(out: &[usize], weight: &[usize], p: &Conv2dParams) -> u64 {
    p.flops(out, weight)
}
