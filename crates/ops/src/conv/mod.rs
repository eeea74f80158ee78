//! 2-D convolution (NCHW, OIHW weights): forward, input gradient, weight gradient, bias
//! gradient. This file holds the settings, shape inference, FLOP counts and the public
//! functions; the implementations live beside it:
//! - `cpu`: im2col + GEMM on the CPU, one driver for how every pass spreads over threads;
//! - `im2col`: the column matrices and their inverse;
//! - `generic`: candle's `conv2d` and `conv_transpose2d`, for every other device (and for
//!   the CPU under [`KernelPath::Generic`](crate::KernelPath)).

mod cpu;
mod depthwise;
mod generic;
mod im2col;
pub mod transpose;
mod winograd;
mod winograd_filter;

/// Which algorithm the CPU convolution may use, per thread (as
/// [`KernelPath`](crate::KernelPath)): a switch for tests and side-by-side measurements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConvAlgorithm {
    /// Winograd's F(2x2, 3x3) for 3x3 stride-1 convolutions with at least 16 channels in
    /// and out where it pays (forward and input gradient on 7x7+ outputs, weight gradient
    /// on 8x8 to 32x32 outputs), im2col + GEMM otherwise.
    #[default]
    Auto,
    /// im2col + GEMM (or a plain GEMM for 1x1 stride-1 convolutions) always.
    Im2col,
}

thread_local! {
    static ALGORITHM: std::cell::Cell<ConvAlgorithm> = std::cell::Cell::new(ConvAlgorithm::from_env());
}

impl ConvAlgorithm {
    /// Every thread's starting choice: `WICK_CONV_ALGORITHM=im2col` makes it
    /// [`Im2col`](ConvAlgorithm::Im2col) (for side-by-side runs of one binary); anything
    /// else, or nothing, [`Auto`](ConvAlgorithm::Auto).
    pub fn from_env() -> ConvAlgorithm {
        static CHOICE: std::sync::OnceLock<ConvAlgorithm> = std::sync::OnceLock::new();
        *CHOICE.get_or_init(|| match std::env::var("WICK_CONV_ALGORITHM").as_deref() {
            Ok("im2col") => ConvAlgorithm::Im2col,
            _ => ConvAlgorithm::Auto,
        })
    }

    /// The algorithm choice in force on this thread.
    pub fn current() -> ConvAlgorithm {
        ALGORITHM.with(|a| a.get())
    }

    /// Runs `f` with `self` in force on this thread, then restores the previous choice
    /// (also when `f` panics).
    pub fn scope<R>(self, f: impl FnOnce() -> R) -> R {
        struct Restore(ConvAlgorithm);
        impl Drop for Restore {
            fn drop(&mut self) {
                ALGORITHM.with(|a| a.set(self.0));
            }
        }
        let _restore = Restore(ALGORITHM.with(|a| a.replace(self)));
        f()
    }
}

use candle_core::Tensor;

use crate::cpu::{self as cpu_data, dispatch_float};
use crate::error::{CandleContext, OpError, Result};
use crate::kernel::{route, Route};
use crate::shape::{nchw, window_out};

const OP: &str = "conv2d";

/// The settings of a 2-D convolution, as in PyTorch's `nn.Conv2d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Conv2dParams {
    /// Stride along (H, W).
    pub stride: [usize; 2],
    /// Zero padding along (H, W), on both sides.
    pub padding: [usize; 2],
    /// Dilation along (H, W).
    pub dilation: [usize; 2],
    /// Number of groups; input and output channels must both divide by it.
    pub groups: usize,
}

