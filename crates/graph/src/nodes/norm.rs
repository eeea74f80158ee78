//! Softmax (as an op), layer norm, RMS norm and group norm: recording, backward rules,
//! execution (kernels in `wick_ops::norm`).

use std::sync::Arc;

use wick_ops::norm::{self, NormGrads};
use wick_ops::tensor::dim_index;
use wick_ops::Kernel;

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::{arg, args, one, BackwardCtx, Inputs, KernelResult, NodeOp, ValueId};

/// Softmax along `dim`. in: x; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct Softmax {
    /// The dimension normalised.
    pub dim: usize,
}

/// Its gradient. in: grad_y, y; out: grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct SoftmaxBackward {
    /// The dimension normalised.
    pub dim: usize,
}

/// Which normalisation a [`Norm`] node runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NormKind {
    /// Over the last dimension.
    Layer,
    /// Over the channels of an `[N, C, ...]` input (torchvision's `LayerNorm2d`).
    LayerChannels,
    /// Root mean square over the last dimension, not centred (no bias).
    Rms,
    /// Over groups of channels of an `[N, C, ...]` input.
    Group(usize),
}

impl NormKind {
    /// The builder method's name, for errors.
    pub fn op_name(self) -> &'static str {
        match self {
            NormKind::Layer => "layer_norm",
            NormKind::LayerChannels => "layer_norm2d",
            NormKind::Rms => "rms_norm",
            NormKind::Group(_) => "group_norm",
        }
    }
}

/// Layer, RMS or group norm. in: x, `[weight]`, `[bias]`; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct Norm {
    /// Which normalisation.
    pub kind: NormKind,
    /// Added to the variance (to the mean square for RMS norm).
    pub eps: f64,
    /// Whether a weight input follows x.
    pub has_weight: bool,
    /// Whether a bias input follows (x and the weight).
    pub has_bias: bool,
}

/// Its gradients. in: grad_y, x, `[weight]`; out: grad_x, `[grad_weight]`, `[grad_bias]`.
#[derive(Debug, Clone, PartialEq)]
pub struct NormBackward {
    /// The forward node's settings.
    pub forward: Norm,
}

impl GraphBuilder {
    /// `F.softmax(x, dim)` (`-1`: the last dimension), computed stably.
    pub fn softmax(&mut self, x: ValueId, dim: isize) -> Result<ValueId> {
        self.forward_only("softmax")?;
        let xs = self.shape(x).to_vec();
        let dim = dim_index("softmax", xs.len(), dim).map_err(self.build_err("softmax"))?;
        let flops = norm::softmax_flops(&xs);
        let new = vec![("softmax", xs, self.dtype_of(x))];
        Ok(self.push(Arc::new(Softmax { dim }), vec![x], new, vec![], flops)[0])
    }

    /// Layer norm over the last dimension with an optional affine `weight` and `bias` of
    /// that size.
    pub fn layer_norm(
        &mut self,
        x: ValueId,
        weight: Option<ValueId>,
        bias: Option<ValueId>,
        eps: f64,
    ) -> Result<ValueId> {
        self.record_norm(NormKind::Layer, x, weight, bias, eps)
    }

    /// Layer norm over the channels of an `[N, C, ...]` input, with an optional
    /// per-channel `weight` and `bias`: torchvision's `LayerNorm2d` (ConvNeXt's), the same
    /// values as permuting to channels-last around [`GraphBuilder::layer_norm`] without
    /// the two copies.
    pub fn layer_norm2d(
        &mut self,
        x: ValueId,
        weight: Option<ValueId>,
        bias: Option<ValueId>,
        eps: f64,
    ) -> Result<ValueId> {
        self.record_norm(NormKind::LayerChannels, x, weight, bias, eps)
    }

    /// `F.rms_norm(x, [d], weight, eps)` (`nn.RMSNorm`'s forward): `x / √(mean(x²) + eps)
    /// · weight` over the last dimension `d`, with an optional `weight` of that size.
    /// `eps: None` takes PyTorch's default, the machine epsilon of `x`'s dtype
    /// (`torch.finfo(dtype).eps`).
    pub fn rms_norm(
        &mut self,
        x: ValueId,
        weight: Option<ValueId>,
        eps: Option<f64>,
    ) -> Result<ValueId> {
        let dtype = self.dtype_of(x);
        let eps = eps
            .or_else(|| norm::rms_norm_default_eps(dtype))
            .ok_or_else(|| wick_ops::invalid!("rms_norm", "the input is {dtype:?}, not a float"))
            .map_err(self.build_err("rms_norm"))?;
        self.record_norm(NormKind::Rms, x, weight, None, eps)
    }

    /// Group norm of an `[N, C, ...]` input in `groups` groups, with an optional
    /// per-channel `weight` and `bias`.
    pub fn group_norm(
        &mut self,
        x: ValueId,
        groups: usize,
        weight: Option<ValueId>,
        bias: Option<ValueId>,
        eps: f64,
    ) -> Result<ValueId> {
        self.record_norm(NormKind::Group(groups), x, weight, bias, eps)
    }

