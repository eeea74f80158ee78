//! Issue #13: `wick-prof diff` on runs of a simulated clock: one op type deliberately
//! slowed is flagged by name; two runs of the same graph with noise are not; profiles of
//! different graphs are refused unless allowed.

/// The small residual net the graph tests train, shared with them.
#[path = "../../graph/tests/common/mod.rs"]
mod common;

use candle_core::{DType, Device, Tensor};
use common::*;
use wick_graph::{Executor, GraphBuilder, Mode};
use wick_ops::SgdParams;
use wick_profiler::{diff, DiffOptions, Mark, Outcome, SlotLayout};
use wick_profiler::{Profile, TimeProfiler, Timer};

/// A clock that advances at each mark: an op lasts its base time (1 ms per 100 FLOPs of
/// its position, any fixed pattern) times uniform noise of +-`noise`, times `slow` when its
/// kernel is `slowed`; other marks cost 1 µs.
struct SimTimer {
    kernels: Vec<&'static str>,
    layout: SlotLayout,
    now: f64,
    rng: u64,
    noise: f64,
    slowed: &'static str,
    slow: f64,
    /// Every op's time times this: a machine-wide drift between processes.
    drift: f64,
    recorded: Vec<f64>,
}

impl Timer for SimTimer {
    fn method(&self) -> &'static str {
        "simulated clock"
    }
    fn prepare(&mut self, slots: usize) -> wick_graph::Result<()> {
        self.recorded = vec![0.0; slots];
        Ok(())
    }
    fn mark(&mut self, slot: usize) {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let u = (self.rng >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
        self.now += match self.layout.mark(slot) {
            Some(Mark::OpEnd(op)) => {
                let base = 1e-3 * (1 + op % 7) as f64;
                let slow = if self.kernels[op] == self.slowed {
                    self.slow
                } else {
                    1.0
                };
                base * (1.0 + self.noise * u) * slow * self.drift
            }
            _ => 1e-6,
        };
        self.recorded[slot] = self.now;
    }
    fn read(&mut self, out: &mut [f64]) -> wick_graph::Result<()> {
        out.copy_from_slice(&self.recorded);
        Ok(())
    }
}

/// A profile of 12 iterations (2 skipped) of the small net at `batch`.
fn run(batch: usize, seed: u64, slowed: &'static str, slow: f64) -> Profile {
    run_drifting(batch, seed, slowed, slow, 1.0)
}

fn run_drifting(batch: usize, seed: u64, slowed: &'static str, slow: f64, drift: f64) -> Profile {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let net = small_net(&mut b, DType::F32, batch, 6, 3).unwrap();
    let grads = b.backward(net.loss).unwrap();
    b.sgd(&grads, SgdParams::default()).unwrap();
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    init(&mut exec, DType::F32, 1);
    let images = Tensor::zeros((batch, 3, 6, 6), DType::F32, &Device::Cpu).unwrap();
    exec.set("images", &images).unwrap();
    let labels: Vec<u32> = (0..batch as u32).map(|i| i % 3).collect();
    exec.set(
        "labels",
        &Tensor::new(labels.as_slice(), &Device::Cpu).unwrap(),
    )
    .unwrap();
    let timer = SimTimer {
        kernels: exec.node_infos().iter().map(|n| n.name).collect(),
        layout: SlotLayout::new(exec.node_infos().len()),
        now: 0.0,
        rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        noise: 0.05,
        slowed,
        slow,
        drift,
        recorded: vec![],
    };
    exec.add_hook(TimeProfiler::new(2, 2).with_timer(Box::new(timer)))
        .unwrap();
    for _ in 0..12 {
        exec.run().unwrap();
    }
    let mut p = exec.hook::<TimeProfiler>().unwrap().profile();
    // The times are simulated; the run-queue wait the profiler measured is real (other
    // tests running at once) and is set by the tests that need it.
    p.cpu_contention = None;
    p.run.batch = batch;
    p.run.model = "small net".into();
    // Through the JSON, as wick-prof reads them.
    Profile::from_json(&p.to_json()).unwrap()
}

