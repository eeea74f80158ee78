//! Issue #40: the profiler shows a model's convolutions by kind, as a user runs
//! `profile_resnet`: mobilenet_v2's depthwise and 1x1 convolutions are rows of their own
//! while SINGA's lines keep the kernel's plain name; its folded stacks follow the module
//! paths and add up to the op time.

mod common;

use common::run_ok;

/// `profile_resnet`'s output, and the folded stacks it wrote (`--folded stacks.folded`).
fn profile(args: &[&str]) -> (String, String) {
    let d = tempfile::tempdir().unwrap();
    let args: Vec<&str> = args
        .iter()
        .copied()
        .chain(["--folded", "stacks.folded"])
        .collect();
    let stdout = run_ok(d.path(), "profile_resnet", &args);
    let folded = std::fs::read_to_string(d.path().join("stacks.folded")).unwrap();
    (stdout, folded)
}

/// The per-op-type table's rows: its first column, up to the blank line after it.
fn type_rows(out: &str) -> Vec<String> {
    out.lines()
        .skip_while(|l| !l.starts_with("Per-op-type summary"))
        .skip(2)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.split("  ").next().unwrap_or("").trim().to_string())
        .collect()
}

#[test]
fn mobilenet_v2s_depthwise_and_pointwise_convolutions_are_rows_of_their_own() {
    #[rustfmt::skip]
    let (out, folded) = profile(&["--model", "mobilenet_v2", "--num-classes", "10", "--batch-size", "4", "--image-size", "64", "--iterations", "2", "--skip", "1", "--verbosity", "2"]);
    let rows = type_rows(&out);
    for kind in ["depthwise", "1x1"] {
        for kernel in ["ConvForward", "ConvBackwardData", "ConvBackwardFilter"] {
            let row = format!("{kernel} ({kind})");
            assert!(rows.contains(&row), "no {row} row in {rows:?}");
        }
    }
    // The stem's 3x3 convolution is dense: the plain name.
    assert!(rows.contains(&"ConvForward".to_string()), "{rows:?}");
    // SINGA's per-op lines keep the kernel's name.
    assert!(out.contains(". ConvForward : ") && !out.contains(". ConvForward (depthwise) :"));
    // The folded stacks: module frames, then the kernel; they add up to the op time.
    let mut total_us = 0.0;
    for line in folded.lines() {
        let (stack, us) = line.rsplit_once(' ').expect("stack and count");
        total_us += us.parse::<f64>().expect("a count");
        assert!(!stack.contains(' '), "{line}");
    }
    // A frame's spaces become underscores: the format separates the count by a space.
    let depthwise = "features;features.3;features.3.conv;features.3.conv.1;features.3.conv.1.0;ConvForward_(depthwise) ";
    assert!(folded.contains(depthwise), "{folded}");
    let ops_ms: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix("Ops Time : "))
        .and_then(|l| l.split(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map(|sec| sec * 1e3)
        .expect("Ops Time line");
    let folded_ms = total_us / 1e3;
    assert!(
        (folded_ms - ops_ms).abs() < 0.01 * ops_ms,
        "{folded_ms} vs {ops_ms} ms"
    );
}
