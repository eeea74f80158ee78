//! The roofline's text: the headline and the per-op-type table against the machine's
//! peaks, from [`Profile::roofline`].

use std::fmt::Write as _;

use crate::profile::data::Profile;
use crate::profile::machine_peaks::MachinePeaks;
use crate::profile::roofline::{Bound, RooflineRow};

impl Profile {
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
