//! This machine's measured peaks, a GEMM's FLOP/s and a streaming copy's bytes/s: the
//! roofs of the [`roofline`](super::roofline).

use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use serde::Serialize;

use crate::error::Result;

/// This machine's measured peaks.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct MachinePeaks {
    /// FLOP/s of a large f32 GEMM (candle's matmul on the device), best of five.
    pub flops_per_sec: f64,
    /// Bytes/s of a large streaming copy (read and write counted), best of five.
    pub bytes_per_sec: f64,
}

/// GEMM size: 2·N³ FLOPs, large enough to reach the peak, short on any machine.
const GEMM_N: usize = 1024;
/// Copy size in f32 elements: 128 MB, far beyond any cache.
const COPY_ELEMS: usize = 32 << 20;

impl MachinePeaks {
    /// Measures the peaks on `device` (about a second on a CPU).
    pub fn measure(device: &Device) -> Result<Self> {
        let a = Tensor::ones((GEMM_N, GEMM_N), DType::F32, device)?;
        let b = Tensor::ones((GEMM_N, GEMM_N), DType::F32, device)?;
        let gemm = best_of(5, device, || a.matmul(&b).map(drop))?;
        let flops = 2.0 * (GEMM_N as f64).powi(3);
        let copy_secs = match device {
            Device::Cpu => {
                let src = vec![1.0f32; COPY_ELEMS];
                let mut dst = vec![0.0f32; COPY_ELEMS];
                best_of(5, device, || {
                    parallel_copy(&src, &mut dst);
                    Ok(())
                })?
            }
            _ => {
                let src = Tensor::ones(COPY_ELEMS, DType::F32, device)?;
                best_of(5, device, || src.copy().map(drop))?
            }
        };
        let bytes = 2.0 * (COPY_ELEMS * 4) as f64;
        Ok(MachinePeaks {
            flops_per_sec: flops / gemm,
            bytes_per_sec: bytes / copy_secs,
        })
    }

    /// The arithmetic intensity (FLOPs per byte) where the two roofs meet.
    pub fn ridge(&self) -> f64 {
        self.flops_per_sec / self.bytes_per_sec
    }
}

/// The fastest of `runs` timed runs of `f` after one untimed, synchronising the device.
fn best_of(
    runs: usize,
    device: &Device,
    mut f: impl FnMut() -> candle_core::Result<()>,
) -> Result<f64> {
    f()?;
    device.synchronize()?;
    let mut best = f64::INFINITY;
    for _ in 0..runs {
        let start = Instant::now();
        f()?;
        device.synchronize()?;
        best = best.min(start.elapsed().as_secs_f64());
    }
    Ok(best)
}

/// A copy split over the CPU threads, as the kernels use them.
fn parallel_copy(src: &[f32], dst: &mut [f32]) {
    use rayon::prelude::*;
    dst.par_chunks_mut(1 << 18)
        .zip(src.par_chunks(1 << 18))
        .for_each(|(d, s)| d.copy_from_slice(s));
}
