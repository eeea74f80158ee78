//! Issue #40: `wick-prof diff`'s exit status separates the machine from the code. The
//! same build 1.7x slower while sharing its cores is inconclusive (exit 3, or 1 with
//! `--fail-on-inconclusive`); the same slowdown on a quiet machine is a regression
//! (exit 1); a speed-up against a loaded baseline is inconclusive but no regression
//! (exit 0).

mod common;

use common::{relu_softmax_profile, wick_prof};

/// Every number under `v` times `k`.
fn scale(v: &mut serde_json::Value, k: f64) {
    match v {
        serde_json::Value::Number(n) => *v = (n.as_f64().unwrap() * k).into(),
        serde_json::Value::Array(a) => a.iter_mut().for_each(|v| scale(v, k)),
        _ => {}
    }
}

/// `profile` with every sample the same (so only a real change is flagged), times `k`,
/// and its threads waiting `waited` of their running time for a core.
fn run(profile: &serde_json::Value, k: f64, waited: f64) -> serde_json::Value {
    let mut v = profile.clone();
    let samples = &mut v["samples"];
    for key in ["iterations", "phases", "ops"] {
        let first = samples[key][0].clone();
        let n = samples[key].as_array().unwrap().len();
        samples[key] = serde_json::Value::Array(vec![first; n]);
        // A little noise, the same on both sides, so the intervals have a width.
        for (i, s) in samples[key].as_array_mut().unwrap().iter_mut().enumerate() {
            scale(s, k * (1.0 + 0.01 * (i % 3) as f64));
        }
    }
    v["cpu_contention"] = serde_json::json!({ "ran_sec": 1.0, "waited_sec": waited });
    v
}

#[test]
fn a_loaded_run_is_inconclusive_and_a_quiet_slowdown_is_a_regression() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let profile = relu_softmax_profile(256, 9);
    let write = |name: &str, v: serde_json::Value| {
        std::fs::write(p.join(name), v.to_string()).unwrap();
    };
    write("a.json", run(&profile, 1.0, 0.01));
    write("loaded.json", run(&profile, 1.7, 2.0));
    write("slower.json", run(&profile, 1.7, 0.01));
    let cases: [(&[&str], i32, &str); 5] = [
        (&["a.json", "loaded.json"], 3, "Verdict: inconclusive"),
        // Faster than a loaded baseline: inconclusive too, but no slowdown to gate on.
        (&["loaded.json", "a.json"], 0, "no slowdown among them"),
        (
            &["a.json", "loaded.json", "--fail-on-inconclusive"],
            1,
            "Verdict: inconclusive",
        ),
        (&["a.json", "slower.json"], 1, "Verdict: SLOWER"),
        (&["a.json", "a.json"], 0, "Verdict: no significant change"),
    ];
    for (args, code, verdict) in cases {
        let all: Vec<&str> = ["diff"].into_iter().chain(args.iter().copied()).collect();
        let out = wick_prof(p, &all);
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {text}{err}");
        assert!(text.contains(verdict), "{args:?}: {text}");
        if code == 3 {
            assert!(!text.contains("SLOWER"), "{text}");
        }
    }
}

/// `wick-prof import-torch` reads a PyTorch trace (the profiler crate's fixture) as a
/// profile that `diff` compares by name, layers included; a file that is no trace is
/// refused with its name.
#[test]
fn import_torch_reads_a_trace_that_diff_compares_layer_by_layer() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path();
    let trace = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/crates/profiler/tests/fixtures/torch_tiny_trace.json"
    );
    let out = wick_prof(p, &["import-torch", trace, "-o", "torch.json"]);
    let text = common::succeeded(&out, "wick-prof import-torch");
    assert!(text.contains("24 ops of 17 types over 3 steps"), "{text}");
    let out = wick_prof(p, &["diff", "torch.json", "torch.json", "--layers"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("op type   ConvBackward "), "{text}");
    let layers: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("Layer "))
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for layer in ["0", "1", "2", "3", "4", "5"] {
        assert!(layers.contains(&layer), "{layer}: {text}");
    }
    std::fs::write(p.join("a.json"), relu_softmax_profile(256, 9).to_string()).unwrap();
    let out = wick_prof(p, &["import-torch", "a.json", "-o", "b.json"]);
    common::assert_fails(
        &out,
        2,
        &["a.json", "not a PyTorch profiler trace"],
        "a profile",
    );
    assert!(!p.join("b.json").exists());
}
