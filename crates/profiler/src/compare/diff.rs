//! Comparing two profiles, `wick-prof diff A.json B.json`: per phase, op type and layer,
//! the time ratio B/A with a bootstrap confidence interval computed from the
//! per-iteration samples. A change is flagged when the interval excludes 1 (significant)
//! and the ratio is at least `threshold` away from 1 (large enough to matter).
//!
//! The bootstrap: resample A's and B's per-iteration totals with replacement (each side
//! keeping its own size), take the ratio of the resampled means, repeat, and read the
//! interval off the percentiles. The resampling is seeded from the row's name, so a diff
//! is reproducible.

use serde::Serialize;

use crate::compare::comparable::{normalize, RowSeries, Series};
use crate::profile::data::Profile;
use wick_graph::ir::Phase;

/// The most bootstrap resamples drawn for one row: past it a diff would take minutes and
/// gigabytes, so a confidence that needs more is refused.
pub const MAX_RESAMPLES: usize = 200_000;

/// `s` with control characters (terminal escape sequences, newlines) escaped, for a name
/// printed to a terminal.
pub fn printable(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// How to compare.
#[derive(Debug, Clone, Copy)]
pub struct DiffOptions {
    /// The smallest relative change worth flagging (0.05: 5%).
    pub threshold: f64,
    /// Rows smaller than this share of A's iteration are shown but never flagged: a
    /// kernel of a few microseconds swings by tens of percent between runs.
    pub min_share: f64,
    /// The family-wise confidence level: the chance that an unchanged build has no row
    /// flagged (0.95).
    pub confidence: f64,
    /// Bootstrap resamples per row.
    pub resamples: usize,
    /// Compare profiles of different graphs, matching phases, op types and layers by name.
    pub allow_different_graphs: bool,
    /// Put every run's times on side A's first run's machine: each op type scaled by
    /// its run's peak over A's (the GEMM peak for compute-bound types, the copy's for
    /// memory-bound ones), the iteration, phases and layers by their mix. Needs the
    /// machine peaks in every profile.
    pub normalize_by_peak: bool,
    /// Compare seconds per image: each run's times divided by its batch, so runs of
    /// different batch sizes of the same model compare (their graphs differ only in
    /// shapes, and are matched by name).
    pub per_image: bool,
}

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions {
            threshold: 0.05,
            min_share: 0.02,
            confidence: 0.95,
            resamples: 2000,
            allow_different_graphs: false,
            normalize_by_peak: false,
            per_image: false,
        }
    }
}

/// One compared figure.
#[derive(Debug, Clone, Serialize)]
pub struct DiffRow {
    /// `iteration`, `phase`, `op type` or `layer`.
    pub kind: &'static str,
    /// Its name.
    pub name: String,
    /// Mean seconds per iteration in A and in B.
    pub a_sec: f64,
    /// See `a_sec`.
    pub b_sec: f64,
    /// B / A.
    pub ratio: f64,
    /// The bootstrap confidence interval of the ratio.
    pub low: f64,
    /// See `low`.
    pub high: f64,
    /// The interval excludes 1 and the ratio is at least the threshold away from it.
    pub flagged: bool,
    /// The smallest slowdown (B/A) this row could have flagged with this noise: a true
    /// ratio below it goes unseen.
    pub detectable_slower: f64,
    /// The smallest speed-up (B/A below 1) it could have flagged.
    pub detectable_faster: f64,
}

impl DiffRow {
    /// `iteration`, or the kind and the name (`op type ReLU`).
    pub fn label(&self) -> String {
        if self.kind == self.name {
            self.kind.to_string()
        } else {
            format!("{} {}", self.kind, printable(&self.name))
        }
    }

    /// A flagged slowdown.
    pub fn is_regression(&self) -> bool {
        self.flagged && self.ratio > 1.0
    }
}

