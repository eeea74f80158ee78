//! The roofline: each op type's FLOPs and bytes moved against this machine's measured
//! peaks, a GEMM's FLOP/s and a streaming copy's bytes/s. An op type whose arithmetic
//! intensity (FLOPs per byte) is below the ridge point (peak FLOP/s / peak bytes/s) is
//! memory-bound: the best it can do is the copy's bandwidth. Above, it is compute-bound.
//! Its share of the roofline is what it achieved against that bound.

use std::fmt::Write as _;
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use serde::Serialize;

use super::profile::Profile;
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

/// What limits an op type on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// Intensity at or above the ridge point: the GEMM peak is its roof.
    Compute,
    /// Intensity below the ridge point: the copy bandwidth is its roof.
    Memory,
}

/// One op type on the roofline.
#[derive(Debug, Clone, Serialize)]
pub struct RooflineRow {
    /// The kernel name.
    pub name: String,
    /// Seconds per iteration in this type.
    pub total_sec: f64,
    /// Share of all op time.
    pub share: f64,
    /// FLOPs per iteration.
    pub flops: u64,
    /// Bytes moved per iteration.
    pub bytes: u64,
    /// FLOPs per byte.
    pub intensity: f64,
    /// Achieved GFLOP/s.
    pub gflops_per_sec: f64,
    /// Achieved GB/s.
    pub gbytes_per_sec: f64,
    /// Compute- or memory-bound.
    pub bound: Bound,
    /// Achieved against the roof that bounds it (0..1, more when the roof was measured
    /// low: caches beat the streaming copy).
    pub roofline_share: f64,
}

impl Profile {
    /// Every op type on the roofline of `machine`, longest first (needs per-op timings).
    pub fn roofline(&self, machine: &MachinePeaks) -> Vec<RooflineRow> {
        let mut rows: Vec<RooflineRow> = Vec::new();
        let all: f64 = self.ops.iter().map(|o| o.mean_sec).sum();
        for op in &self.ops {
            let i = match rows.iter().position(|r| r.name == op.name) {
                Some(i) => i,
                None => {
                    rows.push(RooflineRow {
                        name: op.name.clone(),
                        total_sec: 0.0,
                        share: 0.0,
                        flops: 0,
                        bytes: 0,
                        intensity: 0.0,
                        gflops_per_sec: 0.0,
                        gbytes_per_sec: 0.0,
                        bound: Bound::Memory,
                        roofline_share: 0.0,
                    });
                    rows.len() - 1
                }
            };
            let r = &mut rows[i];
            r.total_sec += op.mean_sec;
            r.flops = r.flops.saturating_add(op.flops);
            r.bytes = r.bytes.saturating_add(op.bytes);
        }
        for r in &mut rows {
            r.share = if all > 0.0 { r.total_sec / all } else { 0.0 };
            r.intensity = if r.bytes > 0 {
                r.flops as f64 / r.bytes as f64
            } else {
                0.0
            };
            let t = r.total_sec.max(f64::MIN_POSITIVE);
            r.gflops_per_sec = r.flops as f64 / t / 1e9;
            r.gbytes_per_sec = r.bytes as f64 / t / 1e9;
            r.bound = if r.intensity >= machine.ridge() {
                Bound::Compute
            } else {
                Bound::Memory
            };
            r.roofline_share = match r.bound {
                Bound::Compute => r.gflops_per_sec * 1e9 / machine.flops_per_sec,
                Bound::Memory => r.gbytes_per_sec * 1e9 / machine.bytes_per_sec,
            };
        }
        rows.sort_by(|a, b| b.total_sec.total_cmp(&a.total_sec));
        rows
    }

    /// The roofline table as text, with the machine's peaks and every column defined.
    pub fn roofline_table(&self, machine: &MachinePeaks) -> String {
        let mut s = format!(
            "Roofline (this machine, measured: f32 GEMM {:.1} GFLOP/s, streaming copy {:.1} GB/s; ridge point {:.1} FLOP/byte). \
             FLOP/B: arithmetic intensity; GFLOP/s and GB/s: achieved; Roof: share of the roof that bounds the type.\n",
            machine.flops_per_sec / 1e9,
            machine.bytes_per_sec / 1e9,
            machine.ridge()
        );
        let _ = writeln!(
            s,
            "{:<34} {:>7} {:>9} {:>10} {:>9} {:>8} {:>7}",
            "Kernel", "Share", "FLOP/B", "GFLOP/s", "GB/s", "Bound", "Roof"
        );
        for r in self.roofline(machine) {
            let bound = match r.bound {
                Bound::Compute => "compute",
                Bound::Memory => "memory",
            };
            let _ = writeln!(
                s,
                "{:<34} {:>6.1}% {:>9.2} {:>10.1} {:>9.1} {:>8} {:>6.0}%",
                r.name,
                r.share * 100.0,
                r.intensity,
                r.gflops_per_sec,
                r.gbytes_per_sec,
                bound,
                r.roofline_share * 100.0
            );
        }
        s
    }
}
