//! wick's own CUDA kernels for the pools candle has no (correct) CUDA kernel for: padded
//! max and average pooling and their backward, in f32, f64, and bf16 and f16 (compared
//! and summed in float, rounded once). The source (`kernels.cu`) travels with the crate
//! and is compiled at run time with NVRTC, once per device, by [`crate::gpu::cuda::module`].

use candle_core::Tensor;

use crate::error::Result;
use crate::gpu::cuda::{
    contiguous, device_of, dispatch_with_16_bit, launch, output, suffix_with_16_bit, view, wrap,
    Source,
};
use crate::gpu::launch::kernel_int;
use crate::gpu::Launch;

/// The sizes every pooling kernel takes, in its order: H, W, OH, OW, kh, kw, sh, sw, ph, pw.
pub(crate) struct PoolDims(pub [i32; 10]);

impl super::params::Geom {
    /// The sizes wick's CUDA pooling kernels take, or an error naming the op when one is
    /// past what they index.
    pub(super) fn cuda_dims(&self, op: &'static str) -> Result<PoolDims> {
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
        let mut dims = [0i32; 10];
        for (d, x) in dims.iter_mut().zip(v) {
            *d = kernel_int(op, "a pooling size", x)?;
        }
        let plane = self.h.max(self.oh) * self.w.max(self.ow);
        kernel_int(op, "a plane's size", plane)?;
        Ok(PoolDims(dims))
    }
}

/// The kernel `{stem}_{dtype}` of `kernels.cu`, launched with one thread per element of
/// `total` over `input` (whose dtype names the variant) into a new tensor of `out_shape`:
/// the closure-like tail names the input's view, the output and the element count, and
/// lists the kernel's arguments before the sizes.
macro_rules! run_pool {
    ($op:expr, $stem:expr, $input:expr, $total:expr, $dims:expr, $out_shape:expr, |$xv:ident, $out:ident, $len:ident| [$($arg:expr),*]) => {{
        let (op, input): (&'static str, &Tensor) = ($op, $input);
        let dev = device_of(op, input)?;
        let x = contiguous(op, input)?;
        let name = format!("{}_{}", $stem, suffix_with_16_bit(op, x.dtype())?);
        let [h, w, oh, ow, kh, kw, sh, sw, ph, pw] = $dims.0;
        let $len = $total as i64;
        dispatch_with_16_bit!(op, x.dtype(), T, _S => {
            let (xs, xl) = x.storage_and_layout();
            let $xv = view::<T>(op, &xs, xl)?;
            let mut $out = output::<T>(op, &dev, $total)?;
            let sizes = [&h, &w, &oh, &ow, &kh, &kw, &sh, &sw, &ph, &pw];
            launch!(op, dev, Source::Pool, name, Launch::elementwise($total), [$($arg),*, sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], sizes[5], sizes[6], sizes[7], sizes[8], sizes[9]]);
            Ok(wrap($out, &dev, $out_shape))
        })
    }};
}

/// Max-pool forward on CUDA: (output, u32 indices) of shape `out_shape`.
pub(crate) fn max_pool_forward(
    x: &Tensor,
    out_shape: &[usize],
    d: &PoolDims,
) -> Result<(Tensor, Tensor)> {
    const OP: &str = "max_pool2d";
    let total = out_shape.iter().product::<usize>();
    let dev = device_of(OP, x)?;
    let mut idx = output::<u32>(OP, &dev, total)?;
    let y = run_pool!(OP, "max_pool_fwd", x, total, d, out_shape, |xv, y, len| [
        &xv, &mut y, &mut idx, &len
    ])?;
    Ok((y, wrap(idx, &dev, out_shape)))
}

/// Max-pool backward on CUDA: each input element gathers the output gradients whose
/// index names it.
pub(crate) fn max_pool_backward(
    grad_y: &Tensor,
    indices: &Tensor,
    input_shape: &[usize],
    d: &PoolDims,
) -> Result<Tensor> {
    const OP: &str = "max_pool2d";
    let total: usize = input_shape.iter().product();
    let idx = contiguous(OP, indices)?;
    let (is, il) = idx.storage_and_layout();
    let iv = view::<u32>(OP, &is, il)?;
    run_pool!(
        OP,
        "max_pool_bwd",
        grad_y,
        total,
        d,
        input_shape,
        |gv, dx, len| [&gv, &iv, &mut dx, &len]
    )
}

/// Average-pool forward (`backward == false`, from `x` to `out_shape`) or backward (from the
/// output gradient `x` to `out_shape`, the input's shape) on CUDA.
pub(crate) fn avg_pool(
    x: &Tensor,
    out_shape: &[usize],
    d: &PoolDims,
    backward: bool,
) -> Result<Tensor> {
    const OP: &str = "avg_pool2d";
    let total = out_shape.iter().product::<usize>();
    let stem = if backward {
        "avg_pool_bwd"
    } else {
        "avg_pool_fwd"
    };
    run_pool!(OP, stem, x, total, d, out_shape, |xv, out, len| [
        &xv, &mut out, &len
    ])
}
