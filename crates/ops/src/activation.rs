//! The smooth and piecewise activations beyond ReLU: sigmoid, tanh, SiLU, GELU (exact and
//! tanh forms), ReLU6, hardswish, hardsigmoid and LeakyReLU, forward and backward, with
//! PyTorch's definitions, including its choices at the kinks: ReLU6's and hardsigmoid's
//! gradient is 0 at both ends of their linear range, hardswish's is 0 at -3 and 1 at 3.
//!
//! On the CPU the piecewise-linear ones run in the tensor's dtype, as PyTorch computes
//! them; f32 sigmoid and SiLU use a vectorisable `exp` within 2 ulp (results within 4
//! ulp); the others are computed in f64 per element and rounded once. The device-generic
//! path uses candle's tensor ops in the tensor's dtype.

use candle_core::{DType, Tensor};

use crate::activation_lanes::{lanes, wide_f32, GELU_TANH_C, SQRT_2_OVER_PI};
use crate::cpu::{self, dispatch_float, Float};
use crate::error::{CandleContext, Result};
use crate::route::{route, Route};

/// An activation function. [`LeakyRelu`](Activation::LeakyRelu)'s negative slope is a
/// setting of the graph node, not of the kernel's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Activation {
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `tanh(x)`.
    Tanh,
    /// `x * sigmoid(x)` (swish).
    Silu,
    /// `x * Φ(x)`, Φ the standard normal CDF (PyTorch's `approximate="none"`).
    Gelu,
    /// GELU's tanh approximation (PyTorch's `approximate="tanh"`).
    GeluTanh,
    /// `min(max(x, 0), 6)`.
    Relu6,
    /// `x * relu6(x + 3) / 6`.
    Hardswish,
    /// `relu6(x + 3) / 6`.
    Hardsigmoid,
    /// `x` for `x > 0`, else `slope * x`.
    LeakyRelu,
}

impl Activation {
    /// Every activation, in declaration order.
    pub const ALL: [Activation; 9] = [
        Activation::Sigmoid,
        Activation::Tanh,
        Activation::Silu,
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::Relu6,
        Activation::Hardswish,
        Activation::Hardsigmoid,
        Activation::LeakyRelu,
    ];

