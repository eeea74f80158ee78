//! Issue #40: the profiler shows a model's convolutions by kind, as a user runs
//! `profile_resnet`: mobilenet_v2's depthwise and 1x1 convolutions are rows of their own,
//! and ResNet-18's SINGA lines keep the kernel's plain name.

mod common;

use common::run;

fn profile(args: &[&str]) -> String {
    let d = tempfile::tempdir().unwrap();
    let out = run(d.path(), "profile_resnet", args, &[]);
    assert!(
        out.status.success(),
        "profile_resnet {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
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
    let out = profile(&["--model", "mobilenet_v2", "--num-classes", "10", "--batch-size", "4", "--image-size", "64", "--iterations", "2", "--skip", "1", "--verbosity", "2"]);
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
}
