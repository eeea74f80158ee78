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

    /// Two probes of one run (before and after it, say) as one: the best of each peak, and as
    /// its range the two probes' bests, so the range says how far the machine moved
    /// between them. A probe's own slowest run is left out: on a quiet shared machine one
    /// run of five is often 1.5x slower than the others.
    pub fn spanning(&self, other: &MachinePeaks) -> MachinePeaks {
        Self::across(&[*self, *other]).unwrap_or(*self)
    }

    /// Any number of probes of one run (before it, between its schedule's cycles, after
    /// it) as one, as [`spanning`](Self::spanning) joins two: the best of each peak, and
    /// the probes' bests as its range. `None` for no probe.
    pub fn across(probes: &[MachinePeaks]) -> Option<MachinePeaks> {
        let first = probes.first()?;
        let range = |peak: fn(&MachinePeaks) -> f64| {
            let (lo, hi) = probes
                .iter()
                .map(peak)
                .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
                    (lo.min(v), hi.max(v))
                });
            [lo, hi]
        };
        let (flops, bytes) = (range(|p| p.flops_per_sec), range(|p| p.bytes_per_sec));
        Some(MachinePeaks {
            flops_per_sec: flops[1],
            bytes_per_sec: bytes[1],
            flops_range: (probes.len() > 1).then_some(flops).or(first.flops_range),
            bytes_range: (probes.len() > 1).then_some(bytes).or(first.bytes_range),
            bf16_flops_per_sec: probes
                .iter()
                .filter_map(|p| p.bf16_flops_per_sec)
                .reduce(f64::max),
        })
    }

    /// The arithmetic intensity (FLOPs per byte) where the two roofs meet.
    pub fn ridge(&self) -> f64 {
        self.flops_per_sec / self.bytes_per_sec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_join_into_their_best_and_the_range_of_their_bests() {
        let probe = |gflops: f64, gbytes: f64| MachinePeaks {
            flops_range: Some([1.0, gflops * 1e9]),
            ..MachinePeaks::new(gflops * 1e9, gbytes * 1e9)
        };
        let all =
            MachinePeaks::across(&[probe(200.0, 20.0), probe(60.0, 25.0), probe(180.0, 10.0)])
                .unwrap();
        assert_eq!(all.flops_per_sec, 200e9);
        assert_eq!(all.flops_range, Some([60e9, 200e9]));
        assert_eq!(all.bytes_range, Some([10e9, 25e9]));
        // One probe keeps its own spread; two join as `spanning` always did.
        assert_eq!(
            MachinePeaks::across(&[probe(50.0, 5.0)])
                .unwrap()
                .flops_range,
            Some([1.0, 50e9])
        );
        let two = probe(100.0, 5.0).spanning(&probe(50.0, 5.0));
        assert_eq!(two.flops_range, Some([50e9, 100e9]));
        assert!(MachinePeaks::across(&[]).is_none());
    }
}
