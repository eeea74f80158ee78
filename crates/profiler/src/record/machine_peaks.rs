//! This machine's measured peaks, a GEMM's FLOP/s and a streaming copy's bytes/s: the
//! roofs of the [`roofline`](crate::views::roofline).

use std::time::Instant;

use candle_core::{DType, Device, Tensor};

use wick_graph::Result;

use crate::profile::machine_peaks::MachinePeaks;

/// GEMM size: 2·N³ FLOPs, large enough to reach the peak, short on any machine.
const GEMM_N: usize = 1024;
/// Copy size in f32 elements: 128 MB, far beyond any cache.
const COPY_ELEMS: usize = 32 << 20;

impl MachinePeaks {
    /// Measures the peaks on `device` (about a second on a CPU).
    pub fn measure(device: &Device) -> Result<Self> {
        let a = Tensor::ones((GEMM_N, GEMM_N), DType::F32, device)?;
        let b = Tensor::ones((GEMM_N, GEMM_N), DType::F32, device)?;
        let gemm = timed_runs(5, device, || a.matmul(&b).map(drop))?;
        let flops = 2.0 * (GEMM_N as f64).powi(3);
        let copy = match device {
            Device::Cpu => {
                let src = vec![1.0f32; COPY_ELEMS];
                let mut dst = vec![0.0f32; COPY_ELEMS];
                timed_runs(5, device, || {
                    parallel_copy(&src, &mut dst);
                    Ok(())
                })?
            }
            _ => {
                let src = Tensor::ones(COPY_ELEMS, DType::F32, device)?;
                timed_runs(5, device, || src.copy().map(drop))?
            }
        };
        let bytes = 2.0 * (COPY_ELEMS * 4) as f64;
        let bf16 = match device {
            Device::Cpu if wick_ops::bf16::has_avx512_bf16() => Some(bf16_gemm_seconds()?),
            _ => None,
        };
        Ok(MachinePeaks {
            flops_per_sec: flops / gemm[0],
            bytes_per_sec: bytes / copy[0],
            flops_range: Some([flops / gemm[gemm.len() - 1], flops / gemm[0]]),
            bytes_range: Some([bytes / copy[copy.len() - 1], bytes / copy[0]]),
            bf16_flops_per_sec: bf16.map(|seconds| flops / seconds),
        })
    }
}

/// The peak probes one profiler takes beside its timed iterations (`with_peak_probes`):
/// when attached, at the end of each schedule cycle that another follows, and when the
/// profile is taken. Their range says how far the machine moved during the run.
#[derive(Debug, Default)]
pub(crate) struct PeakProbes {
    /// Whether to probe at all.
    pub(crate) enabled: bool,
    /// The probes taken so far.
    taken: Vec<MachinePeaks>,
}

impl PeakProbes {
    /// Measures the peaks on `device` now (when enabled), then restarts the process's
    /// peak RSS: the probe's copy buffers are no part of the run's peak.
    pub(crate) fn probe(&mut self, device: &Device) -> Result<()> {
        if self.enabled {
            self.taken.push(MachinePeaks::measure(device)?);
            crate::record::memory_probe::restart_peak_rss();
        }
        Ok(())
    }

    /// The probes taken so far and `now` as one ([`MachinePeaks::across`]).
    pub(crate) fn with(&self, now: MachinePeaks) -> MachinePeaks {
        let all: Vec<MachinePeaks> = self.taken.iter().copied().chain([now]).collect();
        MachinePeaks::across(&all).unwrap_or(now)
    }

    /// How many probes were taken.
    pub(crate) fn count(&self) -> usize {
        self.taken.len()
    }
}

/// The fastest of five runs of wick's bf16 GEMM (on the fastest path this CPU has: AMX
/// tiles, `vdpbf16ps` or the widening one) at the f32 probe's size, on bf16 operands.
fn bf16_gemm_seconds() -> Result<f64> {
    use wick_ops::bf16::{gemm, Bf16Path, Matrix};
    let ones = vec![wick_ops::bf16::round_to_bf16(1.0); GEMM_N * GEMM_N];
    let operand = Matrix::new(&ones, (GEMM_N, 1));
    let mut out = vec![0f32; GEMM_N * GEMM_N];
    let times = timed_runs(5, &Device::Cpu, || {
        let dims = (GEMM_N, GEMM_N, GEMM_N);
        gemm(
            Bf16Path::current(),
            dims,
            (&mut out, (GEMM_N, 1)),
            false,
            &operand,
            &operand,
        );
        Ok(())
    })?;
    Ok(times[0])
}

/// The seconds of `runs` timed runs of `f` after one untimed, synchronising the device,
/// fastest first.
fn timed_runs(
    runs: usize,
    device: &Device,
    mut f: impl FnMut() -> candle_core::Result<()>,
) -> Result<Vec<f64>> {
    f()?;
    device.synchronize()?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        f()?;
        device.synchronize()?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

/// A copy split over the CPU threads, as the kernels use them.
fn parallel_copy(src: &[f32], dst: &mut [f32]) {
    use rayon::prelude::*;
    dst.par_chunks_mut(1 << 18)
        .zip(src.par_chunks(1 << 18))
        .for_each(|(d, s)| d.copy_from_slice(s));
}
