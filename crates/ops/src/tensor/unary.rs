//! Element-wise functions of one tensor, as `torch.exp`, `torch.log`, `torch.sqrt`,
//! `torch.rsqrt`, `torch.pow(x, exponent)`, `torch.abs`, `torch.neg`, `torch.clamp`,
//! `x + c` and `torch.full_like` (`x * c` is the graph's `scale`), with their gradients.

use candle_core::Tensor;

use super::candle;
use crate::error::{OpError, Result};

/// Which function (the kernel's identity; [`Unary`] carries the settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryFn {
    /// `exp(x)`.
    Exp,
    /// `ln(x)`.
    Log,
    /// `√x`.
    Sqrt,
    /// `1/√x`.
    Rsqrt,
    /// `|x|`.
    Abs,
    /// `-x`.
    Neg,
    /// `x^p` for a constant `p`.
    Pow,
    /// `x` limited to `[min, max]`.
    Clamp,
    /// `x + c` for a constant `c`.
    AddScalar,
    /// A constant of `x`'s shape.
    Fill,
}

impl UnaryFn {
    /// The forward kernel's name.
    pub fn name(self) -> &'static str {
        use UnaryFn::*;
        match self {
            Exp => "Exp",
            Log => "Log",
            Sqrt => "Sqrt",
            Rsqrt => "Rsqrt",
            Abs => "Abs",
            Neg => "Neg",
            Pow => "Pow",
            Clamp => "Clamp",
            AddScalar => "AddScalar",
            Fill => "Fill",
        }
    }

    /// The gradient kernel's name.
    pub fn backward_name(self) -> &'static str {
        use UnaryFn::*;
        match self {
            Exp => "ExpBackward",
            Log => "LogBackward",
            Sqrt => "SqrtBackward",
            Rsqrt => "RsqrtBackward",
            Abs => "AbsBackward",
            Neg => "NegBackward",
            Pow => "PowBackward",
            Clamp => "ClampBackward",
            AddScalar => "AddScalarBackward",
            Fill => "FillBackward",
        }
    }
}

/// An element-wise function with its constants.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Unary {
    /// `exp(x)`.
    Exp,
    /// `ln(x)`.
    Log,
    /// `√x`.
    Sqrt,
    /// `1/√x`.
    Rsqrt,
    /// `|x|`; its gradient at 0 is 0, as PyTorch's.
    Abs,
    /// `-x`.
    Neg,
    /// `x^exponent`.
    Pow(f64),
    /// `x` limited to `[min, max]` (either bound optional); the gradient passes where
    /// `min < x < max` (0 at a bound), as PyTorch's.
    Clamp {
        /// The lower bound.
        min: Option<f64>,
        /// The upper bound.
        max: Option<f64>,
    },
    /// `x + c`.
    AddScalar(f64),
    /// `c` everywhere, of `x`'s shape and dtype (no gradient).
    Fill(f64),
}

/// What a unary gradient reads beside the output gradient.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Saved {
    /// Nothing: the gradient is a constant multiple of the output gradient.
    Nothing,
    /// The input `x`.
    Input,
    /// The output `y` (cheaper where the function's derivative is a function of it).
    Output,
}

impl Unary {
    /// The kernel's identity.
    pub fn kind(self) -> UnaryFn {
        match self {
            Unary::Exp => UnaryFn::Exp,
            Unary::Log => UnaryFn::Log,
            Unary::Sqrt => UnaryFn::Sqrt,
            Unary::Rsqrt => UnaryFn::Rsqrt,
            Unary::Abs => UnaryFn::Abs,
            Unary::Neg => UnaryFn::Neg,
            Unary::Pow(_) => UnaryFn::Pow,
            Unary::Clamp { .. } => UnaryFn::Clamp,
            Unary::AddScalar(_) => UnaryFn::AddScalar,
            Unary::Fill(_) => UnaryFn::Fill,
        }
    }