    /// The forward kernel's name (`Sigmoid`, `GELU`, `Hardswish`...).
    pub fn name(self) -> &'static str {
        match self {
            Activation::Sigmoid => "Sigmoid",
            Activation::Tanh => "Tanh",
            Activation::Silu => "SiLU",
            Activation::Gelu => "GELU",
            Activation::GeluTanh => "GELUTanh",
            Activation::Relu6 => "ReLU6",
            Activation::Hardswish => "Hardswish",
            Activation::Hardsigmoid => "Hardsigmoid",
            Activation::LeakyRelu => "LeakyReLU",
        }
    }

    /// The backward kernel's name (`SigmoidBackward`...).
    pub fn backward_name(self) -> &'static str {
        match self {
            Activation::Sigmoid => "SigmoidBackward",
            Activation::Tanh => "TanhBackward",
            Activation::Silu => "SiLUBackward",
            Activation::Gelu => "GELUBackward",
            Activation::GeluTanh => "GELUTanhBackward",
            Activation::Relu6 => "ReLU6Backward",
            Activation::Hardswish => "HardswishBackward",
            Activation::Hardsigmoid => "HardsigmoidBackward",
            Activation::LeakyRelu => "LeakyReLUBackward",
        }
    }

    /// The name of its kernels in `crates/ops/cuda/elementwise.cu`
    /// (`<name>_forward_f32`, `<name>_backward_f64`...).
    pub fn cuda_kernel(self) -> &'static str {
        match self {
            Activation::Sigmoid => "sigmoid",
            Activation::Tanh => "tanh",
            Activation::Silu => "silu",
            Activation::Gelu => "gelu",
            Activation::GeluTanh => "gelu_tanh",
            Activation::Relu6 => "relu6",
            Activation::Hardswish => "hardswish",
            Activation::Hardsigmoid => "hardsigmoid",
            Activation::LeakyRelu => "leaky_relu",
        }
    }

    /// Whether a bias add before it fuses into one node ([`crate::bias_activation`]): the
    /// smooth activations of transformer MLPs, whose gradient reads their input.
    pub fn fuses_with_bias(self) -> bool {
        matches!(
            self,
            Activation::Gelu | Activation::GeluTanh | Activation::Silu
        )
    }

    /// The fused bias + activation kernel's name (`BiasGELUTanh`), for the kinds that
    /// [`fuse`](Activation::fuses_with_bias); `BiasActivation` for the others.
    pub fn bias_name(self) -> &'static str {
        match self {
            Activation::Gelu => "BiasGELU",
            Activation::GeluTanh => "BiasGELUTanh",
            Activation::Silu => "BiasSiLU",
            _ => "BiasActivation",
        }
    }

    /// Its backward's name (`BiasGELUTanhBackward`).
    pub fn bias_backward_name(self) -> &'static str {
        match self {
            Activation::Gelu => "BiasGELUBackward",
            Activation::GeluTanh => "BiasGELUTanhBackward",
            Activation::Silu => "BiasSiLUBackward",
            _ => "BiasActivationBackward",
        }
    }

    /// Whether the gradient is computed from the forward output (sigmoid, tanh) rather
    /// than the input: the backward node then keeps the output alive, not the input.
    pub fn backward_reads_output(self) -> bool {
        matches!(self, Activation::Sigmoid | Activation::Tanh)
    }

    /// FLOPs per element of the forward pass (a transcendental counts as one).
    pub fn flops_per_element(self) -> u64 {
        match self {
            Activation::Relu6 | Activation::LeakyRelu => 1,
            Activation::Hardsigmoid | Activation::Tanh => 3,
            Activation::Sigmoid | Activation::Hardswish => 4,
            Activation::Silu | Activation::Gelu => 5,
            Activation::GeluTanh => 8,
        }
    }

    /// FLOPs per element of the backward pass.
    pub fn backward_flops_per_element(self) -> u64 {
        match self {
            Activation::Relu6 | Activation::LeakyRelu | Activation::Hardsigmoid => 1,
            Activation::Hardswish | Activation::Tanh | Activation::Sigmoid => 3,
            Activation::Silu => 7,
            Activation::Gelu => 8,
            Activation::GeluTanh => 12,
        }
    }
}

fn sigmoid64(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// `f(x)` in f64.
pub(crate) fn forward64(kind: Activation, slope: f64, x: f64) -> f64 {
    match kind {
        Activation::Sigmoid => sigmoid64(x),
        Activation::Tanh => x.tanh(),
        Activation::Silu => x * sigmoid64(x),
        Activation::Gelu => 0.5 * x * candle_core::cpu::erf::erfc_f64(-x / 2f64.sqrt()),
        Activation::GeluTanh => {
            0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + GELU_TANH_C * x * x * x)).tanh())
        }
        Activation::Relu6 => relu6(x),
        Activation::Hardswish => x * relu6(x + 3.0) / 6.0,
        Activation::Hardsigmoid => relu6(x + 3.0) / 6.0,
        Activation::LeakyRelu => {
            if x > 0.0 {
                x
            } else {
                x * slope
            }
        }
    }
}

/// `min(max(x, 0), 6)` with NaN passed through.
fn relu6(x: f64) -> f64 {
    if x.is_nan() {
        x
    } else {
        x.clamp(0.0, 6.0)
    }
}