#[test]
fn a_slowed_op_type_is_flagged_by_name_and_noise_is_not() {
    let a = run(2, 1, "", 1.0);
    let slowed = run(2, 2, "ReLU", 1.3);
    let d = diff(&a, &slowed, &DiffOptions::default()).unwrap();
    assert!(d.same_graph);
    let flagged_types: Vec<&str> = d
        .rows
        .iter()
        .filter(|r| r.flagged && r.kind == "op type")
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(flagged_types, ["ReLU"], "{}", d.text());
    let relu = d
        .rows
        .iter()
        .find(|r| r.kind == "op type" && r.name == "ReLU")
        .unwrap();
    assert!(
        relu.is_regression() && relu.low > 1.2 && relu.high < 1.4,
        "{relu:?}"
    );
    assert!(d.text().contains("SLOWER: op type ReLU"), "{}", d.text());
    // The ReLU layers are flagged too; the conv layers are not.
    assert!(d
        .rows
        .iter()
        .any(|r| r.kind == "layer" && r.name == "stem.relu" && r.flagged));
    assert!(d
        .rows
        .iter()
        .any(|r| r.kind == "layer" && r.name == "stem" && !r.flagged));

    // Same graph, different noise: nothing flagged, over several pairs.
    for seed in 10..16 {
        let b = run(2, seed, "", 1.0);
        let d = diff(&a, &b, &DiffOptions::default()).unwrap();
        assert_eq!(d.regressions().count(), 0, "seed {seed}: {}", d.text());
        assert!(
            d.rows.iter().all(|r| !r.flagged),
            "seed {seed}: {}",
            d.text()
        );
    }
}

#[test]
fn profiles_of_different_graphs_are_refused_unless_allowed() {
    let a = run(2, 1, "", 1.0);
    let b = run(4, 1, "", 1.0);
    let e = diff(&a, &b, &DiffOptions::default())
        .unwrap_err()
        .to_string();
    assert_mentions(&e, &["different graphs", "--allow-different-graphs"]);
    assert!(e.contains("; B: "), "{e}");
    // A further run of side A that differs is named as that run, not as B.
    let e = wick_profiler::diff_runs(
        &[a.clone(), b.clone()],
        std::slice::from_ref(&a),
        &DiffOptions::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("A's run 2 (--base-run)"), "{e}");
    let opts = DiffOptions {
        allow_different_graphs: true,
        ..Default::default()
    };
    let d = diff(&a, &b, &opts).unwrap();
    assert!(!d.same_graph);
    assert!(d
        .rows
        .iter()
        .any(|r| r.kind == "layer" && r.name == "block.conv1"));
}

#[test]
fn per_image_compares_batch_sizes_of_one_model() {
    // The simulated ops take as long at batch 4 as at batch 2: per image, twice as fast.
    let opts = DiffOptions {
        per_image: true,
        ..Default::default()
    };
    let a = run(2, 1, "", 1.0);
    // Twice the images in twice the time: the same per image, nothing flagged.
    let same = run_drifting(4, 2, "", 1.0, 2.0);
    let d = diff(&a, &same, &opts).unwrap();
    assert!(!d.same_graph && d.per_image == Some((2, 4)), "{}", d.text());
    assert!(d.rows.iter().all(|r| !r.flagged), "{}", d.text());
    assert!(d
        .text()
        .contains("per image: every time divided by its run's batch (A 2, B 4 images)"));
    // 2.6 times the time for twice the images: 1.3x slower per image.
    let slower = run_drifting(4, 3, "", 1.0, 2.6);
    let d = diff(&a, &slower, &opts).unwrap();
    let it = d.rows.iter().find(|r| r.kind == "iteration").unwrap();
    assert!(it.flagged && (it.ratio - 1.3).abs() < 0.05, "{}", d.text());
    assert_eq!(d.outcome(), Outcome::Regression);
    // Without --per-image the same pair reads as 2.6x slower: the flag is what makes it per image.
    let plain = DiffOptions {
        allow_different_graphs: true,
        ..Default::default()
    };
    let it = diff(&a, &slower, &plain)
        .unwrap()
        .rows
        .into_iter()
        .find(|r| r.kind == "iteration")
        .unwrap();
    assert!((it.ratio - 2.6).abs() < 0.1, "{it:?}");
    // A profile without its batch, and another model, are refused by name.
    let mut unknown = same.clone();
    unknown.run.batch = 0;
    let e = diff(&a, &unknown, &opts).unwrap_err().to_string();
    assert_mentions(&e, &["--per-image", "side B"]);
    let mut other = same.clone();
    other.run.model = "resnet18".into();
    let e = diff(&a, &other, &opts).unwrap_err().to_string();
    assert_mentions(&e, &["small net", "resnet18"]);
}

