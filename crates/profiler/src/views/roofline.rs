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
        if let Some(why) = self.roofline_unreliable(machine) {
            return format!(
                "Distance to this machine's limit : withheld, the roofline is unreliable: {why}; rerun on a quiet machine"
            );
        }
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
        let bf16 = machine
            .bf16_flops_per_sec
            .map(|f| format!(", bf16 GEMM {:.1} GFLOP/s (the roof of bf16 ops)", f / 1e9))
            .unwrap_or_default();
        let mut s = format!(
            "Roofline (this machine, measured: f32 GEMM {:.1} GFLOP/s{bf16}, streaming copy {:.1} GB/s; ridge point {:.1} FLOP/byte). \
             FLOP/B: arithmetic intensity; GFLOP/s and GB/s: achieved; Roof: share of the roof that bounds the type; \
             AtRoof(ms): its time per iteration at that roof; Above(ms): its time above it.\n",
            machine.flops_per_sec / 1e9,
            machine.bytes_per_sec / 1e9,
            machine.ridge()
        );
        let _ = writeln!(s, "{}", self.roof_headline(machine));
        if self.roofline_unreliable(machine).is_some() {
            let _ = writeln!(
                s,
                "UNRELIABLE: the table below is shown for reference only; its headline and the roofline advice are withheld"
            );
        }
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
/// did). Above the memory roof, the op's data was in cache: the copy is measured on cold,
/// streaming data. Above the compute roof, the GEMM's peak was measured low.
pub fn beyond_roof_note(rows: &[RooflineRow]) -> Option<String> {
    let names = |bound: Bound| -> Vec<&str> {
        rows.iter()
            .filter(|r| r.roofline_share > 1.0 && r.bound == bound)
            .map(|r| r.name.as_str())
            .collect()
    };
    let (memory, compute) = (names(Bound::Memory), names(Bound::Compute));
    let mut notes = Vec::new();
    if !memory.is_empty() {
        notes.push(format!(
            "Note: {} passed 100% of the memory roof. The memory roof is a streaming copy far larger than the caches; an op whose data is still in cache (written by the op before it, or small) reads faster than that. Such a type is not limited by main memory here, and its Above(ms) is 0.",
            memory.join(", ")
        ));
    }
    if !compute.is_empty() {
        notes.push(format!(
            "Note: {} passed 100% of the compute roof. Caches do not explain that: the roof is the GEMM's measured peak, and a compute-bound kernel cannot beat it, so the peak was measured low (a loaded machine or a cold clock) and the roofline is not trusted.",
            compute.join(", ")
        ));
    }
    (!notes.is_empty()).then(|| notes.join("\n"))
}

#[cfg(test)]
mod tests {

    use crate::profile::contention::CpuContention;
    use crate::profile::data::Profile;
    use crate::profile::machine_peaks::MachinePeaks;
    use crate::views::test_profiles::conv_and_relu;

    /// A conv at 50% of a 100 GFLOP/s roof and a ReLU at 10% of a 10 GB/s one, with the
    /// peaks of two probes (before and after the run) `before` and `after` GFLOP/s apart.
    fn profile(before: f64, after: f64, waited_sec: f64) -> (Profile, MachinePeaks) {
        let p = Profile {
            cpu_contention: Some(CpuContention {
                ran_sec: 1.0,
                waited_sec,
            }),
            ..conv_and_relu((0.5, 25.0, 100_000_000), (0.5, 500_000_000))
        };
        let m =
            MachinePeaks::new(before * 1e9, 10e9).spanning(&MachinePeaks::new(after * 1e9, 10e9));
        (p, m)
    }

    fn roofline_advice(p: &Profile) -> Vec<String> {
        p.recommendations()
            .into_iter()
            .filter(|r| r.rule == "roofline")
            .map(|r| format!("{} -> {}", r.figure, r.advice))
            .collect()
    }

    #[test]
    fn a_quiet_run_gets_its_roofline_and_advice() {
        let (mut p, m) = profile(100.0, 95.0, 0.01);
        assert_eq!(m.flops_per_sec, 100e9);
        assert_eq!(m.flops_range, Some([95e9, 100e9]));
        assert_eq!(p.roofline_unreliable(&m), None);
        assert!(p.roof_headline(&m).contains("the ops take 1000.000 ms"));
        p.machine = Some(m);
        let advice = roofline_advice(&p);
        assert_eq!(advice.len(), 1, "{advice:?}");
        assert!(advice[0].starts_with("ReLU takes 50.0%"), "{advice:?}");
        assert!(!p.roofline_table(&m).contains("UNRELIABLE"));
    }

    #[test]
    fn a_shared_machine_or_moved_peaks_withhold_the_headline_and_advice() {
        let cases = [
            (profile(100.0, 95.0, 0.2), "waited for a core 16.7%"),
            (
                profile(185.0, 35.0, 0.01),
                "GEMM peak moved from 35.0 to 185.0 GFLOP/s",
            ),
        ];
        for ((mut p, m), why) in cases {
            let reason = p.roofline_unreliable(&m).expect("unreliable");
            assert!(reason.contains(why), "{reason}");
            let headline = p.roof_headline(&m);
            assert!(
                headline.contains("withheld") && headline.contains(why),
                "{headline}"
            );
            assert!(p.roofline_table(&m).contains("UNRELIABLE"));
            p.machine = Some(m);
            let advice = roofline_advice(&p);
            assert_eq!(advice.len(), 1, "{advice:?}");
            assert!(
                advice[0].contains("the roofline is unreliable") && !advice[0].contains("first"),
                "{advice:?}"
            );
        }
    }

    #[test]
    fn bf16_ops_are_held_to_the_bf16_gemm_peak() {
        let (mut p, m) = profile(100.0, 95.0, 0.01);
        let conv_share = |p: &Profile, m: &MachinePeaks| {
            let rows = p.roofline(m);
            let conv = rows.iter().find(|r| r.name == "ConvForward").unwrap();
            (conv.roofline_share, conv.peak_flops_per_sec, conv.roof_sec)
        };
        assert_eq!(conv_share(&p, &m), (0.5, 100e9, 0.25));
        let with_bf16 = MachinePeaks {
            bf16_flops_per_sec: Some(200e9),
            ..m
        };
        // f32 ops keep the f32 roof whatever the bf16 peak.
        assert_eq!(conv_share(&p, &with_bf16), (0.5, 100e9, 0.25));
        p.ops[0].dtype = "BF16".into();
        assert_eq!(conv_share(&p, &with_bf16), (0.25, 200e9, 0.125));
        let table = p.roofline_table(&with_bf16);
        assert!(table.contains("bf16 GEMM 200.0 GFLOP/s"), "{table}");
        // Without a bf16 peak (no avx512_bf16, an older profile) the f32 roof stands.
        assert_eq!(conv_share(&p, &m), (0.5, 100e9, 0.25));
    }

    #[test]
    fn a_compute_bound_type_above_the_gemm_peak_is_blamed_on_the_peak_not_the_cache() {
        // The conv reaches 50 GFLOP/s against a peak measured at 40: the peak is low.
        let (p, m) = profile(40.0, 39.0, 0.01);
        let reason = p.roofline_unreliable(&m).expect("unreliable");
        assert!(reason.starts_with("ConvForward ran faster than the measured GEMM peak"));
        let table = p.roofline_table(&m);
        assert!(
            table.contains(
                "ConvForward passed 100% of the compute roof. Caches do not explain that"
            ),
            "{table}"
        );
        assert!(
            !table.contains("ConvForward passed 100% of the memory roof"),
            "{table}"
        );
    }
}