/// `f'(x)` in f64, from the input `x` or (for sigmoid and tanh) the output `y`.
pub(crate) fn derivative64(kind: Activation, slope: f64, x: f64) -> f64 {
    match kind {
        Activation::Sigmoid => x * (1.0 - x),
        Activation::Tanh => 1.0 - x * x,
        Activation::Silu => {
            let s = sigmoid64(x);
            s * (1.0 + x * (1.0 - s))
        }
        Activation::Gelu => {
            // Φ as erfc: no cancellation in the negative tail.
            let cdf = 0.5 * candle_core::cpu::erf::erfc_f64(-x / 2f64.sqrt());
            let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
            cdf + x * pdf
        }
        Activation::GeluTanh => {
            let inner = SQRT_2_OVER_PI * (x + GELU_TANH_C * x * x * x);
            let t = inner.tanh();
            let d_inner = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_TANH_C * x * x);
            0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * d_inner
        }
        Activation::Relu6 => f64::from(u8::from(x > 0.0 && x < 6.0)),
        Activation::Hardswish => {
            if x <= -3.0 {
                0.0
            } else if x < 3.0 {
                x / 3.0 + 0.5
            } else {
                1.0
            }
        }
        Activation::Hardsigmoid => {
            if x > -3.0 && x < 3.0 {
                1.0 / 6.0
            } else {
                0.0
            }
        }
        Activation::LeakyRelu => {
            if x > 0.0 {
                1.0
            } else {
                slope
            }
        }
    }
}

fn op_name(kind: Activation) -> &'static str {
    kind.name()
}

/// The activation `kind` of `x` (`slope` is LeakyReLU's negative slope; the others ignore it).
pub fn forward(kind: Activation, slope: f64, x: &Tensor) -> Result<Tensor> {
    let op = op_name(kind);
    if route(x.device()) == Route::Cpu && matches!(x.dtype(), DType::F32 | DType::F64) {
        return dispatch_float!(op, x.dtype(), forward_cpu(kind, slope, x));
    }
    #[cfg(feature = "cuda")]
    if route(x.device()) == Route::Cuda && crate::gpu::cuda::has_kernel_with_16_bit(x.dtype()) {
        return crate::gpu::elementwise::activation_forward(op, kind.cuda_kernel(), x, slope);
    }
    forward_generic(kind, slope, x).ctx(op)
}

fn forward_cpu<T: Float>(kind: Activation, slope: f64, x: &Tensor) -> Result<Tensor> {
    let op = op_name(kind);
    // The piecewise-linear ones in the tensor's own dtype, as PyTorch computes them (and
    // as fast as a copy); the smooth ones in f64, rounded once.
    let (three, six, k) = (T::from_f64(3.0), T::from_f64(6.0), T::from_f64(slope));
    let relu6 = move |v: T| {
        if v <= T::ZERO {
            T::ZERO
        } else if v >= six {
            six
        } else {
            v
        }
    };
    match kind {
        Activation::Relu6 => cpu::map::<T>(op, x, relu6),
        Activation::Hardswish => cpu::map::<T>(op, x, move |v| v * relu6(v + three) / six),
        Activation::Hardsigmoid => cpu::map::<T>(op, x, move |v| relu6(v + three) / six),
        Activation::LeakyRelu => cpu::map::<T>(op, x, move |v| if v > T::ZERO { v } else { v * k }),
        Activation::Sigmoid if x.dtype() == DType::F32 => wide_f32(op, x, None, lanes::sigmoid),
        Activation::Silu if x.dtype() == DType::F32 => wide_f32(op, x, None, lanes::silu),
        Activation::GeluTanh if x.dtype() == DType::F32 => wide_f32(op, x, None, lanes::gelu_tanh),
        Activation::Gelu if x.dtype() == DType::F32 => wide_f32(op, x, None, lanes::gelu),
        _ => cpu::map::<T>(op, x, |v| T::from_f64(forward64(kind, slope, v.to_f64()))),
    }
}

fn forward_generic(kind: Activation, slope: f64, x: &Tensor) -> candle_core::Result<Tensor> {
    let sigmoid = |x: &Tensor| (x.neg()?.exp()? + 1.0)?.recip();
    let relu6 = |x: &Tensor| x.clamp(0.0, 6.0);
    match kind {
        Activation::Sigmoid => sigmoid(x),
        Activation::Tanh => x.tanh(),
        Activation::Silu => x * sigmoid(x)?,
        Activation::Gelu => x.gelu_erf(),
        Activation::GeluTanh => x.gelu(),
        Activation::Relu6 => relu6(x),
        Activation::Hardswish => x * (relu6(&(x + 3.0)?)? / 6.0)?,
        Activation::Hardsigmoid => relu6(&(x + 3.0)?)? / 6.0,
        Activation::LeakyRelu => {
            let neg = (x * slope)?;
            x.gt(0.0)?.where_cond(x, &neg)
        }
    }
}

