//! Pooling: max and average pooling with kernel, stride and padding (PyTorch's output-size
//! rule, `ceil_mode=false`), and global average pooling.
//!
//! Max pooling pads with -inf and, like PyTorch's CPU kernel, keeps the *first* maximum
//! of a window in row-major order; its backward sends the window's whole gradient to that
//! element. Average pooling counts the padding (PyTorch's `count_include_pad=true`): every
//! window divides by `kh*kw`. candle's own pools have no padding and their gradients are
//! wrong or missing, so the CPU kernels here are wick's own.

use candle_core::{DType, Tensor};
mod cpu;
mod cpu_global;
mod cpu_values;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cuda")]
mod cuda_global;
mod params;

use crate::cpu::dispatch_float;
use crate::error::{CandleContext, OpError, Result};
use crate::route::{route, Route};
use crate::shape::nchw;

use params::{Geom, GAP};
pub use params::{MaxPoolOutput, Pool2dParams, PoolKind};

/// The error for a pool on a path with no kernel: candle's own pools have no padding and
/// wrong gradients, so pools run wick's CPU and CUDA kernels only.
fn no_kernel(op: &'static str, t: &Tensor) -> OpError {
    OpError::Unsupported {
        op,
        what: format!(
            "padded pooling on {:?} under {:?} (pools have wick's CPU and CUDA kernels, no device-generic path)",
            t.device().location(),
            crate::KernelPath::current()
        ),
    }
}

/// Runs `cuda_kernel` (with the `cuda` feature) or says there is none.
macro_rules! on_cuda {
    ($op:expr, $t:expr, $call:expr) => {{
        #[cfg(feature = "cuda")]
        {
            $call
        }
        #[cfg(not(feature = "cuda"))]
        {
            Err(no_kernel($op, $t))
        }
    }};
}

/// Max-pool forward (`PoolingForward`), returning the output and the argmax indices.
pub fn max_pool2d(x: &Tensor, p: &Pool2dParams) -> Result<MaxPoolOutput> {
    let kind = PoolKind::Max;
    let g = Geom::new(kind, p, x.dims())?;
    match route(x.device()) {
        Route::Cpu => dispatch_float!(kind.op_name(), x.dtype(), cpu::max_forward(&g, x)),
        Route::Cuda => on_cuda!(kind.op_name(), x, {
            let (y, indices) =
                cuda::max_pool_forward(x, &[g.n, g.c, g.oh, g.ow], &g.cuda_dims(kind.op_name())?)?;
            Ok(MaxPoolOutput { y, indices })
        }),
        Route::Generic => Err(no_kernel(kind.op_name(), x)),
    }
}

/// Max-pool forward values alone (`PoolingForward`), without the argmax indices: what a
/// graph that never differentiates the pool needs (the `max_pool_values` pass). The
/// values equal [`max_pool2d`]'s `y`.
pub fn max_pool2d_values(x: &Tensor, p: &Pool2dParams) -> Result<Tensor> {
    let kind = PoolKind::Max;
    let g = Geom::new(kind, p, x.dims())?;
    match route(x.device()) {
        Route::Cpu => dispatch_float!(kind.op_name(), x.dtype(), cpu_values::max_values(&g, x)),
        Route::Cuda => Ok(max_pool2d(x, p)?.y),
        Route::Generic => Err(no_kernel(kind.op_name(), x)),
    }
}

/// Max-pool backward (`PoolingBackward`): scatters each output gradient to the element
/// its window chose. `input_shape` is the forward input's shape.
pub fn max_pool2d_backward(
    grad_y: &Tensor,
    indices: &Tensor,
    input_shape: &[usize],
    p: &Pool2dParams,
) -> Result<Tensor> {
    let kind = PoolKind::Max;
    let g = Geom::for_backward(
        kind,
        p,
        input_shape,
        &[("output gradient", grad_y), ("indices", indices)],
    )?;
    if indices.dtype() != DType::U32 {
        return Err(crate::invalid!(
            kind.op_name(),
            "indices must be u32, got {:?}",
            indices.dtype()
        ));
    }
    match route(grad_y.device()) {
        Route::Cpu => dispatch_float!(
            kind.op_name(),
            grad_y.dtype(),
            cpu::max_backward(&g, grad_y, indices, input_shape)
        ),
        Route::Cuda => on_cuda!(
            kind.op_name(),
            grad_y,
            cuda::max_pool_backward(grad_y, indices, input_shape, &g.cuda_dims(kind.op_name())?)
        ),
        Route::Generic => Err(no_kernel(kind.op_name(), grad_y)),
    }
}