/// One process running 20% slow throughout (drift, not a code change) is flagged by a
/// one-run diff; with two interleaved runs per side the bootstrap resamples runs too and
/// leaves it unflagged, while the slowed op type is still found.
#[test]
fn several_runs_per_side_absorb_drift_between_processes() {
    use wick_profiler::diff_runs;
    let a = [run(2, 1, "", 1.0), run(2, 2, "", 1.0)];
    let drifting = run_drifting(2, 4, "", 1.0, 1.2);
    let one = diff(&a[0], &drifting, &DiffOptions::default()).unwrap();
    assert!(
        one.regressions().any(|r| r.kind == "iteration"),
        "{}",
        one.text()
    );
    let b = [run(2, 3, "", 1.0), drifting];
    let two = diff_runs(&a, &b, &DiffOptions::default()).unwrap();
    assert_eq!(two.runs, (2, 2));
    assert_eq!(two.regressions().count(), 0, "{}", two.text());
    let slowed = [run(2, 5, "ReLU", 1.5), run(2, 6, "ReLU", 1.5)];
    let found = diff_runs(&a, &slowed, &DiffOptions::default()).unwrap();
    let names: Vec<&str> = found
        .regressions()
        .filter(|r| r.kind == "op type")
        .map(|r| r.name.as_str())
        .collect();
    assert_eq!(names, ["ReLU"], "{}", found.text());
}

/// Issue #29: a whole-machine slowdown (every op 1.7x, as a loaded machine gives) is
/// flagged as SLOWER on the raw times, with a warning that the machines' measured peaks
/// differ beyond their spread; normalised by the peaks it is no change. A threads
/// difference is named. "No significant change" states what it could have detected.
#[test]
fn a_slower_machine_is_named_and_normalised_away_and_settings_differences_warned() {
    use wick_profiler::MachinePeaks;
    let with_machine = |mut p: Profile, gemm: f64, copy: f64| {
        p.machine = Some(MachinePeaks {
            flops_range: Some([0.97 * gemm, gemm]),
            bytes_range: Some([0.97 * copy, copy]),
            ..MachinePeaks::new(gemm, copy)
        });
        p.run.threads = 2;
        p
    };
    let a = with_machine(run(2, 1, "", 1.0), 52e9, 40e9);
    let loaded = with_machine(run_drifting(2, 2, "", 1.0, 1.7), 52e9 / 1.7, 40e9 / 1.7);
    let raw = diff(&a, &loaded, &DiffOptions::default()).unwrap();
    let text = raw.text();
    // Every op 1.7x slower, and so were the machine's peaks: inconclusive, not SLOWER.
    assert!(raw.regressions().any(|r| r.kind == "iteration"), "{text}");
    assert_eq!(raw.outcome(), Outcome::Inconclusive, "{text}");
    assert_mentions(
        &text,
        &[
            "Verdict: inconclusive (",
            "the machine's GEMM peak moved from 50.4-52.0 to 29.7-30.6 GFLOP/s",
        ],
    );
    assert!(
        text.contains("slower, inconclusive: iteration x")
            && !text.contains("SLOWER")
            && !text.contains("iteration iteration"),
        "{text}"
    );
    assert_mentions(
        &text,
        &[
            "warning: GEMM peak differs beyond its own spread",
            "the machine itself was slower",
        ],
    );
    let opts = DiffOptions {
        normalize_by_peak: true,
        ..Default::default()
    };
    let normalised = diff(&a, &loaded, &opts).unwrap();
    assert_eq!(normalised.regressions().count(), 0, "{}", normalised.text());
    assert_eq!(normalised.outcome(), Outcome::NoRegression);
    let it = &normalised.rows[0];
    assert!((it.ratio - 1.0).abs() < 0.05, "{it:?}");
    assert!(normalised
        .text()
        .contains("normalised by each run's machine peaks"));
    // Without peaks, normalising is refused, naming the side.
    let bare = run(2, 3, "", 1.0);
    let e = diff(&a, &bare, &opts).unwrap_err().to_string();
    assert_mentions(&e, &["machine peaks", "side B"]);

    // Same machine, other threads: named in a warning; nothing flagged, and the verdict
    // says how large a change it could have seen.
    let mut b = with_machine(run(2, 4, "", 1.0), 52e9, 40e9);
    b.run.threads = 1;
    let d = diff(&a, &b, &DiffOptions::default()).unwrap();
    let text = d.text();
    assert!(
        text.contains("warning: threads differs: A 2, B 1"),
        "{text}"
    );
    assert!(!text.contains("GEMM peak differs"), "{text}");
    let it = &d.rows[0];
    assert!(
        it.detectable_slower > 1.0 && it.detectable_faster < 1.0,
        "{it:?}"
    );
    assert!(
        text.contains(&format!(
            "Verdict: no significant change at 95%; with this noise it could only have detected an iteration change beyond x{:.3}",
            it.detectable_slower
        )),
        "{text}"
    );
    assert!(text.contains("but the runs differ in 1 way(s)"), "{text}");
    // With other threads the probe's peak moves too: the threads, not the machine.
    let mut one_thread = with_machine(run(2, 5, "", 1.0), 26e9, 40e9);
    one_thread.run.threads = 1;
    let text = diff(&a, &one_thread, &DiffOptions::default())
        .unwrap()
        .text();
    assert!(
        text.contains("it follows the threads setting, not the machine's state")
            && !text.contains("the machine itself was"),
        "{text}"
    );
    // A real slowdown from 2 threads to 1 (x1.63) stays a regression: the threads are no
    // machine state, and normalising by each run's peak on its own threads, which would
    // undo it, is refused.
    let mut slower = with_machine(run_drifting(2, 6, "", 1.0, 1.63), 26e9, 21e9);
    slower.run.threads = 1;
    let d = diff(&a, &slower, &DiffOptions::default()).unwrap();
    assert_eq!(d.outcome(), Outcome::Regression, "{}", d.text());
    assert!(d.text().contains("Verdict: SLOWER"), "{}", d.text());
    let e = diff(&a, &slower, &opts).unwrap_err().to_string();
    assert_mentions(
        &e,
        &["--normalize-by-peak needs the same threads", "A 2, B 1"],
    );
}

