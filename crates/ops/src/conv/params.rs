//! A convolution's settings ([`Conv2dParams`]), its sizes derived once from the input and
//! weight shapes ([`Geom`]), and what it applies to its output as it writes it
//! ([`Epilogue`]).

use candle_core::Tensor;

use crate::error::{OpError, Result};
use crate::shape::{nchw, window_out};

pub(super) const OP: &str = "conv2d";

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
pub(super) struct Geom {
    pub(super) n: usize,
    pub(super) c_in: usize,
    pub(super) h: usize,
    pub(super) w: usize,
    pub(super) c_out: usize,
    pub(super) kh: usize,
    pub(super) kw: usize,
    pub(super) oh: usize,
    pub(super) ow: usize,
    pub(super) groups: usize,
    pub(super) p: Conv2dParams,
    /// How its GEMMs multiply: float32, or bfloat16 products (autocast).
    pub(super) products: crate::bf16::Products,
}

impl Geom {
    pub(super) fn cin_g(&self) -> usize {
        self.c_in / self.groups
    }
    pub(super) fn cout_g(&self) -> usize {
        self.c_out / self.groups
    }
    /// Rows of the im2col matrix of one group: cin_g * kh * kw.
    pub(super) fn k(&self) -> usize {
        self.cin_g() * self.kh * self.kw
    }
    /// Output pixels per image.
    pub(super) fn pixels(&self) -> usize {
        self.oh * self.ow
    }
    /// A 1x1, stride-1, unpadded convolution: its im2col matrix is the input itself.
    pub(super) fn is_pointwise(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.p.stride == [1, 1] && self.p.padding == [0, 0]
    }
}

impl Conv2dParams {
    /// What kind of convolution these settings make with a weight of shape
    /// `[O, C/groups, KH, KW]`: depthwise (one input channel per group), grouped, 1x1
    /// (dense, any stride), or `None` for any other dense convolution.
    pub fn variant(&self, weight_shape: &[usize]) -> Option<crate::KernelVariant> {
        use crate::KernelVariant as V;
        match *weight_shape {
            [_, 1, _, _] if self.groups > 1 => Some(V::DepthwiseConv),
            _ if self.groups > 1 => Some(V::GroupedConv),
            [_, _, 1, 1] => Some(V::PointwiseConv),
            _ => None,
        }
    }

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

    pub(super) fn geom(&self, input: &[usize], weight: &[usize]) -> Result<Geom> {
        let [n, c_in, h, w] = nchw(OP, "input", input)?;
        let [c_out, cin_g, kh, kw] = nchw(OP, "weight", weight)?;
        if self.groups == 0 {
            return Err(OpError::invalid(OP, "groups must be at least 1, got 0"));
        }
        if c_in % self.groups != 0 || c_out % self.groups != 0 {
            return Err(crate::invalid!(OP, "input channels ({c_in}, input {input:?}) and output channels ({c_out}, weight {weight:?}) must both divide by groups ({})", self.groups));
        }
        if cin_g * self.groups != c_in {
            return Err(crate::invalid!(OP, "channel mismatch: input {input:?} has {c_in} channels but weight {weight:?} expects {} ({cin_g} per group x {} groups)", cin_g * self.groups, self.groups));
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
            products: crate::bf16::Products::Native,
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
            return Err(crate::invalid!(
                OP,
                "bias must have shape [{}] for weight {weight:?}, got {bias:?}",
                weight.first().copied().unwrap_or(0)
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
    /// ReLU last (`x <= 0` gives 0; NaN stays NaN, as in [`relu`](crate::relu::relu)).
    pub relu: bool,
}
