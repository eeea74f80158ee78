//! Whether two sets of runs can be compared at all: the settings that change a step's
//! time without a change in the code (threads, CPU, device, batch, passes), and the
//! machine's measured peaks, whose drift between runs (a loaded machine, a lower clock)
//! moves every figure. `wick-prof diff` states each difference above its verdict, and can
//! normalise the times by the peaks.

use crate::profile::contention::CONTENDED_SHARE;
use crate::profile::data::Profile;
use crate::profile::machine_peaks::MachinePeaks;
use crate::profile::roofline::Bound;

/// A measured peak's range over a side's runs, from each run's slowest to its fastest
/// measurement (just the peak when a profile has no range).
fn peak_range(
    side: &[Profile],
    peak: fn(&MachinePeaks) -> f64,
    range: fn(&MachinePeaks) -> Option<[f64; 2]>,
) -> Option<[f64; 2]> {
    let mut out: Option<[f64; 2]> = None;
    for m in side.iter().map(|p| p.machine.as_ref()) {
        let m = m?;
        let [lo, hi] = range(m).unwrap_or([peak(m), peak(m)]);
        out = Some(match out {
            Some([a, b]) => [a.min(lo), b.max(hi)],
            None => [lo, hi],
        });
    }
    out
}

/// Whether any run of a side was saved without the machine's peaks.
fn lacks_peaks(side: &[Profile]) -> bool {
    side.iter().any(|p| p.machine.is_none())
}

/// Without measured ranges, two peaks this far apart are not the same machine state.
const PEAK_TOLERANCE: f64 = 0.10;

/// Every difference between A's and B's runs that can move a time by itself: one line
/// each, naming the setting and both values.
pub fn warnings(a: &[Profile], b: &[Profile], normalized: bool) -> Vec<String> {
    if a.is_empty() || b.is_empty() {
        return Vec::new();
    }
    let mut out = setting_warnings(a, b);
    out.extend(contention_warning(a, b));
    let threads_differ = a.iter().chain(b).any(|p| p.run.threads != a[0].run.threads);
    out.extend(peak_warnings(a, b, threads_differ, normalized));
    out
}

/// A run setting: its name and its value in a profile.
type Setting = (&'static str, fn(&Profile) -> String);

/// The run settings that differ between the sides (or within one).
fn setting_warnings(a: &[Profile], b: &[Profile]) -> Vec<String> {
    let settings: [Setting; 8] = [
        ("threads", |p| p.run.threads.to_string()),
        ("CPU", |p| p.run.cpu_model.clone()),
        ("device", |p| format!("{} {}", p.device, p.run.device_name)),
        ("batch", |p| p.run.batch.to_string()),
        ("image size", |p| p.run.image_size.clone()),
        ("dtype", |p| p.run.dtype.clone()),
        ("passes", |p| p.run.passes.join(", ")),
        ("wick version", |p| p.run.wick_version.clone()),
    ];
    let mut out = Vec::new();
    for (name, get) in settings {
        let values = |side: &[Profile]| {
            let mut v: Vec<String> = side.iter().map(get).collect();
            v.dedup();
            v.join(" / ")
        };
        let (va, vb) = (values(a), values(b));
        if va != vb || va.contains(" / ") {
            out.push(format!("{name} differs: A {va}, B {vb}"));
        }
    }
    out
}

/// The largest share of runnable time each side's threads waited for a core, when both
/// sides measured it.
fn contention_shares(a: &[Profile], b: &[Profile]) -> Option<(f64, f64)> {
    let waiting = |side: &[Profile]| {
        side.iter()
            .filter_map(|p| p.cpu_contention.map(|c| c.waiting_share()))
            .fold(None, |m: Option<f64>, w| Some(m.map_or(w, |m| m.max(w))))
    };
    Some((waiting(a)?, waiting(b)?))
}

/// Which side shared its cores with another load, if one did.
fn contended_side(a: &[Profile], b: &[Profile]) -> Option<&'static str> {
    let (wa, wb) = contention_shares(a, b)?;
    match (wa >= CONTENDED_SHARE, wb >= CONTENDED_SHARE) {
        (true, true) => Some("both runs shared their cores with another load"),
        (true, false) => Some("A shared its cores with another load"),
        (false, true) => Some("B shared its cores with another load"),
        (false, false) => None,
    }
}

/// CPU contention in either side, measured during the timed iterations (the peaks come
/// after them).
fn contention_warning(a: &[Profile], b: &[Profile]) -> Option<String> {
    let who = contended_side(a, b)?;
    let (wa, wb) = contention_shares(a, b)?;
    Some(format!(
        "CPU contention: the threads waited for a core {:.1}% (A) and {:.1}% (B) of their runnable time during the timed iterations: {who}, and its times are inflated by it; rerun on a quiet machine",
        100.0 * wa,
        100.0 * wb
    ))
}