/// Average-pool forward (`PoolingForward`), padding counted in the divisor.
pub fn avg_pool2d(x: &Tensor, p: &Pool2dParams) -> Result<Tensor> {
    let kind = PoolKind::Avg;
    let g = Geom::new(kind, p, x.dims())?;
    match route(x.device()) {
        Route::Cpu => dispatch_float!(kind.op_name(), x.dtype(), cpu::avg_forward(&g, x)),
        Route::Cuda => on_cuda!(
            kind.op_name(),
            x,
            cuda::avg_pool(
                x,
                &[g.n, g.c, g.oh, g.ow],
                &g.cuda_dims(kind.op_name())?,
                false
            )
        ),
        Route::Generic => avg_forward_generic(x, p),
    }
}

/// Average pooling through candle's unpadded avg pool, after zero padding
/// (count_include_pad=true).
fn avg_forward_generic(x: &Tensor, p: &Pool2dParams) -> Result<Tensor> {
    let op = PoolKind::Avg.op_name();
    let padded = x
        .pad_with_zeros(2, p.padding[0], p.padding[0])
        .ctx(op)?
        .pad_with_zeros(3, p.padding[1], p.padding[1])
        .ctx(op)?;
    padded
        .avg_pool2d_with_stride((p.kernel[0], p.kernel[1]), (p.stride[0], p.stride[1]))
        .ctx(op)
}

/// Average-pool backward (`PoolingBackward`): each output gradient, divided by the window
/// size, goes to every in-bounds element of its window.
pub fn avg_pool2d_backward(
    grad_y: &Tensor,
    input_shape: &[usize],
    p: &Pool2dParams,
) -> Result<Tensor> {
    let kind = PoolKind::Avg;
    let g = Geom::for_backward(kind, p, input_shape, &[("output gradient", grad_y)])?;
    match route(grad_y.device()) {
        Route::Cpu => dispatch_float!(
            kind.op_name(),
            grad_y.dtype(),
            cpu::avg_backward(&g, grad_y, input_shape)
        ),
        Route::Cuda => on_cuda!(
            kind.op_name(),
            grad_y,
            cuda::avg_pool(grad_y, input_shape, &g.cuda_dims(kind.op_name())?, true)
        ),
        Route::Generic => Err(no_kernel(kind.op_name(), grad_y)),
    }
}

/// FLOPs of global average pooling, forward or backward: one per input element.
pub fn global_avg_pool_flops(input: &[usize]) -> u64 {
    crate::shape::flop_count(1, input)
}

/// Global average pool forward: [N, C, H, W] -> [N, C, 1, 1] (PyTorch's
/// `AdaptiveAvgPool2d(1)`).
pub fn global_avg_pool(x: &Tensor) -> Result<Tensor> {
    let dims = nchw(GAP, "input", x.dims())?;
    if route(x.device()) == Route::Cpu && matches!(x.dtype(), DType::F32 | DType::F64) {
        return dispatch_float!(GAP, x.dtype(), cpu_global::forward(x, dims));
    }
    #[cfg(feature = "cuda")]
    if route(x.device()) == Route::Cuda && crate::gpu::cuda::has_kernel_with_16_bit(x.dtype()) {
        return cuda_global::global_avg_pool(GAP, x, dims);
    }
    x.mean_keepdim(3).ctx(GAP)?.mean_keepdim(2).ctx(GAP)
}

/// Global average pool backward: the gradient spread evenly over each plane.
pub fn global_avg_pool_backward(grad_y: &Tensor, input_shape: &[usize]) -> Result<Tensor> {
    let [n, c, h, w] = nchw(GAP, "input", input_shape)?;
    crate::shape::same(
        GAP,
        "output gradient",
        grad_y.dims(),
        "pooled output",
        &[n, c, 1, 1],
    )?;
    if route(grad_y.device()) == Route::Cpu && matches!(grad_y.dtype(), DType::F32 | DType::F64) {
        return dispatch_float!(
            GAP,
            grad_y.dtype(),
            cpu_global::backward(grad_y, [n, c, h, w])
        );
    }
    #[cfg(feature = "cuda")]
    if route(grad_y.device()) == Route::Cuda
        && crate::gpu::cuda::has_kernel_with_16_bit(grad_y.dtype())
    {
        return cuda_global::global_avg_pool_backward(GAP, grad_y, [n, c, h, w]);
    }
    (grad_y / (h * w) as f64)
        .ctx(GAP)?
        .broadcast_as((n, c, h, w))
        .ctx(GAP)?
        .contiguous()
        .ctx(GAP)
}
