//! The roofline: each op type's FLOPs and bytes moved against this machine's measured
//! peaks, a GEMM's FLOP/s and a streaming copy's bytes/s. An op type whose arithmetic
//! intensity (FLOPs per byte) is below the ridge point (peak FLOP/s / peak bytes/s) is
//! memory-bound: the best it can do is the copy's bandwidth. Above, it is compute-bound.
//! Its share of the roofline is what it achieved against that bound.

use serde::Serialize;

use crate::profile::data::Profile;
use crate::profile::machine_peaks::MachinePeaks;

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
    /// Seconds per iteration the type would take at its roof: its FLOPs at the GEMM peak
    /// or its bytes at the copy bandwidth, whichever takes longer.
    pub roof_sec: f64,
    /// The compute roof it is held to, FLOP/s: the f32 GEMM's peak, or the bf16 GEMM's
    /// for ops that compute in bf16 (a type of both dtypes: its FLOPs over the seconds
    /// each dtype's FLOPs take at its own peak).
    pub peak_flops_per_sec: f64,
}

impl RooflineRow {
    /// Seconds per iteration above the roof: the time this machine could save on the
    /// type (0 when it beat the measured roof).
    pub fn above_roof_sec(&self) -> f64 {
        (self.total_sec - self.roof_sec).max(0.0)
    }
}

/// The distance from the step's ops to this machine's roofs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RoofDistance {
    /// Seconds per iteration in ops.
    pub ops_sec: f64,
    /// Seconds per iteration the ops would take at their roofs.
    pub roof_sec: f64,
    /// Seconds per iteration above the roofs (summed per type, none below 0).
    pub above_sec: f64,
}

impl Profile {
    /// Every op type on the roofline of `machine`, longest first (needs per-op timings).
    pub fn roofline(&self, machine: &MachinePeaks) -> Vec<RooflineRow> {
        let mut rows: Vec<RooflineRow> = Vec::new();
        let all: f64 = self.ops.iter().map(|o| o.mean_sec).sum();
        for op in &self.ops {
            let name = op.type_name();
            let i = match rows.iter().position(|r| r.name == name) {
                Some(i) => i,
                None => {
                    rows.push(RooflineRow {
                        name,
                        total_sec: 0.0,
                        share: 0.0,
                        flops: 0,
                        bytes: 0,
                        intensity: 0.0,
                        gflops_per_sec: 0.0,
                        gbytes_per_sec: 0.0,
                        bound: Bound::Memory,
                        roofline_share: 0.0,
                        roof_sec: 0.0,
                        peak_flops_per_sec: 0.0,
                    });
                    rows.len() - 1
                }
            };
            let r = &mut rows[i];
            r.total_sec += op.mean_sec;
            r.flops = r.flops.saturating_add(op.flops);
            r.bytes = r.bytes.saturating_add(op.bytes);
            // Seconds at the compute roof, summed here and made a rate below.
            r.peak_flops_per_sec += op.flops as f64 / machine.compute_peak(&op.dtype);
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
            let compute_sec = r.peak_flops_per_sec;
            r.peak_flops_per_sec = if compute_sec > 0.0 {
                r.flops as f64 / compute_sec
            } else {
                machine.flops_per_sec
            };
            r.bound = if r.intensity >= r.peak_flops_per_sec / machine.bytes_per_sec {
                Bound::Compute
            } else {
                Bound::Memory
            };
            r.roofline_share = match r.bound {
                Bound::Compute => r.gflops_per_sec * 1e9 / r.peak_flops_per_sec,
                Bound::Memory => r.gbytes_per_sec * 1e9 / machine.bytes_per_sec,
            };
            r.roof_sec = compute_sec.max(r.bytes as f64 / machine.bytes_per_sec);
        }
        rows.sort_by(|a, b| b.total_sec.total_cmp(&a.total_sec));
        rows
    }

    /// How far the step's ops are from this machine's roofs.
    pub fn roof_distance(&self, machine: &MachinePeaks) -> RoofDistance {
        let rows = self.roofline(machine);
        RoofDistance {
            ops_sec: rows.iter().map(|r| r.total_sec).sum(),
            roof_sec: rows.iter().map(|r| r.roof_sec).sum(),
            above_sec: rows.iter().map(RooflineRow::above_roof_sec).sum(),
        }
    }

    /// Why this profile's roofline cannot be trusted, or `None` when it can: the threads
    /// waited for a core during the timed iterations (the times are inflated, the
    /// probe's peaks too low or too high), the peaks moved beyond [`PEAK_SPREAD`] between
    /// their probes, or a compute-bound type ran above the GEMM's peak (which a
    /// GEMM-bound kernel cannot do on a correctly measured peak).
    pub fn roofline_unreliable(&self, machine: &MachinePeaks) -> Option<String> {
        if let Some(c) = self.cpu_contention.filter(|c| c.is_contended()) {
            return Some(format!(
                "the threads waited for a core {:.1}% of their runnable time during the timed iterations, so the times and the peaks measured beside them need not belong together",
                100.0 * c.waiting_share()
            ));
        }
        let spread = |r: Option<[f64; 2]>, unit: &str, name: &str| {
            let [lo, hi] = r?;
            (lo > 0.0 && hi / lo > PEAK_SPREAD).then(|| {
                format!(
                    "the {name} moved from {:.1} to {:.1} {unit} between its probes (x{:.2}), so the machine was not in one state",
                    lo / 1e9,
                    hi / 1e9,
                    hi / lo
                )
            })
        };
        if let Some(why) = spread(machine.flops_range, "GFLOP/s", "GEMM peak")
            .or_else(|| spread(machine.bytes_range, "GB/s", "copy bandwidth"))
        {
            return Some(why);
        }
        let rows = self.roofline(machine);
        let above: Vec<&str> = rows
            .iter()
            .filter(|r| r.bound == Bound::Compute && r.roofline_share > 1.0)
            .map(|r| r.name.as_str())
            .collect();
        (!above.is_empty()).then(|| {
            format!(
                "{} ran faster than the measured GEMM peak ({:.1} GFLOP/s), which a compute-bound kernel cannot: the peak was measured low (a loaded machine or a cold clock)",
                above.join(", "),
                machine.flops_per_sec / 1e9
            )
        })
    }
}

/// A machine peak whose probes (before and after a run, [`MachinePeaks::spanning`]) are
/// this far apart was not measured in one machine state: its roofline is not trusted. A
/// quiet machine's probes differ by up to x1.25 (184-194 GFLOP/s, 25-32 GB/s on Zen 4); a
/// shared one's by x1.5 to x5 (35-185 GFLOP/s).
pub const PEAK_SPREAD: f64 = 1.5;