/// Why the machine rather than the code may have moved the times: a side shared its
/// cores, or, with the same threads on every run and the times not `normalized` by the
/// peaks, a measured peak moved beyond its spread. `None` when neither happened (or
/// nothing was measured to tell).
pub fn machine_moved(a: &[Profile], b: &[Profile], normalized: bool) -> Option<String> {
    if let Some(who) = contended_side(a, b) {
        return Some(who.to_string());
    }
    let threads = a.first()?.run.threads;
    if normalized || a.iter().chain(b).any(|p| p.run.threads != threads) {
        return None;
    }
    PEAKS.iter().find_map(|peak| {
        let (ra, rb) = peaks_apart(a, b, peak)?;
        Some(format!(
            "the machine's {} moved from {:.1}-{:.1} to {:.1}-{:.1} {} between the sides",
            peak.name,
            ra[0] / 1e9,
            ra[1] / 1e9,
            rb[0] / 1e9,
            rb[1] / 1e9,
            peak.unit
        ))
    })
}

/// One machine peak: its name, unit, and how a profile's peaks give it and its range.
struct Peak {
    name: &'static str,
    unit: &'static str,
    value: fn(&MachinePeaks) -> f64,
    range: fn(&MachinePeaks) -> Option<[f64; 2]>,
}

const PEAKS: [Peak; 2] = [
    Peak {
        name: "GEMM peak",
        unit: "GFLOP/s",
        value: |m| m.flops_per_sec,
        range: |m| m.flops_range,
    },
    Peak {
        name: "copy bandwidth",
        unit: "GB/s",
        value: |m| m.bytes_per_sec,
        range: |m| m.bytes_range,
    },
];

/// The machine peaks that moved between the sides beyond their own spread, with their
/// cause; or that a side has none.
fn peak_warnings(
    a: &[Profile],
    b: &[Profile],
    threads_differ: bool,
    normalized: bool,
) -> Vec<String> {
    let mut out = Vec::new();
    for peak in &PEAKS {
        let measured = |side| peak_range(side, peak.value, peak.range).is_some();
        if !(measured(a) && measured(b)) {
            let lacking = match (lacks_peaks(a), lacks_peaks(b)) {
                (true, true) => "A and B carry",
                (true, false) => "A carries",
                _ => "B carries",
            };
            let why = match a.iter().chain(b).any(Profile::is_from_torch) {
                true => "an imported PyTorch trace has none",
                false => "profiles without them, such as older ones",
            };
            out.push(format!(
                "{lacking} no measured machine peaks ({why}): a loaded machine cannot be told from a slower build; profile with --json to measure them"
            ));
            break;
        }
        if let Some((ra, rb)) = peaks_apart(a, b, peak) {
            out.push(peak_line(peak, ra, rb, threads_differ, normalized));
        }
    }
    out
}

/// A peak's ranges on each side, when they lie apart beyond their own spread (or, without
/// measured spreads, beyond [`PEAK_TOLERANCE`]).
fn peaks_apart(a: &[Profile], b: &[Profile], peak: &Peak) -> Option<([f64; 2], [f64; 2])> {
    let ra = peak_range(a, peak.value, peak.range)?;
    let rb = peak_range(b, peak.value, peak.range)?;
    let had_ranges = a
        .iter()
        .chain(b)
        .all(|p| p.machine.as_ref().and_then(peak.range).is_some());
    let apart = if had_ranges {
        ra[1] < rb[0] || rb[1] < ra[0]
    } else {
        (rb[1] / ra[1] - 1.0).abs() > PEAK_TOLERANCE
    };
    apart.then_some((ra, rb))
}

/// The line for a peak that moved from `ra` (A's range) to `rb`.
fn peak_line(
    peak: &Peak,
    ra: [f64; 2],
    rb: [f64; 2],
    threads_differ: bool,
    normalized: bool,
) -> String {
    let cause = if threads_differ {
        // The probe runs on the run's own threads.
        "measured on each run's threads, so it follows the threads setting, not the machine's state"
            .to_string()
    } else {
        format!(
            "the machine itself was {} during B",
            if rb[1] < ra[1] { "slower" } else { "faster" }
        )
    };
    let advice = if threads_differ {
        "compare runs with the same --threads"
    } else if normalized {
        "the times are normalised by these peaks, which were measured after each run: rerun both on a quiet machine to be sure"
    } else {
        "try --normalize-by-peak, or rerun both on a quiet machine"
    };
    let (unit, scale) = (peak.unit, 1e9);
    format!(
        "{} differs beyond its own spread: A {:.1}-{:.1} {unit}, B {:.1}-{:.1} {unit} (B/A x{:.2}): {cause}; {advice}",
        peak.name,
        ra[0] / scale,
        ra[1] / scale,
        rb[0] / scale,
        rb[1] / scale,
        rb[1] / ra[1],
    )
}

