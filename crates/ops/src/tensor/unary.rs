//! Element-wise functions of one tensor, as `torch.exp`, `torch.log`, `torch.sqrt`,
//! `torch.rsqrt`, `torch.pow(x, exponent)`, `torch.abs`, `torch.neg`, `torch.sin`,
//! `torch.cos`, `torch.clamp`,
//! `x + c` and `torch.full_like` (`x * c` is the graph's `scale`), with their gradients.

use candle_core::Tensor;

use super::candle;
use crate::cpu::{self, dispatch_float, Float};
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
    /// `sin(x)`.
    Sin,
    /// `cos(x)`.
    Cos,
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
            Sin => "Sin",
            Cos => "Cos",
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
            Sin => "SinBackward",
            Cos => "CosBackward",
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
    /// `sin(x)` (radians).
    Sin,
    /// `cos(x)` (radians).
    Cos,
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
            Unary::Sin => UnaryFn::Sin,
            Unary::Cos => UnaryFn::Cos,
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
            Unary::Sin => "sin",
            Unary::Cos => "cos",
            Unary::Pow(_) => "pow",
            Unary::Clamp { .. } => "clamp",
            Unary::AddScalar(_) => "add_scalar",
            Unary::Fill(_) => "full_like",
        }
    }

    /// An error for a constant that is not finite (or a clamp with `min > max`).
    pub fn check(self) -> Result<()> {
        let op = self.op_name();
        let bad = |what: &str, v: f64| Err(crate::invalid!(op, "{what} must be finite, got {v}"));
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
            Unary::Sin | Unary::Cos => Saved::Input,
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
        if crate::cpu::on_cpu_kernel(x) {
            return dispatch_float!(op, x.dtype(), cpu_forward(self, x));
        }
        let c = candle(op);
        let y = match self {
            Unary::Exp => x.exp(),
            Unary::Log => x.log(),
            Unary::Sqrt => x.sqrt(),
            Unary::Rsqrt => x.sqrt().and_then(|s| s.recip()),
            Unary::Abs => x.abs(),
            Unary::Neg => x.neg(),
            Unary::Sin => x.sin(),
            Unary::Cos => x.cos(),
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
        let s = match self.saved() {
            Saved::Nothing => Some(gy),
            _ => saved.filter(|s| s.dtype() == gy.dtype() && s.dims() == gy.dims()),
        };
        if let (true, Some(s)) = (crate::cpu::on_cpu_kernel(gy), s) {
            return dispatch_float!(op, gy.dtype(), cpu_backward(self, gy, s));
        }
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
            Unary::Sin => need()?.cos().and_then(|c| gy.mul(&c)),
            Unary::Cos => need()?.sin().and_then(|s| gy.mul(&s)?.neg()),
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

// wick's CPU kernels (f32 and f64): one pass each, branch-free where the function allows,
// so that the loops vectorize.

/// `u(x)`.
fn cpu_forward<T: Float>(u: Unary, x: &Tensor) -> Result<Tensor> {
    let op = u.op_name();
    let c = T::from_f64;
    match u {
        Unary::Exp => cpu::map::<T>(op, x, move |v| v.exp()),
        Unary::Log => cpu::map::<T>(op, x, move |v| v.ln()),
        Unary::Sqrt => cpu::map::<T>(op, x, move |v| v.sqrt()),
        Unary::Rsqrt => cpu::map::<T>(op, x, move |v| T::ONE / v.sqrt()),
        Unary::Abs => cpu::map::<T>(op, x, move |v| v.abs()),
        Unary::Neg => cpu::map::<T>(op, x, move |v| -v),
        Unary::Sin => cpu::map::<T>(op, x, move |v| v.sin()),
        Unary::Cos => cpu::map::<T>(op, x, move |v| v.cos()),
        Unary::Pow(1.0) => cpu::map::<T>(op, x, move |v| v),
        Unary::Pow(2.0) => cpu::map::<T>(op, x, move |v| v * v),
        Unary::Pow(p) => cpu::map::<T>(op, x, move |v| v.powf(c(p))),
        Unary::Clamp { min, max } => {
            let (lo, hi) = bounds::<T>(min, max);
            // Comparisons with NaN are false: a NaN stays NaN, as PyTorch's. Two selects,
            // no branch, so the loop vectorizes.
            cpu::map::<T>(op, x, move |v| {
                let v = if v < lo { lo } else { v };
                if v > hi {
                    hi
                } else {
                    v
                }
            })
        }
        Unary::AddScalar(k) => {
            let k = c(k);
            cpu::map::<T>(op, x, move |v| v + k)
        }
        Unary::Fill(k) => cpu::tensor(op, vec![c(k); x.elem_count()], x.dims()),
    }
}

/// The gradient of `u` for output gradient `gy`, with `s` the input or output that
/// [`Unary::saved`] names.
fn cpu_backward<T: Float>(u: Unary, gy: &Tensor, s: &Tensor) -> Result<Tensor> {
    let op = u.op_name();
    let (zero, half) = (T::ZERO, T::from_f64(0.5));
    match u {
        Unary::Exp => cpu::zip_map::<T>(op, gy, s, move |g, y| g * y),
        Unary::Log => cpu::zip_map::<T>(op, gy, s, move |g, x| g / x),
        Unary::Sqrt => cpu::zip_map::<T>(op, gy, s, move |g, y| g * half / y),
        Unary::Rsqrt => cpu::zip_map::<T>(op, gy, s, move |g, y| -(g * half * y * y * y)),
        Unary::Abs => cpu::zip_map::<T>(op, gy, s, move |g, x| {
            let pos = if x > zero { g } else { zero };
            if x < zero {
                -g
            } else {
                pos
            }
        }),
        Unary::Neg => cpu::map::<T>(op, gy, move |g| -g),
        Unary::Sin => cpu::zip_map::<T>(op, gy, s, move |g, x| g * x.cos()),
        Unary::Cos => cpu::zip_map::<T>(op, gy, s, move |g, x| -(g * x.sin())),
        Unary::Pow(0.0) => cpu::map::<T>(op, gy, move |_| zero),
        Unary::Pow(p) => {
            let (pt, q) = (T::from_f64(p), T::from_f64(p - 1.0));
            match p {
                2.0 => cpu::zip_map::<T>(op, gy, s, move |g, x| g * pt * x),
                _ => cpu::zip_map::<T>(op, gy, s, move |g, x| g * pt * x.powf(q)),
            }
        }
        Unary::Clamp { min, max } => {
            let (lo, hi) = bounds::<T>(min, max);
            cpu::zip_map::<T>(
                op,
                gy,
                s,
                move |g, x| if (x > lo) & (x < hi) { g } else { zero },
            )
        }
        Unary::AddScalar(_) => Ok(gy.clone()),
        Unary::Fill(_) => cpu::tensor(op, vec![zero; gy.elem_count()], gy.dims()),
    }
}

/// A clamp's bounds, infinite where absent.
fn bounds<T: Float>(min: Option<f64>, max: Option<f64>) -> (T, T) {
    let lo = T::from_f64(min.unwrap_or(f64::NEG_INFINITY));
    (lo, T::from_f64(max.unwrap_or(f64::INFINITY)))
}
