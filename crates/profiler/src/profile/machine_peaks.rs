//! This machine's measured peaks, a GEMM's FLOP/s and a streaming copy's bytes/s: the
//! roofs of the [`roofline`](crate::views::roofline), measured by
//! [`MachinePeaks::measure`].

use serde::Serialize;

/// This machine's measured peaks.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct MachinePeaks {
    /// FLOP/s of a large f32 GEMM (candle's matmul on the device), best of five.
    pub flops_per_sec: f64,
    /// Bytes/s of a large streaming copy (read and write counted), best of five.
    pub bytes_per_sec: f64,
    /// The GEMM's slowest and fastest of the five runs, FLOP/s: how much the machine
    /// itself moved while it was measured (absent in older profiles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flops_range: Option<[f64; 2]>,
    /// The copy's slowest and fastest of the five runs, bytes/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_range: Option<[f64; 2]>,
    /// FLOP/s of the same GEMM with bf16 products (wick's bf16 GEMM on `vdpbf16ps`), best
    /// of five, on a CPU with `avx512_bf16`: the compute roof of the ops that compute in
    /// bf16 (absent elsewhere and in older profiles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bf16_flops_per_sec: Option<f64>,
}

impl MachinePeaks {
    /// Peaks measured elsewhere (a datasheet, a test), without a spread.
    pub fn new(flops_per_sec: f64, bytes_per_sec: f64) -> Self {
        MachinePeaks {
            flops_per_sec,
            bytes_per_sec,
            flops_range: None,
            bytes_range: None,
            bf16_flops_per_sec: None,
        }
    }

    /// The compute roof of an op computing in `dtype` (a profile's dtype name): the bf16
    /// GEMM's peak for `BF16` where it was measured, the f32 GEMM's otherwise.
    pub fn compute_peak(&self, dtype: &str) -> f64 {
        match self.bf16_flops_per_sec {
            Some(bf16) if dtype == "BF16" => bf16,
            _ => self.flops_per_sec,
        }
    }

    /// Two probes of one run (before and after it) as one: the best of each peak, and as
    /// its range the two probes' bests, so the range says how far the machine moved
    /// between them. A probe's own slowest run is left out: on a quiet shared machine one
    /// run of five is often 1.5x slower than the others.
    pub fn spanning(&self, other: &MachinePeaks) -> MachinePeaks {
        let range = |a: f64, b: f64| Some([a.min(b), a.max(b)]);
        MachinePeaks {
            flops_per_sec: self.flops_per_sec.max(other.flops_per_sec),
            bytes_per_sec: self.bytes_per_sec.max(other.bytes_per_sec),
            flops_range: range(self.flops_per_sec, other.flops_per_sec),
            bytes_range: range(self.bytes_per_sec, other.bytes_per_sec),
            bf16_flops_per_sec: match (self.bf16_flops_per_sec, other.bf16_flops_per_sec) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            },
        }
    }

    /// The arithmetic intensity (FLOPs per byte) where the two roofs meet.
    pub fn ridge(&self) -> f64 {
        self.flops_per_sec / self.bytes_per_sec
    }
}