/// The gradient of activation `kind`: `grad_y * f'(x)`, where `saved` is the forward
/// input `x`, or the forward output `y` when [`Activation::backward_reads_output`].
pub fn backward(kind: Activation, slope: f64, grad_y: &Tensor, saved: &Tensor) -> Result<Tensor> {
    let op = kind.backward_name();
    crate::shape::same(op, "output gradient", grad_y.dims(), "saved", saved.dims())?;
    crate::cpu::same_dtype(op, saved.dtype(), &[("output gradient", grad_y)])?;
    if route(saved.device()) == Route::Cpu && matches!(saved.dtype(), DType::F32 | DType::F64) {
        return dispatch_float!(op, saved.dtype(), backward_cpu(kind, slope, grad_y, saved));
    }
    #[cfg(feature = "cuda")]
    if route(saved.device()) == Route::Cuda
        && saved.dtype() == grad_y.dtype()
        && crate::gpu::cuda::has_kernel_with_16_bit(saved.dtype())
    {
        return crate::gpu::elementwise::activation_backward(
            op,
            kind.cuda_kernel(),
            grad_y,
            saved,
            slope,
        );
    }
    let d = derivative_generic(kind, slope, saved).ctx(op)?;
    (grad_y * d).ctx(op)
}

fn backward_cpu<T: Float>(
    kind: Activation,
    slope: f64,
    grad_y: &Tensor,
    saved: &Tensor,
) -> Result<Tensor> {
    let op = kind.backward_name();
    let (three, six, half, k) = (
        T::from_f64(3.0),
        T::from_f64(6.0),
        T::from_f64(0.5),
        T::from_f64(slope),
    );
    let zero = T::ZERO;
    match kind {
        Activation::Relu6 => cpu::zip_map::<T>(op, grad_y, saved, move |g, x| {
            if x > zero && x < six {
                g
            } else {
                zero
            }
        }),
        Activation::Hardswish => cpu::zip_map::<T>(op, grad_y, saved, move |g, x| {
            if x <= zero - three {
                zero
            } else if x < three {
                g * (x / three + half)
            } else {
                g
            }
        }),
        Activation::Hardsigmoid => cpu::zip_map::<T>(op, grad_y, saved, move |g, x| {
            if x > zero - three && x < three {
                g / six
            } else {
                zero
            }
        }),
        Activation::LeakyRelu => {
            cpu::zip_map::<T>(
                op,
                grad_y,
                saved,
                move |g, x| if x > zero { g } else { g * k },
            )
        }
        Activation::Sigmoid => cpu::zip_map::<T>(op, grad_y, saved, |g, y| g * (y * (T::ONE - y))),
        Activation::Silu if saved.dtype() == DType::F32 => {
            wide_f32(op, saved, Some(grad_y), lanes::silu_backward)
        }
        Activation::GeluTanh if saved.dtype() == DType::F32 => {
            wide_f32(op, saved, Some(grad_y), lanes::gelu_tanh_backward)
        }
        Activation::Gelu if saved.dtype() == DType::F32 => {
            wide_f32(op, saved, Some(grad_y), lanes::gelu_backward)
        }
        _ => cpu::zip_map::<T>(op, grad_y, saved, |g, s| {
            T::from_f64(g.to_f64() * derivative64(kind, slope, s.to_f64()))
        }),
    }
}

