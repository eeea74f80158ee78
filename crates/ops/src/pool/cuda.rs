//! wick's own CUDA kernels, for the ops candle has no (correct) CUDA kernel for: padded
//! max and average pooling and their backward. The source (`kernels.cu`) travels with
//! the crate and is compiled at run time with NVRTC, once per device, by
//! [`crate::gpu::cuda::module`].

use std::sync::Arc;

use candle_core::cuda::cudarc::driver::{CudaModule, CudaView, LaunchConfig, PushKernelArg};
use candle_core::{CudaDevice, Storage, Tensor};

use crate::error::{CandleContext, OpError, Result};
use crate::gpu::cuda::{cuda_err, device_of, module, suffix, wrap, zeros, Source};

/// The CUDA device of `t` and the pooling module compiled for it.
fn device_and_module(op: &'static str, t: &Tensor) -> Result<(CudaDevice, Arc<CudaModule>)> {
    let dev = device_of(op, t)?;
    let module = module(op, &dev, Source::Pool)?;
    Ok((dev, module))
}

/// Runs `f` with a view of the contiguous data of a CUDA tensor.
fn with_view<T: candle_core::cuda::CudaDType, R>(
    op: &'static str,
    t: &Tensor,
    f: impl FnOnce(CudaView<'_, T>) -> Result<R>,
) -> Result<R> {
    let t = t.contiguous().ctx(op)?;
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cuda(cs) = &*storage else {
        return Err(OpError::Unsupported {
            op,
            what: "a CUDA kernel asked for a non-CUDA tensor".into(),
        });
    };
    let slice = cs.as_cuda_slice::<T>().ctx(op)?;
    let start = layout.start_offset();
    f(slice.slice(start..start + layout.shape().elem_count()))
}

/// Sizes passed to every pooling kernel: H, W, OH, OW, kh, kw, sh, sw, ph, pw.
pub(crate) struct PoolDims(pub [i32; 10]);

impl super::params::Geom {
    /// The sizes wick's CUDA pooling kernels take.
    pub(super) fn cuda_dims(&self) -> PoolDims {
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
        PoolDims(v.map(|x| x as i32))
    }
}

macro_rules! launch {
    ($op:expr, $module:expr, $dev:expr, $name:expr, $total:expr, [$($arg:expr),* $(,)?]) => {{
        let func = $module.load_function($name).map_err(cuda_err($op, "loading a pooling kernel"))?;
        let stream = $dev.cuda_stream();
        let mut b = stream.launch_builder(&func);
        $( b.arg($arg); )*
        // SAFETY: the argument list matches the kernel's signature in kernels.cu, and
        // every buffer holds `total` (or the plane-derived) elements the kernel indexes.
        unsafe { b.launch(LaunchConfig::for_num_elems($total as u32)) }.map_err(cuda_err($op, "launching a pooling kernel"))?;
    }};
}

/// Max-pool forward on CUDA: (output, u32 indices) of shape `out_shape`.
pub(crate) fn max_pool_forward(
    x: &Tensor,
    out_shape: &[usize],
    d: &PoolDims,
) -> Result<(Tensor, Tensor)> {
    const OP: &str = "max_pool2d";
    let (dev, module) = device_and_module(OP, x)?;
    let total = out_shape.iter().product::<usize>();
    let [h, w, oh, ow, kh, kw, sh, sw, ph, pw] = d.0;
    let total_i = total as i32;
    let mut idx = zeros::<u32>(OP, &dev, total)?;
    macro_rules! run {
        ($t:ty, $name:expr) => {{
            let mut y = zeros::<$t>(OP, &dev, total)?;
            with_view::<$t, _>(OP, x, |xv| {
                launch!(
                    OP,
                    module,
                    dev,
                    $name,
                    total,
                    [
                        &xv, &mut y, &mut idx, &total_i, &h, &w, &oh, &ow, &kh, &kw, &sh, &sw, &ph,
                        &pw
                    ]
                );
                Ok(())
            })?;
            Ok((wrap(y, &dev, out_shape), wrap(idx, &dev, out_shape)))
        }};
    }
    match suffix(OP, x.dtype())? {
        "f32" => run!(f32, "max_pool_fwd_f32"),
        _ => run!(f64, "max_pool_fwd_f64"),
    }
}

/// Max-pool backward on CUDA: scatters `grad_y` to the chosen elements (atomic adds).
pub(crate) fn max_pool_backward(
    grad_y: &Tensor,
    indices: &Tensor,
    input_shape: &[usize],
    d: &PoolDims,
) -> Result<Tensor> {
    const OP: &str = "max_pool2d";
    let (dev, module) = device_and_module(OP, grad_y)?;
    let total = grad_y.elem_count();
    let n_in: usize = input_shape.iter().product();
    let [h, w, oh, ow, ..] = d.0;
    let (total_i, hw, ohw) = (total as i32, h * w, oh * ow);
    macro_rules! run {
        ($t:ty, $name:expr) => {{
            let mut dx = zeros::<$t>(OP, &dev, n_in)?;
            with_view::<$t, _>(OP, grad_y, |gv| {
                with_view::<u32, _>(OP, indices, |iv| {
                    launch!(
                        OP,
                        module,
                        dev,
                        $name,
                        total,
                        [&gv, &iv, &mut dx, &total_i, &hw, &ohw]
                    );
                    Ok(())
                })
            })?;
            Ok(wrap(dx, &dev, input_shape))
        }};
    }
    match suffix(OP, grad_y.dtype())? {
        "f32" => run!(f32, "max_pool_bwd_f32"),
        _ => run!(f64, "max_pool_bwd_f64"),
    }
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
    let (dev, module) = device_and_module(OP, x)?;
    let total = out_shape.iter().product::<usize>();
    let [h, w, oh, ow, kh, kw, sh, sw, ph, pw] = d.0;
    let total_i = total as i32;
    macro_rules! run {
        ($t:ty, $fwd:expr, $bwd:expr) => {{
            let mut out = zeros::<$t>(OP, &dev, total)?;
            with_view::<$t, _>(OP, x, |xv| {
                let name = if backward { $bwd } else { $fwd };
                launch!(
                    OP,
                    module,
                    dev,
                    name,
                    total,
                    [&xv, &mut out, &total_i, &h, &w, &oh, &ow, &kh, &kw, &sh, &sw, &ph, &pw]
                );
                Ok(())
            })?;
            Ok(wrap(out, &dev, out_shape))
        }};
    }
    match suffix(OP, x.dtype())? {
        "f32" => run!(f32, "avg_pool_fwd_f32", "avg_pool_bwd_f32"),
        _ => run!(f64, "avg_pool_fwd_f64", "avg_pool_bwd_f64"),
    }
}
