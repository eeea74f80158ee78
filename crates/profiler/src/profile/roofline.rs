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
            r.roof_sec = (r.flops as f64 / machine.flops_per_sec)
                .max(r.bytes as f64 / machine.bytes_per_sec);
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
}