/// The factor that puts a run's times on the reference machine's scale: its peak over
/// the reference's (a run on a machine at half its GEMM peak has its compute-bound times
/// halved).
pub(crate) struct PeakScale {
    gemm: f64,
    copy: f64,
}

impl PeakScale {
    /// `run`'s peaks against `reference`'s; `None` when either lacks them.
    pub(crate) fn new(run: &Profile, reference: &Profile) -> Option<Self> {
        let (m, r) = (run.machine.as_ref()?, reference.machine.as_ref()?);
        Some(PeakScale {
            gemm: m.flops_per_sec / r.flops_per_sec,
            copy: m.bytes_per_sec / r.bytes_per_sec,
        })
    }

    /// The factor for an op type of this bound, or for a mixed row whose op time is
    /// `compute_share` compute-bound.
    pub(crate) fn factor(&self, bound: Option<Bound>, compute_share: f64) -> f64 {
        match bound {
            Some(Bound::Compute) => self.gemm,
            Some(Bound::Memory) => self.copy,
            None => compute_share * self.gemm + (1.0 - compute_share) * self.copy,
        }
    }
}

/// Scales each run's series onto `reference`'s machine (see
/// `DiffOptions::normalize_by_peak`). Errs with the side (`"A"` or `"B"`) whose profile
/// lacks the machine peaks.
pub(crate) fn normalize(
    runs: &[Profile],
    series: &mut [RowSeries],
    reference: &Profile,
    side: &'static str,
) -> Result<(), &'static str> {
    let bounds: std::collections::BTreeMap<String, crate::profile::roofline::Bound> =
        match &reference.machine {
            Some(m) => reference
                .roofline(m)
                .into_iter()
                .map(|r| (r.name, r.bound))
                .collect(),
            None => return Err("A"),
        };
    let op_time: f64 = reference.ops.iter().map(|o| o.mean_sec).sum();
    let compute: f64 = reference
        .ops
        .iter()
        .filter(|o| bounds.get(&o.type_name()) == Some(&crate::profile::roofline::Bound::Compute))
        .map(|o| o.mean_sec)
        .sum();
    // Without per-op rows, a mixed row counts as compute-bound.
    let compute_share = if op_time > 0.0 {
        compute / op_time
    } else {
        1.0
    };
    for (run, rows) in runs.iter().zip(series) {
        let scale = PeakScale::new(run, reference).ok_or(side)?;
        for (kind, rows) in rows.iter_mut() {
            for (name, values) in rows.iter_mut() {
                let bound = (*kind == "op type")
                    .then(|| bounds.get(name).copied())
                    .flatten();
                let f = scale.factor(bound, compute_share);
                values.iter_mut().for_each(|v| *v *= f);
            }
        }
    }
    Ok(())
}

/// Per-iteration totals by name, for one kind of row.
pub(crate) type Series = std::collections::BTreeMap<String, Vec<f64>>;

/// A run's samples per row, for each kind of row (iteration, phase, op type, layer).
pub(crate) type RowSeries = [(&'static str, Series); 4];

/// A row only one side has (an op type wick or PyTorch runs and the other does not).
#[derive(Debug, Clone, serde::Serialize)]
pub struct OneSidedRow {
    /// `op type` or `layer`.
    pub kind: &'static str,
    /// Its name.
    pub name: String,
    /// `A` or `B`.
    pub side: &'static str,
    /// Mean seconds per iteration on that side (its first run).
    pub sec: f64,
}

/// The op types and layers of each side's first run that the other side's first run
/// lacks, longest first.
pub(crate) fn one_sided(sa: &[RowSeries], sb: &[RowSeries]) -> Vec<OneSidedRow> {
    let (Some(a), Some(b)) = (sa.first(), sb.first()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for k in 2..4 {
        for (side, mine, theirs) in [("A", &a[k].1, &b[k].1), ("B", &b[k].1, &a[k].1)] {
            for (name, values) in mine.iter().filter(|(n, _)| !theirs.contains_key(*n)) {
                out.push(OneSidedRow {
                    kind: a[k].0,
                    name: name.clone(),
                    side,
                    sec: values.iter().sum::<f64>() / values.len().max(1) as f64,
                });
            }
        }
    }
    out.sort_by(|x, y| y.sec.total_cmp(&x.sec));
    out
}
