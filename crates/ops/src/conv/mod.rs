//! 2-D convolution (NCHW, OIHW weights): forward, input gradient, weight gradient, bias
//! gradient. This file holds the settings, shape inference, FLOP counts and the public
//! functions; the implementations live beside it:
//! - `cpu`: im2col + GEMM on the CPU, one driver for how every pass spreads over threads;
//! - `im2col`: the column matrices and their inverse;
//! - `generic`: candle's `conv2d` and `conv_transpose2d`, for every other device (and for
//!   the CPU under [`KernelPath::Generic`](crate::KernelPath)).

mod algorithm;
mod amx_direct;
mod amx_filter;
mod cpu;
mod depthwise;
mod depthwise_s1;
mod epilogue;
mod generic;
mod im2col;
mod low_precision;
mod packed_columns;
mod params;
pub mod transpose;
mod whole_batch;
mod winograd;
mod winograd_filter;

pub use algorithm::ConvAlgorithm;
pub use params::{Conv2dParams, Epilogue};
use params::{Geom, OP};

use candle_core::Tensor;

use crate::bf16::Products;

use crate::cpu::{self as cpu_data, dispatch_float};
use crate::error::{CandleContext, Result};
use crate::route::{route, Route};
use crate::shape::nchw;

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
    let operands = [("input", x), ("weight", weight)];
    let products = low_precision::products_of(&operands)?;
    let low_precision = products != Products::Native;
    if low_precision {
        low_precision::check(products, &operands, epilogue)?;
    } else {
        let mut others = vec![("weight", weight)];
        others.extend(epilogue.bias.map(|b| ("bias", b)));
        others.extend(epilogue.residual.map(|r| ("residual", r)));
        cpu_data::same_dtype(OP, x.dtype(), &others)?;
    }
    match route(x.device()) {
        Route::Cpu if low_precision => {
            let form = low_precision::CpuForm::of(products);
            let (x, w) = (form.operand(x)?, form.operand(weight)?);
            cpu::forward::<f32>(&form.geom(&g), &x, &w, epilogue)
        }
        Route::Cpu => dispatch_float!(OP, x.dtype(), cpu::forward(&g, x, weight, epilogue)),
        Route::Cuda | Route::Generic => {
            let mut out = if low_precision {
                let rounded = |t| low_precision::rounded_f32(t, products);
                let (x, w) = (rounded(x)?, rounded(weight)?);
                generic::forward(&g, &x, &w)?
            } else {
                generic::forward(&g, x, weight)?
            };
            if let Some(b) = epilogue.bias {
                out = out
                    .broadcast_add(&b.reshape((1, g.c_out, 1, 1)).ctx(OP)?)
                    .ctx(OP)?;
            }
            if let Some(r) = epilogue.residual {
                out = (out + r).ctx(OP)?;
            }
            if epilogue.relu {
                out = crate::relu::relu(&out)?;
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
    gradient(
        Gradient::Data,
        &g,
        grad_out,
        ("weight", weight),
        Products::Native,
    )
}

/// Convolution weight gradient (`ConvBackwardFilter`) for a weight of shape `weight_shape`.
pub fn conv2d_backward_filter(
    grad_out: &Tensor,
    x: &Tensor,
    weight_shape: &[usize],
    p: &Conv2dParams,
) -> Result<Tensor> {
    conv2d_backward_filter_with(grad_out, x, weight_shape, p, Products::Native)
}

/// [`conv2d_backward_filter`] with the given products whatever the operands' dtypes
/// (16-bit operands choose theirs too): the weight gradient of a convolution whose
/// weight autocast cast to a 16-bit float, its float32 input and output gradient rounded
/// as the products read them.
pub fn conv2d_backward_filter_with(
    grad_out: &Tensor,
    x: &Tensor,
    weight_shape: &[usize],
    p: &Conv2dParams,
    products: Products,
) -> Result<Tensor> {
    let g = p.geom(x.dims(), weight_shape)?;
    gradient(Gradient::Filter, &g, grad_out, ("input", x), products)
}

/// A convolution's gradient.
#[derive(Clone, Copy)]
enum Gradient {
    /// Of the input, from the output gradient and the weight.
    Data,
    /// Of the weight, from the output gradient and the input.
    Filter,
}

/// The `which` gradient from the output gradient and `other` (the weight, or the
/// input), with `products` unless a 16-bit operand chooses its own.
fn gradient(
    which: Gradient,
    g: &Geom,
    grad_out: &Tensor,
    (name, other): (&'static str, &Tensor),
    products: Products,
) -> Result<Tensor> {
    check_grad_out(g, grad_out)?;
    let operands = [("output gradient", grad_out), (name, other)];
    let products = match low_precision::products_of(&operands)? {
        Products::Native => products,
        own => own,
    };
    let generic = |g: &Geom, gy: &Tensor, other: &Tensor| match which {
        Gradient::Data => generic::backward_data(g, gy, other),
        Gradient::Filter => generic::backward_filter(g, gy, other),
    };
    if products != Products::Native {
        low_precision::check(products, &operands, &Default::default())?;
        return match route(other.device()) {
            Route::Cpu => {
                let form = low_precision::CpuForm::of(products);
                let (gy, other) = (form.operand(grad_out)?, form.operand(other)?);
                cpu_gradient::<f32>(which, &form.geom(g), &gy, &other)
            }
            Route::Cuda | Route::Generic => {
                let rounded = |t| low_precision::rounded_f32(t, products);
                generic(g, &rounded(grad_out)?, &rounded(other)?)
            }
        };
    }
    cpu_data::same_dtype(OP, grad_out.dtype(), &[(name, other)])?;
    match route(other.device()) {
        Route::Cpu => dispatch_float!(OP, other.dtype(), cpu_gradient(which, g, grad_out, other)),
        Route::Cuda | Route::Generic => generic(g, grad_out, other),
    }
}

/// A gradient on wick's CPU kernels.
fn cpu_gradient<T: cpu_data::Float>(
    which: Gradient,
    g: &Geom,
    grad_out: &Tensor,
    other: &Tensor,
) -> Result<Tensor> {
    match which {
        Gradient::Data => cpu::backward_data::<T>(g, grad_out, other),
        Gradient::Filter => cpu::backward_filter::<T>(g, grad_out, other),
    }
}

/// Convolution bias gradient (`ConvBackwardBias`): the output gradient summed over batch,
/// height and width.
pub fn conv2d_backward_bias(grad_out: &Tensor) -> Result<Tensor> {
    let dims = nchw(OP, "output gradient", grad_out.dims())?;
    if cpu_data::on_cpu_kernel(grad_out) {
        return dispatch_float!(OP, grad_out.dtype(), bias_sums(grad_out, dims));
    }
    grad_out.sum((0, 2, 3)).ctx(OP)
}

/// The CPU bias gradient: each channel's planes summed in f64 (eight lanes), the
/// channels split across threads.
fn bias_sums<T: cpu_data::Float>(grad_out: &Tensor, [n, c, h, w]: [usize; 4]) -> Result<Tensor> {
    use rayon::prelude::*;
    let hw = h * w;
    let sums = cpu_data::with_slice::<T, _>(OP, grad_out, |g| {
        Ok((0..c)
            .into_par_iter()
            .map(|ch| {
                let total: f64 = (0..n)
                    .map(|i| cpu_data::run_wide(PlaneSum(&g[(i * c + ch) * hw..][..hw])))
                    .sum();
                T::from_f64(total)
            })
            .collect::<Vec<T>>())
    })?;
    cpu_data::tensor(OP, sums, c)
}

/// One plane's sum in f64, compiled for the widest vectors.
struct PlaneSum<'a, T>(&'a [T]);

impl<T: cpu_data::Float> cpu_data::WideKernel for PlaneSum<'_, T> {
    type Output = f64;
    #[inline(always)]
    fn run(self) -> f64 {
        cpu_data::sum_f64(self.0, |v| v.to_f64())
    }
}

/// FLOPs of the bias gradient for an output gradient of shape `grad_out`: one add per element.
pub fn conv2d_backward_bias_flops(grad_out: &[usize]) -> u64 {
    crate::shape::flop_count(1, grad_out)
}

fn check_grad_out(g: &Geom, grad_out: &Tensor) -> Result<()> {
    let output = [g.n, g.c_out, g.oh, g.ow];
    crate::shape::same(
        OP,
        "output gradient",
        grad_out.dims(),
        "the output",
        &output,
    )
}