impl Default for Conv2dParams {
    fn default() -> Self {
        Conv2dParams {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

/// The sizes of one convolution, derived once from the input and weight shapes.
#[derive(Debug, Clone, Copy)]
struct Geom {
    n: usize,
    c_in: usize,
    h: usize,
    w: usize,
    c_out: usize,
    kh: usize,
    kw: usize,
    oh: usize,
    ow: usize,
    groups: usize,
    p: Conv2dParams,
}

impl Geom {
    fn cin_g(&self) -> usize {
        self.c_in / self.groups
    }
    fn cout_g(&self) -> usize {
        self.c_out / self.groups
    }
    /// Rows of the im2col matrix of one group: cin_g * kh * kw.
    fn k(&self) -> usize {
        self.cin_g() * self.kh * self.kw
    }
    /// Output pixels per image.
    fn pixels(&self) -> usize {
        self.oh * self.ow
    }
    /// A 1x1, stride-1, unpadded convolution: its im2col matrix is the input itself.
    fn is_pointwise(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.p.stride == [1, 1] && self.p.padding == [0, 0]
    }
}

impl Conv2dParams {
    /// Settings with the given stride and padding (same along H and W), no dilation, one group.
    pub fn new(stride: usize, padding: usize) -> Self {
        Conv2dParams {
            stride: [stride, stride],
            padding: [padding, padding],
            ..Default::default()
        }
    }

    /// The same settings with dilation `d` along H and W.
    pub fn with_dilation(mut self, d: usize) -> Self {
        self.dilation = [d, d];
        self
    }

    /// The same settings with `groups` groups.
    pub fn with_groups(mut self, groups: usize) -> Self {
        self.groups = groups;
        self
    }

    fn geom(&self, input: &[usize], weight: &[usize]) -> Result<Geom> {
        let [n, c_in, h, w] = nchw(OP, "input", input)?;
        let [c_out, cin_g, kh, kw] = nchw(OP, "weight", weight)?;
        if self.groups == 0 {
            return Err(OpError::invalid(OP, "groups must be at least 1, got 0"));
        }
        if c_in % self.groups != 0 || c_out % self.groups != 0 {
            return Err(OpError::invalid(
                OP,
                format!(
                    "input channels ({c_in}, input {input:?}) and output channels ({c_out}, weight {weight:?}) must both divide by groups ({})",
                    self.groups
                ),
            ));
        }
        if cin_g * self.groups != c_in {
            return Err(OpError::invalid(
                OP,
                format!(
                    "channel mismatch: input {input:?} has {c_in} channels but weight {weight:?} expects {} ({cin_g} per group x {} groups)",
                    cin_g * self.groups,
                    self.groups
                ),
            ));
        }
        let oh = window_out(
            OP,
            "H",
            h,
            kh,
            self.stride[0],
            self.padding[0],
            self.dilation[0],
        )?;
        let ow = window_out(
            OP,
            "W",
            w,
            kw,
            self.stride[1],
            self.padding[1],
            self.dilation[1],
        )?;
        Ok(Geom {
            n,
            c_in,
            h,
            w,
            c_out,
            kh,
            kw,
            oh,
            ow,
            groups: self.groups,
            p: *self,
        })
    }

    /// The output shape for an input of shape `input` (N, C, H, W) and a weight of shape
    /// `weight` (C_out, C/groups, KH, KW), or an error naming the shapes.
    pub fn output_shape(&self, input: &[usize], weight: &[usize]) -> Result<[usize; 4]> {
        let g = self.geom(input, weight)?;
        Ok([g.n, g.c_out, g.oh, g.ow])
    }

    /// Checks a bias shape against a weight shape.
    pub fn check_bias(&self, weight: &[usize], bias: &[usize]) -> Result<()> {
        if bias.len() != 1 || weight.first() != bias.first() {
            return Err(OpError::invalid(
                OP,
                format!(
                    "bias must have shape [{}] for weight {weight:?}, got {bias:?}",
                    weight.first().copied().unwrap_or(0)
                ),
            ));
        }
        Ok(())
    }

    /// Multiply-adds times two of the forward pass; the input gradient and the weight
    /// gradient each cost the same.
    pub fn flops(&self, input: &[usize], weight: &[usize]) -> u64 {
        match self.geom(input, weight) {
            Ok(g) => {
                crate::shape::flop_count(2, &[g.n, g.c_out, g.oh, g.ow, g.cin_g(), g.kh, g.kw])
            }
            Err(_) => 0,
        }
    }
}

/// What a convolution applies to its output as it writes it, in this order: a
/// per-channel bias, a residual added element-wise, then ReLU (cuDNN's
/// `ConvolutionBiasActivationForward`). On the CPU it runs on each image's block right
/// after its GEMM, while the block is in cache, instead of as separate passes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Epilogue<'a> {
    /// `[C_out]`, added to every pixel of its channel.
    pub bias: Option<&'a Tensor>,
    /// The output's shape, added element-wise (a ResNet block's shortcut).
    pub residual: Option<&'a Tensor>,
    /// ReLU last (`x <= 0` gives 0; NaN stays NaN, as in [`relu`](crate::activation::relu)).
    pub relu: bool,
}

/// Convolution forward (`ConvForward`): `out = conv(x, weight) + bias`.
pub fn conv2d(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    p: &Conv2dParams,
) -> Result<Tensor> {
    let epilogue = Epilogue {
        bias,
        ..Default::default()
    };
    conv2d_fused(x, weight, &epilogue, p)
}

/// Convolution forward with an epilogue (`ConvBiasActivationForward`):
/// `out = relu?(conv(x, weight) + bias + residual)`.
pub fn conv2d_fused(
    x: &Tensor,
    weight: &Tensor,
    epilogue: &Epilogue<'_>,
    p: &Conv2dParams,
) -> Result<Tensor> {
    let g = p.geom(x.dims(), weight.dims())?;
    if let Some(b) = epilogue.bias {
        p.check_bias(weight.dims(), b.dims())?;
    }
    if let Some(r) = epilogue.residual {
        crate::shape::same(
            OP,
            "residual",
            r.dims(),
            "output",
            &[g.n, g.c_out, g.oh, g.ow],
        )?;
    }
    let mut others = vec![("weight", weight)];
    others.extend(epilogue.bias.map(|b| ("bias", b)));
    others.extend(epilogue.residual.map(|r| ("residual", r)));
    cpu_data::same_dtype(OP, x.dtype(), &others)?;
    match route(x.device()) {
        Route::Cpu => dispatch_float!(OP, x.dtype(), cpu::forward(&g, x, weight, epilogue)),
        Route::Cuda | Route::Generic => {
            let mut out = generic::forward(&g, x, weight)?;
            if let Some(b) = epilogue.bias {
                out = out
                    .broadcast_add(&b.reshape((1, g.c_out, 1, 1)).ctx(OP)?)
                    .ctx(OP)?;
            }
            if let Some(r) = epilogue.residual {
                out = (out + r).ctx(OP)?;
            }
            if epilogue.relu {
                out = crate::activation::relu(&out)?;
            }
            Ok(out)
        }
    }
}

/// FLOPs of an epilogue on an output of `shape`: one per element for each of bias,
/// residual and ReLU that it applies.
pub fn epilogue_flops(shape: &[usize], bias: bool, residual: bool, relu: bool) -> u64 {
    let per_element = u64::from(bias) + u64::from(residual) + u64::from(relu);
    crate::shape::flop_count(per_element, shape)
}

/// Convolution input gradient (`ConvBackwardData`): the gradient with respect to an input
/// of shape `input_shape`, given the output gradient and the weight.
pub fn conv2d_backward_data(
    grad_out: &Tensor,
    weight: &Tensor,
    input_shape: &[usize],
    p: &Conv2dParams,
) -> Result<Tensor> {
    let g = p.geom(input_shape, weight.dims())?;
    check_grad_out(&g, grad_out)?;
    cpu_data::same_dtype(OP, grad_out.dtype(), &[("weight", weight)])?;
    match route(grad_out.device()) {
        Route::Cpu => dispatch_float!(
            OP,
            grad_out.dtype(),
            cpu::backward_data(&g, grad_out, weight)
        ),
        Route::Cuda | Route::Generic => generic::backward_data(&g, grad_out, weight),
    }
}

/// Convolution weight gradient (`ConvBackwardFilter`) for a weight of shape `weight_shape`.
pub fn conv2d_backward_filter(
    grad_out: &Tensor,
    x: &Tensor,
    weight_shape: &[usize],
    p: &Conv2dParams,
) -> Result<Tensor> {
    let g = p.geom(x.dims(), weight_shape)?;
    check_grad_out(&g, grad_out)?;
    cpu_data::same_dtype(OP, grad_out.dtype(), &[("input", x)])?;
    match route(x.device()) {
        Route::Cpu => dispatch_float!(OP, x.dtype(), cpu::backward_filter(&g, grad_out, x)),
        Route::Cuda | Route::Generic => generic::backward_filter(&g, grad_out, x),
    }
}

/// Convolution bias gradient (`ConvBackwardBias`): the output gradient summed over batch,
/// height and width.
pub fn conv2d_backward_bias(grad_out: &Tensor) -> Result<Tensor> {
    nchw(OP, "output gradient", grad_out.dims())?;
    grad_out.sum((0, 2, 3)).ctx(OP)
}

/// FLOPs of the bias gradient for an output gradient of shape `grad_out`: one add per element.
pub fn conv2d_backward_bias_flops(grad_out: &[usize]) -> u64 {
    crate::shape::flop_count(1, grad_out)
}

fn check_grad_out(g: &Geom, grad_out: &Tensor) -> Result<()> {
    let expected = [g.n, g.c_out, g.oh, g.ow];
    if grad_out.dims() != expected {
        return Err(OpError::invalid(
            OP,
            format!(
                "output gradient has shape {:?}, expected {expected:?}",
                grad_out.dims()
            ),
        ));
    }
    Ok(())
}