    /// The builder call's name (`exp`, `clamp`, ...), for errors.
    pub fn op_name(self) -> &'static str {
        match self {
            Unary::Exp => "exp",
            Unary::Log => "log",
            Unary::Sqrt => "sqrt",
            Unary::Rsqrt => "rsqrt",
            Unary::Abs => "abs",
            Unary::Neg => "neg",
            Unary::Pow(_) => "pow",
            Unary::Clamp { .. } => "clamp",
            Unary::AddScalar(_) => "add_scalar",
            Unary::Fill(_) => "full_like",
        }
    }

    /// An error for a constant that is not finite (or a clamp with `min > max`).
    pub fn check(self) -> Result<()> {
        let op = self.op_name();
        let bad = |what: &str, v: f64| {
            Err(OpError::invalid(
                op,
                format!("{what} must be finite, got {v}"),
            ))
        };
        match self {
            Unary::Pow(p) if !p.is_finite() => bad("the exponent", p),
            Unary::AddScalar(c) | Unary::Fill(c) if !c.is_finite() => bad("the constant", c),
            Unary::Clamp { min, max } => {
                for v in min.iter().chain(max.iter()) {
                    if v.is_nan() {
                        return bad("a bound", *v);
                    }
                }
                if min.is_none() && max.is_none() {
                    return Err(OpError::invalid(
                        op,
                        "at least one of min and max is needed",
                    ));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Whether a gradient flows through it (every function but `Fill`).
    pub fn differentiable(self) -> bool {
        !matches!(self, Unary::Fill(_))
    }

    /// What the gradient reads beside the output gradient.
    pub fn saved(self) -> Saved {
        match self {
            Unary::Exp | Unary::Sqrt | Unary::Rsqrt => Saved::Output,
            Unary::Log | Unary::Abs | Unary::Pow(_) | Unary::Clamp { .. } => Saved::Input,
            Unary::Neg | Unary::AddScalar(_) | Unary::Fill(_) => Saved::Nothing,
        }
    }

    /// FLOPs of the forward over `elements` values (a transcendental counts as one).
    pub fn flops(self, elements: usize) -> u64 {
        let per = match self {
            Unary::Rsqrt | Unary::Clamp { .. } => 2,
            Unary::Fill(_) => 0,
            _ => 1,
        };
        per * elements as u64
    }

    /// FLOPs of the gradient over `elements` values.
    pub fn backward_flops(self, elements: usize) -> u64 {
        let per = match self {
            Unary::Neg | Unary::AddScalar(_) | Unary::Fill(_) => 1,
            Unary::Rsqrt | Unary::Pow(_) => 4,
            _ => 2,
        };
        per * elements as u64
    }

    /// The function of `x`.
    pub fn forward(self, x: &Tensor) -> Result<Tensor> {
        let op = self.op_name();
        let c = candle(op);
        let y = match self {
            Unary::Exp => x.exp(),
            Unary::Log => x.log(),
            Unary::Sqrt => x.sqrt(),
            Unary::Rsqrt => x.sqrt().and_then(|s| s.recip()),
            Unary::Abs => x.abs(),
            Unary::Neg => x.neg(),
            Unary::Pow(p) => pow(x, p),
            Unary::Clamp { min, max } => clamp(x, min, max),
            Unary::AddScalar(v) => x.affine(1.0, v),
            Unary::Fill(v) => x.zeros_like().and_then(|z| z.affine(1.0, v)),
        };
        y.map_err(c)
    }

    /// The gradient for output gradient `gy`, with `saved` the input or output that
    /// [`saved`](Unary::saved) names (ignored otherwise).
    pub fn backward(self, gy: &Tensor, saved: Option<&Tensor>) -> Result<Tensor> {
        let op = self.op_name();
        let need =
            || saved.ok_or_else(|| OpError::invalid(op, "the gradient needs the saved tensor"));
        let g = match self {
            Unary::Exp => gy.mul(need()?),
            Unary::Log => gy.div(need()?),
            Unary::Sqrt => need()?.recip().and_then(|r| gy.mul(&r)?.affine(0.5, 0.0)),
            Unary::Rsqrt => {
                let y = need()?;
                y.sqr()
                    .and_then(|y2| gy.mul(&y2.mul(y)?)?.affine(-0.5, 0.0))
            }
            Unary::Abs => need()?.sign().and_then(|s| gy.mul(&s)),
            Unary::Neg => gy.neg(),
            Unary::Pow(0.0) => gy.zeros_like(),
            Unary::Pow(p) => pow(need()?, p - 1.0).and_then(|d| gy.mul(&d)?.affine(p, 0.0)),
            Unary::Clamp { min, max } => {
                let x = need()?;
                let mut keep = x.ones_like();
                if let Some(lo) = min {
                    keep = keep.and_then(|k| k.mul(&x.gt(lo)?.to_dtype(x.dtype())?));
                }
                if let Some(hi) = max {
                    keep = keep.and_then(|k| k.mul(&x.lt(hi)?.to_dtype(x.dtype())?));
                }
                keep.and_then(|k| gy.mul(&k))
            }
            Unary::AddScalar(_) => Ok(gy.clone()),
            Unary::Fill(_) => gy.zeros_like(),
        };
        g.map_err(candle(op))
    }
}

/// `x^p` with C's `pow` (as PyTorch's): a negative base with an integer exponent has a
/// real value.
fn pow(x: &Tensor, p: f64) -> candle_core::Result<Tensor> {
    match p {
        1.0 => Ok(x.clone()),
        2.0 => x.sqr(),
        _ => x.powf(p),
    }
}

/// `x` limited to `[min, max]`; a NaN stays NaN, as in PyTorch.
fn clamp(x: &Tensor, min: Option<f64>, max: Option<f64>) -> candle_core::Result<Tensor> {
    let mut y = x.clone();
    if let Some(lo) = min {
        y = y.maximum(lo)?;
    }
    if let Some(hi) = max {
        y = y.minimum(hi)?;
    }
    Ok(y)
}
