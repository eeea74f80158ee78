//! Pooling: max and average pooling with kernel, stride and padding (PyTorch's output-size
//! rule, `ceil_mode=false`), and global average pooling.
//!
//! Max pooling pads with -inf and, like PyTorch's CPU kernel, keeps the *first* maximum
//! of a window in row-major order; its backward sends the window's whole gradient to that
//! element. Average pooling counts the padding (PyTorch's `count_include_pad=true`): every
//! window divides by `kh*kw`. candle's own pools have no padding and their gradients are
//! wrong or missing, so the CPU kernels here are wick's own.

use candle_core::{DType, Tensor};
use rayon::prelude::*;

use crate::cpu::{self, dispatch_float, Float};
use crate::error::{CandleContext, OpError, Result};
use crate::shape::{nchw, window_out};

/// Max or average pooling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// Max pooling (padding acts as -inf).
    Max,
    /// Average pooling (padding counts as zeros in the divisor).
    Avg,
}

/// The settings of a 2-D pooling layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pool2dParams {
    /// Max or average.
    pub kind: PoolKind,
    /// Window size along (H, W).
    pub kernel: [usize; 2],
    /// Stride along (H, W).
    pub stride: [usize; 2],
    /// Padding along (H, W), on both sides.
    pub padding: [usize; 2],
}

impl Pool2dParams {
    /// A square window of size `kernel` with the given stride and padding.
    pub fn new(kind: PoolKind, kernel: usize, stride: usize, padding: usize) -> Self {
        Pool2dParams {
            kind,
            kernel: [kernel, kernel],
            stride: [stride, stride],
            padding: [padding, padding],
        }
    }

