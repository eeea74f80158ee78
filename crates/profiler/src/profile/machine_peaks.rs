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
}

impl MachinePeaks {
    /// Peaks measured elsewhere (a datasheet, a test), without a spread.
    pub fn new(flops_per_sec: f64, bytes_per_sec: f64) -> Self {
        MachinePeaks {
            flops_per_sec,
            bytes_per_sec,
            flops_range: None,
            bytes_range: None,
        }
    }

    /// The arithmetic intensity (FLOPs per byte) where the two roofs meet.
    pub fn ridge(&self) -> f64 {
        self.flops_per_sec / self.bytes_per_sec
    }
}