fn derivative_generic(kind: Activation, slope: f64, s: &Tensor) -> candle_core::Result<Tensor> {
    let ones = s.ones_like()?;
    let zeros = s.zeros_like()?;
    let select = |mask: Tensor, a: &Tensor, b: &Tensor| mask.where_cond(a, b);
    match kind {
        Activation::Sigmoid => s * (1.0 - s)?,
        Activation::Tanh => 1.0 - s.sqr()?,
        Activation::Silu => {
            let sig = (s.neg()?.exp()? + 1.0)?.recip()?;
            let inner = ((s * (1.0 - &sig)?)? + 1.0)?;
            sig * inner
        }
        Activation::Gelu => {
            let cdf = (((s / 2f64.sqrt())?.erf()? + 1.0)? * 0.5)?;
            let pdf = ((s.sqr()? * -0.5)?.exp()? / (2.0 * std::f64::consts::PI).sqrt())?;
            cdf + (s * pdf)?
        }
        Activation::GeluTanh => {
            let inner = ((s + (s.powf(3.0)? * GELU_TANH_C)?)? * SQRT_2_OVER_PI)?;
            let t = inner.tanh()?;
            let d_inner = (((s.sqr()? * (3.0 * GELU_TANH_C))? + 1.0)? * SQRT_2_OVER_PI)?;
            let left = ((&t + 1.0)? * 0.5)?;
            let right = (((s * 0.5)? * (1.0 - t.sqr()?)?)? * d_inner)?;
            left + right
        }
        Activation::Relu6 => {
            let inside = (s.gt(0.0)? * s.lt(6.0)?)?;
            select(inside, &ones, &zeros)
        }
        Activation::Hardswish => {
            let mid = ((s / 3.0)? + 0.5)?;
            let upper = select(s.lt(3.0)?, &mid, &ones)?;
            select(s.le(-3.0)?, &zeros, &upper)
        }
        Activation::Hardsigmoid => {
            let inside = (s.gt(-3.0)? * s.lt(3.0)?)?;
            select(inside, &(ones / 6.0)?, &zeros)
        }
        Activation::LeakyRelu => select(s.gt(0.0)?, &ones, &(ones.clone() * slope)?),
    }
}

/// Forward FLOPs of `kind` over a tensor of `shape`.
pub fn flops(kind: Activation, shape: &[usize]) -> u64 {
    crate::shape::flop_count(kind.flops_per_element(), shape)
}

/// Backward FLOPs of `kind` over a tensor of `shape`.
pub fn backward_flops(kind: Activation, shape: &[usize]) -> u64 {
    crate::shape::flop_count(kind.backward_flops_per_element(), shape)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_gelu_erf_and_its_gradient_stay_within_their_bounds() {
        // Against f64 (erfc, exact in the tail), in units of what f32 inputs allow: e^{-x²/2}
        // has condition x²/2, so an f32 kernel is judged per element by
        // |error| / (|value| · (1 + x²) · 2^-24); the gradient Φ + x·φ, a sum with a root,
        // by its terms' magnitudes |Φ| + |x·φ| instead of its value.
        let unit = |x: f64| (1.0 + x * x) * f64::from(f32::EPSILON) / 2.0;
        let (mut worst_y, mut worst_dy) = (0f64, 0f64);
        for i in 0..=400_000 {
            let x = -12.0 + 24.0 * i as f32 / 400_000.0;
            let xd = x as f64;
            let exact = forward64(Activation::Gelu, 0.0, xd);
            if exact != 0.0 {
                let err = (lanes::gelu(x, 0.0) as f64 - exact).abs() / exact.abs();
                worst_y = worst_y.max(err / unit(xd));
            }
            let cdf = 0.5 * candle_core::cpu::erf::erfc_f64(-xd / 2f64.sqrt());
            let pdf = (-0.5 * xd * xd).exp() / (2.0 * std::f64::consts::PI).sqrt();
            let exact = derivative64(Activation::Gelu, 0.0, xd);
            let err = (lanes::gelu_backward(x, 1.0) as f64 - exact).abs()
                / (cdf.abs() + (xd * pdf).abs());
            worst_dy = worst_dy.max(err / unit(xd));
        }
        println!("gelu f32: worst error {worst_y:.1} units, gradient {worst_dy:.1} units");
        assert!(worst_y < 10.0, "gelu: {worst_y:.1} units");
        assert!(worst_dy < 10.0, "gelu backward: {worst_dy:.1} units");
    }
}