/// The comparison of two profiles.
#[derive(Debug, Clone, Serialize)]
pub struct Diff {
    /// Whether the two profiles ran the same graph (equal graph hashes).
    pub same_graph: bool,
    /// Every compared figure: the iteration, phases, op types, layers.
    pub rows: Vec<DiffRow>,
    /// The options used.
    pub threshold: f64,
    /// See `threshold`.
    pub min_share: f64,
    /// Runs on each side (A, B).
    pub runs: (usize, usize),
    /// See `threshold`.
    pub confidence: f64,
    /// Differences between the runs' settings or machines that can move times by
    /// themselves (see [`comparable::warnings`](crate::compare::comparable::warnings)).
    pub warnings: Vec<String>,
    /// Whether times were normalised by the machine peaks.
    pub normalized: bool,
    /// With `per_image`: A's and B's batches, every time divided by its run's.
    pub per_image: Option<(usize, usize)>,
    /// Why the machine rather than the code may have moved the times (a side shared its
    /// cores, or a peak moved beyond its spread): a flagged change is then inconclusive.
    pub machine_moved: Option<String>,
    /// The op types and layers only one side has (with a PyTorch run: the ops either
    /// framework runs alone), which no row compares.
    pub one_sided: Vec<crate::compare::comparable::OneSidedRow>,
}

/// What a diff concludes, for a CI gate: `wick-prof diff` exits 0, 1 or 3 on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Nothing flagged slower.
    NoRegression,
    /// A flagged slowdown on a machine that stayed as it was.
    Regression,
    /// Changes flagged while the machine moved (contention, peaks): it cannot tell the
    /// machine from the code.
    Inconclusive,
}