    fn op(&self) -> &'static str {
        match self.kind {
            PoolKind::Max => "max_pool2d",
            PoolKind::Avg => "avg_pool2d",
        }
    }

    /// The output shape for an input of shape `input`, or an error naming the shape.
    pub fn output_shape(&self, input: &[usize]) -> Result<[usize; 4]> {
        let op = self.op();
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

    /// FLOPs of the forward pass: one per window element.
    pub fn flops(&self, input: &[usize]) -> u64 {
        match self.output_shape(input) {
            Ok(out) => (out.iter().product::<usize>() * self.kernel[0] * self.kernel[1]) as u64,
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
    fn new(p: &Pool2dParams, input: &[usize]) -> Result<Self> {
        let [n, c, oh, ow] = p.output_shape(input)?;
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

    /// The sizes wick's CUDA pooling kernels take.
    #[cfg(feature = "cuda")]
    fn cuda_dims(&self) -> crate::cuda::PoolDims {
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
        crate::cuda::PoolDims(v.map(|x| x as i32))
    }

    /// The in-bounds input rows and columns of output (oy, ox)'s window.
    fn window(&self, oy: usize, ox: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let y0 = (oy * self.p.stride[0]) as isize - self.p.padding[0] as isize;
        let x0 = (ox * self.p.stride[1]) as isize - self.p.padding[1] as isize;
        let ys =
            y0.max(0) as usize..((y0 + self.p.kernel[0] as isize).min(self.h as isize)) as usize;
        let xs =
            x0.max(0) as usize..((x0 + self.p.kernel[1] as isize).min(self.w as isize)) as usize;
        (ys, xs)
    }
}

fn unsupported_device(op: &'static str, t: &Tensor) -> OpError {
    OpError::Unsupported {
        op,
        what: format!(
            "padded pooling on {:?} (wick's pooling kernels run on the CPU)",
            t.device().location()
        ),
    }
}

/// Max-pool forward (`PoolingForward`), returning the output and the argmax indices.
pub fn max_pool2d(x: &Tensor, p: &Pool2dParams) -> Result<MaxPoolOutput> {
    let p = Pool2dParams {
        kind: PoolKind::Max,
        ..*p
    };
    let g = Geom::new(&p, x.dims())?;
    if !x.device().is_cpu() {
        #[cfg(feature = "cuda")]
        if x.device().is_cuda() {
            let (y, indices) =
                crate::cuda::max_pool_forward(x, &[g.n, g.c, g.oh, g.ow], &g.cuda_dims())?;
            return Ok(MaxPoolOutput { y, indices });
        }
        return Err(unsupported_device(p.op(), x));
    }
    dispatch_float!(p.op(), x.dtype(), max_forward_cpu(&g, x))
}

fn max_forward_cpu<T: Float>(g: &Geom, x: &Tensor) -> Result<MaxPoolOutput> {
    let (hw, ohw) = (g.h * g.w, g.oh * g.ow);
    let mut y = vec![T::ZERO; g.planes * ohw];
    let mut idx = vec![0u32; g.planes * ohw];
    cpu::with_slice::<T, _>("max_pool2d", x, |xs| {
        y.par_chunks_mut(ohw)
            .zip(idx.par_chunks_mut(ohw))
            .enumerate()
            .for_each(|(plane, (y, idx))| {
                let xs = &xs[plane * hw..(plane + 1) * hw];
                for oy in 0..g.oh {
                    for ox in 0..g.ow {
                        let (ys, xr) = g.window(oy, ox);
                        let mut best = T::NEG_INFINITY;
                        let mut best_i = ys.start * g.w + xr.start;
                        for iy in ys {
                            for ix in xr.clone() {
                                let v = xs[iy * g.w + ix];
                                if v > best || v.is_nan() {
                                    best = v;
                                    best_i = iy * g.w + ix;
                                    if v.is_nan() {
                                        break;
                                    }
                                }
                            }
                        }
                        y[oy * g.ow + ox] = best;
                        idx[oy * g.ow + ox] = best_i as u32;
                    }
                }
            });
        Ok(())
    })?;
    let shape = (g.n, g.c, g.oh, g.ow);
    Ok(MaxPoolOutput {
        y: cpu::tensor("max_pool2d", y, shape)?,
        indices: cpu::tensor("max_pool2d", idx, shape)?,
    })
}

/// Max-pool backward (`PoolingBackward`): scatters each output gradient to the element
/// its window chose. `input_shape` is the forward input's shape.
pub fn max_pool2d_backward(
    grad_y: &Tensor,
    indices: &Tensor,
    input_shape: &[usize],
    p: &Pool2dParams,
) -> Result<Tensor> {
    let p = Pool2dParams {
        kind: PoolKind::Max,
        ..*p
    };
    let g = Geom::new(&p, input_shape)?;
    let out = [input_shape[0], input_shape[1], g.oh, g.ow];
    crate::shape::same(
        p.op(),
        "output gradient",
        grad_y.dims(),
        "pooled output",
        &out,
    )?;
    crate::shape::same(p.op(), "indices", indices.dims(), "pooled output", &out)?;
    if indices.dtype() != DType::U32 {
        return Err(OpError::invalid(
            p.op(),
            format!("indices must be u32, got {:?}", indices.dtype()),
        ));
    }
    if !grad_y.device().is_cpu() {
        #[cfg(feature = "cuda")]
        if grad_y.device().is_cuda() {
            return crate::cuda::max_pool_backward(grad_y, indices, input_shape, &g.cuda_dims());
        }
        return Err(unsupported_device(p.op(), grad_y));
    }
    dispatch_float!(
        p.op(),
        grad_y.dtype(),
        max_backward_cpu(&g, grad_y, indices, input_shape)
    )
}

fn max_backward_cpu<T: Float>(
    g: &Geom,
    grad_y: &Tensor,
    indices: &Tensor,
    input_shape: &[usize],
) -> Result<Tensor> {
    let (hw, ohw) = (g.h * g.w, g.oh * g.ow);
    let mut dx = vec![T::ZERO; g.planes * hw];
    cpu::with_slice::<T, _>("max_pool2d", grad_y, |gs| {
        cpu::with_slice::<u32, _>("max_pool2d", indices, |is| {
            if let Some(bad) = is.iter().find(|&&i| i as usize >= hw) {
                return Err(OpError::invalid(
                    "max_pool2d",
                    format!("index {bad} is outside a {}x{} plane", g.h, g.w),
                ));
            }
            dx.par_chunks_mut(hw).enumerate().for_each(|(plane, dx)| {
                let gs = &gs[plane * ohw..(plane + 1) * ohw];
                let is = &is[plane * ohw..(plane + 1) * ohw];
                for (gv, &i) in gs.iter().zip(is) {
                    dx[i as usize] += *gv;
                }
            });
            Ok(())
        })
    })?;
    cpu::tensor("max_pool2d", dx, input_shape)
}

/// Average-pool forward (`PoolingForward`), padding counted in the divisor.
pub fn avg_pool2d(x: &Tensor, p: &Pool2dParams) -> Result<Tensor> {
    let p = Pool2dParams {
        kind: PoolKind::Avg,
        ..*p
    };
    let g = Geom::new(&p, x.dims())?;
    let shape = (g.n, g.c, g.oh, g.ow);
    #[cfg(feature = "cuda")]
    if x.device().is_cuda() {
        return crate::cuda::avg_pool(x, &[g.n, g.c, g.oh, g.ow], &g.cuda_dims(), false);
    }
    if !x.device().is_cpu() {
        // candle's avg pool has no padding: pad with zeros first (count_include_pad=true).
        let padded = x
            .pad_with_zeros(2, p.padding[0], p.padding[0])
            .ctx(p.op())?
            .pad_with_zeros(3, p.padding[1], p.padding[1])
            .ctx(p.op())?;
        return padded
            .avg_pool2d_with_stride((p.kernel[0], p.kernel[1]), (p.stride[0], p.stride[1]))
            .ctx(p.op());
    }
    dispatch_float!(p.op(), x.dtype(), avg_forward_cpu(&g, x, shape))
}

fn avg_forward_cpu<T: Float>(
    g: &Geom,
    x: &Tensor,
    shape: (usize, usize, usize, usize),
) -> Result<Tensor> {
    let (hw, ohw) = (g.h * g.w, g.oh * g.ow);
    let scale = T::from_f64(1.0 / (g.p.kernel[0] * g.p.kernel[1]) as f64);
    let mut y = vec![T::ZERO; g.planes * ohw];
    cpu::with_slice::<T, _>("avg_pool2d", x, |xs| {
        y.par_chunks_mut(ohw).enumerate().for_each(|(plane, y)| {
            let xs = &xs[plane * hw..(plane + 1) * hw];
            for oy in 0..g.oh {
                for ox in 0..g.ow {
                    let (ys, xr) = g.window(oy, ox);
                    let mut sum = T::ZERO;
                    for iy in ys {
                        for v in &xs[iy * g.w + xr.start..iy * g.w + xr.end] {
                            sum += *v;
                        }
                    }
                    y[oy * g.ow + ox] = sum * scale;
                }
            }
        });
        Ok(())
    })?;
    cpu::tensor("avg_pool2d", y, shape)
}

/// Average-pool backward (`PoolingBackward`): each output gradient, divided by the window
/// size, goes to every in-bounds element of its window.
pub fn avg_pool2d_backward(
    grad_y: &Tensor,
    input_shape: &[usize],
    p: &Pool2dParams,
) -> Result<Tensor> {
    let p = Pool2dParams {
        kind: PoolKind::Avg,
        ..*p
    };
    let g = Geom::new(&p, input_shape)?;
    let out = [input_shape[0], input_shape[1], g.oh, g.ow];
    crate::shape::same(
        p.op(),
        "output gradient",
        grad_y.dims(),
        "pooled output",
        &out,
    )?;
    if !grad_y.device().is_cpu() {
        return Err(unsupported_device(p.op(), grad_y));
    }
    dispatch_float!(
        p.op(),
        grad_y.dtype(),
        avg_backward_cpu(&g, grad_y, input_shape)
    )
}

fn avg_backward_cpu<T: Float>(g: &Geom, grad_y: &Tensor, input_shape: &[usize]) -> Result<Tensor> {
    let (hw, ohw) = (g.h * g.w, g.oh * g.ow);
    let scale = T::from_f64(1.0 / (g.p.kernel[0] * g.p.kernel[1]) as f64);
    let mut dx = vec![T::ZERO; g.planes * hw];
    cpu::with_slice::<T, _>("avg_pool2d", grad_y, |gs| {
        dx.par_chunks_mut(hw).enumerate().for_each(|(plane, dx)| {
            let gs = &gs[plane * ohw..(plane + 1) * ohw];
            for oy in 0..g.oh {
                for ox in 0..g.ow {
                    let v = gs[oy * g.ow + ox] * scale;
                    let (ys, xr) = g.window(oy, ox);
                    for iy in ys {
                        for d in &mut dx[iy * g.w + xr.start..iy * g.w + xr.end] {
                            *d += v;
                        }
                    }
                }
            }
        });
        Ok(())
    })?;
    cpu::tensor("avg_pool2d", dx, input_shape)
}

const GAP: &str = "global_avg_pool";

/// Global average pool forward: [N, C, H, W] -> [N, C, 1, 1] (PyTorch's
/// `AdaptiveAvgPool2d(1)`).
pub fn global_avg_pool(x: &Tensor) -> Result<Tensor> {
    nchw(GAP, "input", x.dims())?;
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
    (grad_y / (h * w) as f64)
        .ctx(GAP)?
        .broadcast_as((n, c, h, w))
        .ctx(GAP)?
        .contiguous()
        .ctx(GAP)
}
