//! Global average pooling on CUDA (`crates/ops/cuda/global_pool.cu`): one warp per plane;
//! f32, f64, and bf16 and f16 summed in float.

use candle_core::Tensor;

use crate::error::{CandleContext, Result};
use crate::gpu::cuda::{
    contiguous, device_of, dispatch_with_16_bit, empty_like, launch, output, suffix_with_16_bit,
    view, wrap, Source,
};
use crate::gpu::Launch;

/// Global average pooling [N, C, H, W] -> [N, C, 1, 1]: one warp per plane.
pub(crate) fn global_avg_pool(
    op: &'static str,
    x: &Tensor,
    [n, c, h, w]: [usize; 4],
) -> Result<Tensor> {
    let planes = n * c;
    if planes == 0 || h * w == 0 {
        return (x.sum_keepdim(3).ctx(op)?.sum_keepdim(2).ctx(op)? / (h * w).max(1) as f64).ctx(op);
    }
    let (dev, x) = (device_of(op, x)?, contiguous(op, x)?);
    let hw = crate::gpu::launch::kernel_int(op, "plane size", h * w)?;
    let name = format!(
        "global_avg_pool_forward_{}",
        suffix_with_16_bit(op, x.dtype())?
    );
    dispatch_with_16_bit!(op, x.dtype(), T, _S => {
        let (xs, xl) = x.storage_and_layout();
        let xv = view::<T>(op, &xs, xl)?;
        let mut y = output::<T>(op, &dev, planes)?;
        let p = planes as i64;
        launch!(op, dev, Source::GlobalPool, name, Launch::global_avg_pool(planes), [&xv, &mut y, &p, &hw]);
        Ok(wrap(y, &dev, &[n, c, 1, 1]))
    })
}

/// Global average pooling backward: each plane's gradient over its H*W inputs.
pub(crate) fn global_avg_pool_backward(
    op: &'static str,
    grad_y: &Tensor,
    shape: [usize; 4],
) -> Result<Tensor> {
    let total: usize = shape.iter().product();
    if total == 0 {
        return empty_like(op, grad_y, &shape);
    }
    let (dev, g) = (device_of(op, grad_y)?, contiguous(op, grad_y)?);
    let hw = crate::gpu::launch::kernel_int(op, "plane size", shape[2] * shape[3])?;
    let name = format!(
        "global_avg_pool_backward_{}",
        suffix_with_16_bit(op, g.dtype())?
    );
    dispatch_with_16_bit!(op, g.dtype(), T, _S => {
        let (gs, gl) = g.storage_and_layout();
        let gv = view::<T>(op, &gs, gl)?;
        let mut dx = output::<T>(op, &dev, total)?;
        let len = total as i64;
        launch!(op, dev, Source::GlobalPool, name, Launch::elementwise(total), [&gv, &mut dx, &len, &hw]);
        Ok(wrap(dx, &dev, &shape))
    })
}