/// Why two profiles cannot be compared.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    /// Different graph hashes without `allow_different_graphs`.
    #[error("the profiles ran different graphs (hash {a} vs {b}; A: {a_run}; {other}: {b_run}): pass --allow-different-graphs to compare phases, op types and layers by name")]
    DifferentGraphs {
        /// A's graph hash.
        a: String,
        /// The other run's graph hash.
        b: String,
        /// A's model and sizes.
        a_run: String,
        /// The other run's model and sizes.
        b_run: String,
        /// Which run differs from A: `B`, or a further run of a side (`A's run 2`).
        other: String,
    },
    /// A profile without timed iterations.
    #[error("profile {0} has no per-iteration samples (was any iteration timed?)")]
    NoSamples(&'static str),
    /// A confidence whose per-row level needs more resamples than the bound.
    #[error("--confidence {confidence} over {rows} rows needs {needed} bootstrap resamples per row, more than the {cap} wick draws at most: lower --confidence, or raise --min-share so that fewer rows can be flagged")]
    TooManyResamples {
        /// The family-wise confidence asked for.
        confidence: f64,
        /// Rows that may be flagged.
        rows: usize,
        /// Resamples the per-row level needs.
        needed: f64,
        /// [`MAX_RESAMPLES`].
        cap: usize,
    },
    /// Normalisation asked for across runs of different threads.
    #[error("--normalize-by-peak needs the same threads on every run (A {a}, B {b}): each run's peaks are measured on its own threads, so scaling by them would undo the threads' effect, a real change; compare runs of the same --threads, or drop --normalize-by-peak")]
    NormalizeAcrossThreads {
        /// A's threads.
        a: usize,
        /// The other threads.
        b: usize,
    },
    /// A per-image comparison of a profile that does not record its batch.
    #[error("--per-image divides each run's times by its batch, and a profile of side {0} records none (run.batch is 0)")]
    NoBatch(&'static str),
    /// A per-image comparison of different models.
    #[error("--per-image compares batch sizes of one model, and the runs are of {a} and {b}: pass --allow-different-graphs as well to compare them by name")]
    PerImageAcrossModels {
        /// A's model.
        a: String,
        /// The other model.
        b: String,
    },
    /// Normalisation asked for, and a profile lacks the machine peaks.
    #[error("--normalize-by-peak needs the machine peaks in every profile, and a profile of side {0} has none (profiles written at verbosity 2 have them)")]
    NoPeaks(&'static str),
}

/// A profile's rows; `torch_names`: op types in the granularity of an imported PyTorch
/// run ([`comparable_type`](crate::compare::torch_names::comparable_type)).
fn series(p: &Profile, torch_names: bool) -> RowSeries {
    let s = &p.samples;
    let mut iteration = Series::new();
    iteration.insert("iteration".into(), s.iterations.clone());
    let mut phases = Series::new();
    for ph in Phase::ALL {
        if p.phases.iter().any(|x| x.phase == ph) {
            phases.insert(
                ph.as_str().into(),
                s.phases.iter().map(|x| x[ph as usize]).collect(),
            );
        }
    }
    let mut types = Series::new();
    let mut layers = Series::new();
    if !s.ops.is_empty() && p.ops.len() == s.ops[0].len() {
        for (i, iter) in s.ops.iter().enumerate() {
            for (op, sec) in p.ops.iter().zip(iter) {
                let name = match torch_names {
                    true => crate::compare::torch_names::comparable_type(&op.type_name()),
                    false => op.type_name(),
                };
                let t = types.entry(name).or_insert_with(|| vec![0.0; s.ops.len()]);
                t[i] += sec;
                let layer = op
                    .origin
                    .layer
                    .clone()
                    .unwrap_or_else(|| crate::profile::layers::NO_LAYER.into());
                let l = layers
                    .entry(layer)
                    .or_insert_with(|| vec![0.0; s.ops.len()]);
                l[i] += sec;
            }
        }
    }
    [
        ("iteration", iteration),
        ("phase", phases),
        ("op type", types),
        ("layer", layers),
    ]
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// A deterministic xorshift generator seeded from `name`.
struct Rng(u64);

impl Rng {
    fn new(name: &str) -> Self {
        let seed = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        Rng(seed | 1)
    }
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// The mean of one bootstrap resample of a side: its runs drawn with replacement, then
/// each drawn run's iterations drawn with replacement (a two-level bootstrap, so the
/// spread between runs counts as well as the spread within one).
fn resampled_mean(runs: &[&Vec<f64>], rng: &mut Rng) -> f64 {
    let (mut sum, mut count) = (0.0, 0usize);
    for _ in 0..runs.len() {
        let run = runs[rng.below(runs.len())];
        for _ in 0..run.len() {
            sum += run[rng.below(run.len())];
        }
        count += run.len();
    }
    sum / count.max(1) as f64
}

/// The bootstrap interval of mean(B) / mean(A) at `confidence`.
fn interval(
    a: &[&Vec<f64>],
    b: &[&Vec<f64>],
    confidence: f64,
    resamples: usize,
    name: &str,
) -> (f64, f64) {
    let mut rng = Rng::new(name);
    let mut ratios: Vec<f64> = (0..resamples)
        .map(|_| {
            let ma = resampled_mean(a, &mut rng);
            resampled_mean(b, &mut rng) / ma
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    let tail = (1.0 - confidence) / 2.0;
    let at =
        |q: f64| ratios[((q * (ratios.len() - 1) as f64).round() as usize).min(ratios.len() - 1)];
    (at(tail), at(1.0 - tail))
}

/// Compares B against A (one run each). See [`diff_runs`].
pub fn diff(a: &Profile, b: &Profile, opts: &DiffOptions) -> Result<Diff, DiffError> {
    diff_runs(std::slice::from_ref(a), std::slice::from_ref(b), opts)
}

/// Compares B's runs against A's. Each side may hold several runs of the same graph (run
/// interleaved, A B A B): the bootstrap then resamples runs as well as iterations, so
/// the drift between processes (±20% seen on a shared 2-core VM) widens the intervals
/// instead of being flagged. The confidence is family-wise: each of the `m` rows that
/// may be flagged gets `1 - (1 - confidence) / m` (Bonferroni), so a whole diff of an
/// unchanged build stays unflagged with probability `confidence`.
pub fn diff_runs(a: &[Profile], b: &[Profile], opts: &DiffOptions) -> Result<Diff, DiffError> {
    let same_graph = check_comparable(a, b, opts)?;
    let (sa, sb) = side_series(a, b, opts)?;
    let a_iteration = mean(
        &a.iter()
            .flat_map(|p| p.samples.iterations.iter().copied())
            .collect::<Vec<_>>(),
    );
    let one_sided = crate::compare::comparable::one_sided(&sa, &sb);
    let candidates = candidates(&sa, &sb);
    let eligible = candidates
        .iter()
        .filter(|c| c.a_sec >= opts.min_share * a_iteration)
        .count()
        .max(1);
    let row_confidence = 1.0 - (1.0 - opts.confidence) / eligible as f64;
    // Enough resamples to read the tails at the per-row level (20 beyond each tail), and
    // never more than the bound: the work stays seconds for any confidence.
    let needed = (40.0 / (1.0 - row_confidence)).ceil();
    if needed.is_nan() || needed > MAX_RESAMPLES as f64 {
        return Err(DiffError::TooManyResamples {
            confidence: opts.confidence,
            rows: eligible,
            needed,
            cap: MAX_RESAMPLES,
        });
    }
    let resamples = opts.resamples.clamp(needed as usize, MAX_RESAMPLES);
    let rows = candidates
        .into_iter()
        .map(|c| {
            let ratio = c.b_sec / c.a_sec;
            let (low, high) = interval(
                &c.a,
                &c.b,
                row_confidence,
                resamples,
                &format!("{}/{}", c.kind, c.name),
            );
            let significant = low > 1.0 || high < 1.0;
            // The same spread around another true ratio r gives [r low/ratio, r high/ratio]:
            // flagged once that interval clears 1 and r clears the threshold.
            let detectable_slower = (ratio / low).max(1.0 + opts.threshold);
            let detectable_faster = (ratio / high).min(1.0 - opts.threshold);
            DiffRow {
                detectable_slower,
                detectable_faster,
                kind: c.kind,
                flagged: significant
                    && (ratio - 1.0).abs() >= opts.threshold
                    && c.a_sec >= opts.min_share * a_iteration,
                name: c.name,
                a_sec: c.a_sec,
                b_sec: c.b_sec,
                ratio,
                low,
                high,
            }
        })
        .collect();
    Ok(Diff {
        same_graph,
        rows,
        warnings: crate::compare::comparable::warnings(a, b, opts.normalize_by_peak),
        machine_moved: crate::compare::comparable::machine_moved(a, b, opts.normalize_by_peak),
        normalized: opts.normalize_by_peak,
        per_image: opts.per_image.then(|| (a[0].run.batch, b[0].run.batch)),
        threshold: opts.threshold,
        min_share: opts.min_share,
        confidence: opts.confidence,
        runs: (a.len(), b.len()),
        one_sided,
    })
}

/// Each run's samples per row, normalised by the machine peaks when asked: refused
/// without peaks, or across different threads (each run's peaks are measured on its own
/// threads, so scaling by them would cancel the threads' real effect).
fn side_series(
    a: &[Profile],
    b: &[Profile],
    opts: &DiffOptions,
) -> Result<(Vec<RowSeries>, Vec<RowSeries>), DiffError> {
    let torch = a.iter().chain(b).any(Profile::is_from_torch);
    let mut sa: Vec<_> = a.iter().map(|p| series(p, torch)).collect();
    let mut sb: Vec<_> = b.iter().map(|p| series(p, torch)).collect();
    if opts.normalize_by_peak {
        normalize(a, &mut sa, &a[0], "A").map_err(DiffError::NoPeaks)?;
        normalize(b, &mut sb, &a[0], "B").map_err(DiffError::NoPeaks)?;
        let threads = a[0].run.threads;
        if let Some(other) = a.iter().chain(b).find(|p| p.run.threads != threads) {
            return Err(DiffError::NormalizeAcrossThreads {
                a: threads,
                b: other.run.threads,
            });
        }
    }
    if opts.per_image {
        per_image(a, &mut sa, "A")?;
        per_image(b, &mut sb, "B")?;
    }
    Ok((sa, sb))
}

/// Divides every row of each run by its batch.
fn per_image(
    runs: &[Profile],
    series: &mut [RowSeries],
    side: &'static str,
) -> Result<(), DiffError> {
    for (p, s) in runs.iter().zip(series) {
        if p.run.batch == 0 {
            return Err(DiffError::NoBatch(side));
        }
        let n = p.run.batch as f64;
        for (_, rows) in s.iter_mut() {
            rows.values_mut().flatten().for_each(|v| *v /= n);
        }
    }
    Ok(())
}

/// Refuses sides without samples, and profiles of different graphs unless the options
/// allow them; returns whether every run has the same graph.
fn check_comparable(a: &[Profile], b: &[Profile], opts: &DiffOptions) -> Result<bool, DiffError> {
    let (Some(a0), Some(b0)) = (a.first(), b.first()) else {
        return Err(DiffError::NoSamples(if a.is_empty() { "A" } else { "B" }));
    };
    if a.iter().any(|p| p.samples.iterations.is_empty()) {
        return Err(DiffError::NoSamples("A"));
    }
    if b.iter().any(|p| p.samples.iterations.is_empty()) {
        return Err(DiffError::NoSamples("B"));
    }
    let same_graph = a.iter().chain(b).all(|p| p.graph_hash == a0.graph_hash);
    // Per image, graphs of one model that differ only in the batch are matched by name.
    if opts.per_image && !opts.allow_different_graphs {
        if let Some(other) = a.iter().chain(b).find(|p| p.run.model != a0.run.model) {
            return Err(DiffError::PerImageAcrossModels {
                a: a0.run.model.clone(),
                b: other.run.model.clone(),
            });
        }
    }
    // A PyTorch run never has wick's graph: it is always matched by name.
    let by_name = opts.allow_different_graphs || a.iter().chain(b).any(Profile::is_from_torch);
    if !same_graph && !by_name && !opts.per_image {
        let differs = |p: &&Profile| p.graph_hash != a0.graph_hash;
        let (other, label) = match a.iter().position(|p| differs(&p)) {
            Some(i) => (&a[i], format!("A's run {} (--base-run)", i + 1)),
            None => {
                let i = b.iter().position(|p| differs(&p)).unwrap_or(0);
                let label = if i == 0 {
                    "B".to_string()
                } else {
                    format!("B's run {} (--new-run)", i + 1)
                };
                (b.get(i).unwrap_or(b0), label)
            }
        };
        let run = |p: &Profile| {
            format!(
                "{}, batch {}, {}",
                p.run.model, p.run.batch, p.run.image_size
            )
        };
        return Err(DiffError::DifferentGraphs {
            a: a0.graph_hash.clone(),
            b: other.graph_hash.clone(),
            a_run: run(a0),
            b_run: run(other),
            other: label,
        });
    }
    Ok(same_graph)
}

/// A row present in every run of both sides, with its runs' samples.
struct Candidate<'s> {
    kind: &'static str,
    name: String,
    a: Vec<&'s Vec<f64>>,
    b: Vec<&'s Vec<f64>>,
    a_sec: f64,
    b_sec: f64,
}

/// Every row (iteration, phase, op type, layer) that every run of both sides has, with a
/// time on side A.
fn candidates<'s>(sa: &'s [RowSeries], sb: &'s [RowSeries]) -> Vec<Candidate<'s>> {
    let mut out = Vec::new();
    for k in 0..4 {
        let kind = sa[0][k].0;
        for name in sa[0][k].1.keys() {
            let side = |s: &'s [RowSeries]| -> Option<Vec<&'s Vec<f64>>> {
                s.iter()
                    .map(|s| s[k].1.get(name).filter(|v| !v.is_empty()))
                    .collect()
            };
            let (Some(ra), Some(rb)) = (side(sa), side(sb)) else {
                continue;
            };
            let flat = |r: &[&Vec<f64>]| {
                mean(&r.iter().flat_map(|v| v.iter().copied()).collect::<Vec<_>>())
            };
            let (a_sec, b_sec) = (flat(&ra), flat(&rb));
            if a_sec > 0.0 {
                out.push(Candidate {
                    kind,
                    name: name.clone(),
                    a: ra,
                    b: rb,
                    a_sec,
                    b_sec,
                });
            }
        }
    }
    out
}

impl Diff {
    /// The flagged slowdowns.
    pub fn regressions(&self) -> impl Iterator<Item = &DiffRow> {
        self.rows.iter().filter(|r| r.is_regression())
    }

    /// What the diff concludes for a gate: a flagged slowdown while the machine moved is
    /// inconclusive; speed-ups alone are no regression, whatever the machine did.
    pub fn outcome(&self) -> Outcome {
        match (&self.machine_moved, self.regressions().next()) {
            (Some(_), Some(_)) => Outcome::Inconclusive,
            (None, Some(_)) => Outcome::Regression,
            (_, None) => Outcome::NoRegression,
        }
    }

    /// Whether a flagged change, either way, came while the machine moved.
    pub fn changes_inconclusive(&self) -> bool {
        self.machine_moved.is_some() && self.rows.iter().any(|r| r.flagged)
    }
}