    /// Checks a norm's input and affine parameters against its kind, naming the op.
    fn check_norm(
        &self,
        kind: NormKind,
        x: ValueId,
        weight: Option<ValueId>,
        bias: Option<ValueId>,
    ) -> Result<()> {
        let name = kind.op_name();
        self.forward_only(name)?;
        let xs = self.shape(x);
        let w = weight.map(|w| self.shape(w));
        let b = bias.map(|b| self.shape(b));
        match kind {
            NormKind::Layer => norm::check_layer_norm(xs, w, b),
            NormKind::LayerChannels => norm::check_layer_norm2d(xs, w, b),
            NormKind::Rms => norm::check_rms_norm(xs, w),
            NormKind::Group(groups) => norm::check_group_norm(xs, groups, w).and_then(|()| {
                b.map_or(Ok(()), |b| {
                    wick_ops::shape::same(name, "bias", b, "channels", &[xs[1]])
                })
            }),
        }
        .map_err(self.build_err(name))
    }

    /// Checks and records a norm node.
    fn record_norm(
        &mut self,
        kind: NormKind,
        x: ValueId,
        weight: Option<ValueId>,
        bias: Option<ValueId>,
        eps: f64,
    ) -> Result<ValueId> {
        self.check_norm(kind, x, weight, bias)?;
        let op = Norm {
            kind,
            eps,
            has_weight: weight.is_some(),
            has_bias: bias.is_some(),
        };
        let xs = self.shape(x).to_vec();
        let flops = norm::norm_flops(&xs);
        let mut inputs = vec![x];
        inputs.extend(weight);
        inputs.extend(bias);
        let new = ("norm", xs, self.dtype_of(x));
        Ok(self.push_one(Arc::new(op), inputs, new, flops))
    }
}

impl NodeOp for Softmax {
    fn kernel(&self) -> Kernel {
        Kernel::SoftmaxForward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        one(norm::softmax(arg(inputs, 0, "softmax")?, self.dim)?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let (gy, y) = (ctx.grad_y()?, ctx.output(0));
        let xs = ctx.shape(y);
        let flops = norm::softmax_flops(&xs);
        let op = SoftmaxBackward { dim: self.dim };
        ctx.record_input_grad(op, vec![gy, y], "grad.softmax", flops)
    }
}

impl NodeOp for SoftmaxBackward {
    fn kernel(&self) -> Kernel {
        Kernel::SoftmaxBackward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [gy, y] = args(inputs, "softmax")?;
        one(norm::softmax_backward(gy, y, self.dim)?)
    }
}

impl Norm {
    fn op_name(&self) -> &'static str {
        self.kind.op_name()
    }
}

impl NodeOp for Norm {
    fn kernel(&self) -> Kernel {
        match self.kind {
            NormKind::Layer | NormKind::LayerChannels => Kernel::LayerNormForward,
            NormKind::Rms => Kernel::RMSNormForward,
            NormKind::Group(_) => Kernel::GroupNormForward,
        }
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let name = self.op_name();
        let x = arg(inputs, 0, name)?;
        let w = if self.has_weight {
            Some(arg(inputs, 1, name)?)
        } else {
            None
        };
        let b = if self.has_bias {
            Some(arg(inputs, 1 + usize::from(self.has_weight), name)?)
        } else {
            None
        };
        one(match self.kind {
            NormKind::Layer => norm::layer_norm(x, w, b, self.eps)?,
            NormKind::LayerChannels => norm::layer_norm2d(x, w, b, self.eps)?,
            NormKind::Rms => norm::rms_norm(x, w, self.eps)?,
            NormKind::Group(g) => norm::group_norm(x, g, w, b, self.eps)?,
        })
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let x = ctx.input(0);
        let (xs, dt) = (ctx.shape(x), ctx.dtype());
        let mut inputs = vec![gy, x];
        let mut outs = vec![("grad.norm.x", xs.clone(), dt)];
        let mut targets = vec![x];
        if self.has_weight {
            let w = ctx.input(1);
            inputs.push(w);
            outs.push(("grad.norm.w", ctx.shape(w), dt));
            targets.push(w);
        }
        if self.has_bias {
            let b = ctx.input(1 + usize::from(self.has_weight));
            outs.push(("grad.norm.b", ctx.shape(b), dt));
            targets.push(b);
        }
        let flops = norm::norm_backward_flops(&xs);
        let g = ctx.record(
            NormBackward {
                forward: self.clone(),
            },
            inputs,
            outs,
            flops,
        );
        for (v, grad) in targets.into_iter().zip(g) {
            if ctx.needs_grad(v) {
                ctx.contribute(v, grad);
            }
        }
        Ok(())
    }
}

impl NodeOp for NormBackward {
    fn kernel(&self) -> Kernel {
        match self.forward.kind {
            NormKind::Layer | NormKind::LayerChannels => Kernel::LayerNormBackward,
            NormKind::Rms => Kernel::RMSNormBackward,
            NormKind::Group(_) => Kernel::GroupNormBackward,
        }
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let f = &self.forward;
        let name = f.op_name();
        let [gy, x] = args(inputs, name)?;
        let w = if f.has_weight {
            Some(arg(inputs, 2, name)?)
        } else {
            None
        };
        let NormGrads {
            input,
            weight,
            bias,
        } = match f.kind {
            NormKind::Layer => norm::layer_norm_backward(gy, x, w, f.has_bias, f.eps)?,
            NormKind::LayerChannels => norm::layer_norm2d_backward(gy, x, w, f.has_bias, f.eps)?,
            NormKind::Rms => norm::rms_norm_backward(gy, x, w, f.eps)?,
            NormKind::Group(g) => norm::group_norm_backward(gy, x, g, w, f.has_bias, f.eps)?,
        };
        let mut out = vec![Some(input)];
        if f.has_weight {
            out.push(weight);
        }
        if f.has_bias {
            out.push(bias);
        }
        Ok(out)
    }
}
