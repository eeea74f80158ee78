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

use crate::cpu::dispatch_float;
use crate::error::{CandleContext, OpError, Result};
use crate::kernel::{route, Route};
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
                return Err(OpError::invalid(
                    op,
                    format!(
                        "padding {:?} must be at most half the kernel {:?} (input {input:?})",
                        self.padding, self.kernel
                    ),
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
struct Geom {
    n: usize,
    c: usize,
    planes: usize,
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    p: Pool2dParams,
}

impl Geom {
    fn new(kind: PoolKind, p: &Pool2dParams, input: &[usize]) -> Result<Self> {
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
    fn for_backward(
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

    /// The sizes wick's CUDA pooling kernels take.
    #[cfg(feature = "cuda")]
    fn cuda_dims(&self) -> cuda::PoolDims {
        let p = &self.p;
        let v = [
            self.h,
            self.w,
            self.oh,
            self.ow,
            p.kernel[0],
            p.kernel[1],
            p.stride[0],
            p.stride[1],
            p.padding[0],
            p.padding[1],
        ];
        cuda::PoolDims(v.map(|x| x as i32))
    }
}

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
            let (y, indices) = cuda::max_pool_forward(x, &[g.n, g.c, g.oh, g.ow], &g.cuda_dims())?;
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
        return Err(OpError::invalid(
            kind.op_name(),
            format!("indices must be u32, got {:?}", indices.dtype()),
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
            cuda::max_pool_backward(grad_y, indices, input_shape, &g.cuda_dims())
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
            cuda::avg_pool(x, &[g.n, g.c, g.oh, g.ow], &g.cuda_dims(), false)
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
            cuda::avg_pool(grad_y, input_shape, &g.cuda_dims(), true)
        ),
        Route::Generic => Err(no_kernel(kind.op_name(), grad_y)),
    }
}

const GAP: &str = "global_avg_pool";

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
    if route(x.device()) == Route::Cuda && matches!(x.dtype(), DType::F32 | DType::F64) {
        return crate::gpu::families::global_avg_pool(GAP, x, dims);
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
    if route(grad_y.device()) == Route::Cuda && matches!(grad_y.dtype(), DType::F32 | DType::F64) {
        return crate::gpu::families::global_avg_pool_backward(GAP, grad_y, [n, c, h, w]);
    }
    (grad_y / (h * w) as f64)
        .ctx(GAP)?
        .broadcast_as((n, c, h, w))
        .ctx(GAP)?
        .contiguous()
        .ctx(GAP)
}
