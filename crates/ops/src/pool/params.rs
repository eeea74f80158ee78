//! Pooling's settings, its output with the argmax, and one pooling's sizes ([`Geom`]).

use candle_core::Tensor;

use crate::error::Result;
use crate::shape::{nchw, window_out};

/// Max or average pooling: which function is called says which; this names it in errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// Max pooling (padding acts as -inf).
    Max,
    /// Average pooling (padding counts as zeros in the divisor).
    Avg,
}

impl PoolKind {
    /// The op's name as a user writes it (`max_pool2d`, `avg_pool2d`).
    pub fn op_name(self) -> &'static str {
        match self {
            PoolKind::Max => "max_pool2d",
            PoolKind::Avg => "avg_pool2d",
        }
    }
}

/// The window settings of a 2-D pooling layer (max or average alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pool2dParams {
    /// Window size along (H, W).
    pub kernel: [usize; 2],
    /// Stride along (H, W).
    pub stride: [usize; 2],
    /// Padding along (H, W), on both sides.
    pub padding: [usize; 2],
}

impl Pool2dParams {
    /// A square window of size `kernel` with the given stride and padding.
    pub fn new(kernel: usize, stride: usize, padding: usize) -> Self {
        Pool2dParams {
            kernel: [kernel, kernel],
            stride: [stride, stride],
            padding: [padding, padding],
        }
    }

    /// The output shape of a `kind` pool for an input of shape `input`, or an error naming
    /// the op and the shape.
    pub fn output_shape(&self, kind: PoolKind, input: &[usize]) -> Result<[usize; 4]> {
        let op = kind.op_name();
        let [n, c, h, w] = nchw(op, "input", input)?;
        for axis in 0..2 {
            if self.padding[axis] * 2 > self.kernel[axis] {
                return Err(crate::invalid!(
                    op,
                    "padding {:?} must be at most half the kernel {:?} (input {input:?})",
                    self.padding,
                    self.kernel
                ));
            }
        }
        let oh = window_out(
            op,
            "H",
            h,
            self.kernel[0],
            self.stride[0],
            self.padding[0],
            1,
        )?;
        let ow = window_out(
            op,
            "W",
            w,
            self.kernel[1],
            self.stride[1],
            self.padding[1],
            1,
        )?;
        Ok([n, c, oh, ow])
    }

    /// FLOPs of the forward pass, and of the backward pass alike: one per window element.
    pub fn flops(&self, input: &[usize]) -> u64 {
        match self.output_shape(PoolKind::Max, input) {
            Ok(out) => crate::shape::flop_count(1, &[&out[..], &self.kernel[..]].concat()),
            Err(_) => 0,
        }
    }
}

/// The result of a max-pool forward: the output and, per output element, the flat
/// `h*W + w` index of the chosen input element in its plane (u32, on the CPU).
#[derive(Debug, Clone)]
pub struct MaxPoolOutput {
    /// Pooled values.
    pub y: Tensor,
    /// Argmax indices (u32), as PyTorch's `return_indices=True` gives them.
    pub indices: Tensor,
}

/// Sizes of one pooling call.
#[derive(Debug, Clone, Copy)]
pub(super) struct Geom {
    pub(super) n: usize,
    pub(super) c: usize,
    pub(super) planes: usize,
    pub(super) h: usize,
    pub(super) w: usize,
    pub(super) oh: usize,
    pub(super) ow: usize,
    pub(super) p: Pool2dParams,
}

impl Geom {
    pub(super) fn new(kind: PoolKind, p: &Pool2dParams, input: &[usize]) -> Result<Self> {
        let [n, c, oh, ow] = p.output_shape(kind, input)?;
        Ok(Geom {
            n,
            c,
            planes: n * c,
            h: input[2],
            w: input[3],
            oh,
            ow,
            p: *p,
        })
    }

    /// The geometry of a backward pass, after checking that `grad_y` (and any
    /// `per_output` tensor, such as max-pool's indices) has the pooled output's shape.
    pub(super) fn for_backward(
        kind: PoolKind,
        p: &Pool2dParams,
        input: &[usize],
        outputs: &[(&str, &Tensor)],
    ) -> Result<Self> {
        let g = Geom::new(kind, p, input)?;
        let out = [g.n, g.c, g.oh, g.ow];
        for (what, t) in outputs {
            crate::shape::same(kind.op_name(), what, t.dims(), "pooled output", &out)?;
        }
        Ok(g)
    }
}

pub(super) const GAP: &str = "global_avg_pool";