/// Issue #29: the run-queue wait measured during the timed iterations names the run that
/// shared its cores, and a diff of profiles without machine peaks says it cannot tell a
/// loaded machine from a slower build.
#[test]
fn a_run_that_shared_its_cores_is_named_and_missing_peaks_are_said() {
    use wick_profiler::CpuContention;
    let contended = |mut p: Profile, waited_sec: f64| {
        p.cpu_contention = Some(CpuContention {
            ran_sec: 1.0,
            waited_sec,
        });
        p
    };
    let a = contended(run(2, 1, "", 1.0), 0.01);
    let quiet = contended(run(2, 2, "", 1.0), 0.02);
    let text = diff(&a, &quiet, &DiffOptions::default()).unwrap().text();
    assert!(!text.contains("CPU contention"), "{text}");
    assert!(
        text.contains("warning: A and B carry no measured machine peaks"),
        "{text}"
    );
    let loaded = contended(run_drifting(2, 3, "", 1.0, 1.7), 2.0);
    let text = diff(&a, &loaded, &DiffOptions::default()).unwrap().text();
    assert_mentions(
        &text,
        &[
            "CPU contention: the threads waited for a core 1.0% (A) and 66.7% (B)",
            "B shared its cores with another load",
        ],
    );
    // The same build, B 1.7x slower while sharing its cores: inconclusive, exit 3 in
    // wick-prof, and never "SLOWER"; the same slowdown on a quiet machine is a regression.
    let d = diff(&a, &loaded, &DiffOptions::default()).unwrap();
    assert_eq!(d.outcome(), Outcome::Inconclusive, "{text}");
    assert!(
        text.contains("Verdict: inconclusive (")
            && text.contains("but B shared its cores with another load, so the machine")
            && !text.contains("SLOWER"),
        "{text}"
    );
    let quiet_but_slower = contended(run_drifting(2, 3, "", 1.0, 1.7), 0.02);
    let d = diff(&a, &quiet_but_slower, &DiffOptions::default()).unwrap();
    assert_eq!(d.outcome(), Outcome::Regression, "{}", d.text());
}
