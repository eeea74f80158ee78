//! The roofline: each op type's FLOPs and bytes moved against this machine's measured
//! peaks, a GEMM's FLOP/s and a streaming copy's bytes/s. An op type whose arithmetic
//! intensity (FLOPs per byte) is below the ridge point (peak FLOP/s / peak bytes/s) is
//! memory-bound: the best it can do is the copy's bandwidth. Above, it is compute-bound.
//! Its share of the roofline is what it achieved against that bound.

use std::fmt::Write as _;

use serde::Serialize;

use super::machine_peaks::MachinePeaks;
use super::profile::Profile;

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

    /// The roofline view's headline: the time the ops would take at this machine's
    /// roofs, the time above them, and the types that hold most of it.
    pub fn roof_headline(&self, machine: &MachinePeaks) -> String {
        let d = self.roof_distance(machine);
        let mut rows = self.roofline(machine);
        rows.sort_by(|a, b| b.above_roof_sec().total_cmp(&a.above_roof_sec()));
        let top: Vec<String> = rows
            .iter()
            .take(3)
            .filter(|r| r.above_roof_sec() > 0.0)
            .map(|r| {
                format!(
                    "{} {:.3} ms ({:.0}%)",
                    r.name,
                    r.above_roof_sec() * 1e3,
                    100.0 * r.above_roof_sec() / d.above_sec.max(f64::MIN_POSITIVE)
                )
            })
            .collect();
        format!(
            "Distance to this machine's limit : the ops take {:.3} ms per iteration; at their roofs they would take {:.3} ms; {:.3} ms ({:.1}% of op time) is above the roofs, most in {}",
            d.ops_sec * 1e3,
            d.roof_sec * 1e3,
            d.above_sec * 1e3,
            100.0 * d.above_sec / d.ops_sec.max(f64::MIN_POSITIVE),
            if top.is_empty() { "none".to_string() } else { top.join(", ") }
        )
    }

    /// The roofline table as text, with the machine's peaks and every column defined.
    pub fn roofline_table(&self, machine: &MachinePeaks) -> String {
        let mut s = format!(
            "Roofline (this machine, measured: f32 GEMM {:.1} GFLOP/s, streaming copy {:.1} GB/s; ridge point {:.1} FLOP/byte). \
             FLOP/B: arithmetic intensity; GFLOP/s and GB/s: achieved; Roof: share of the roof that bounds the type; \
             AtRoof(ms): its time per iteration at that roof; Above(ms): its time above it.\n",
            machine.flops_per_sec / 1e9,
            machine.bytes_per_sec / 1e9,
            machine.ridge()
        );
        let _ = writeln!(s, "{}", self.roof_headline(machine));
        let _ = writeln!(
            s,
            "{:<34} {:>7} {:>9} {:>10} {:>9} {:>8} {:>7} {:>10} {:>10}",
            "Kernel",
            "Share",
            "FLOP/B",
            "GFLOP/s",
            "GB/s",
            "Bound",
            "Roof",
            "AtRoof(ms)",
            "Above(ms)"
        );
        let rows = self.roofline(machine);
        for r in &rows {
            let bound = match r.bound {
                Bound::Compute => "compute",
                Bound::Memory => "memory",
            };
            let _ = writeln!(
                s,
                "{:<34} {:>6.1}% {:>9.2} {:>10.1} {:>9.1} {:>8} {:>6.0}% {:>10.3} {:>10.3}",
                r.name,
                r.share * 100.0,
                r.intensity,
                r.gflops_per_sec,
                r.gbytes_per_sec,
                bound,
                r.roofline_share * 100.0,
                r.roof_sec * 1e3,
                r.above_roof_sec() * 1e3
            );
        }
        if let Some(note) = beyond_roof_note(&rows) {
            let _ = writeln!(s, "{note}");
        }
        s
    }
}

/// The note under the roofline when a type passed 100% of its roof (`None` when none
/// did): the roofs are measured on cold, streaming data.
pub fn beyond_roof_note(rows: &[RooflineRow]) -> Option<String> {
    let names: Vec<&str> = rows
        .iter()
        .filter(|r| r.roofline_share > 1.0)
        .map(|r| r.name.as_str())
        .collect();
    if names.is_empty() {
        return None;
    }
    Some(format!(
        "Note: {} passed 100% of the roof. The memory roof is a streaming copy far larger than the caches; an op whose data is still in cache (written by the op before it, or small) reads faster than that. Such a type is not limited by main memory here, and its Above(ms) is 0.",
        names.join(", ")
    ))
}
