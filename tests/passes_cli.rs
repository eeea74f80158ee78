//! Issue #14: `--passes` and `--compare-passes` on the examples, as a user runs them.

mod common;

use common::{run, run_ok};

/// `stdout_of` example `name` on ResNet-18 at 32x32 with `rest` of the flags.
fn resnet18_at_32(rest: &[&str], name: &str) -> String {
    let model = ["--model", "resnet18", "--image-size", "32"];
    let args: Vec<&str> = model.iter().chain(rest).copied().collect();
    stdout_of(&args, name)
}

fn stdout_of(args: &[&str], name: &str) -> String {
    let d = tempfile::tempdir().unwrap();
    run_ok(d.path(), name, args)
}

#[test]
fn infer_resnet_compares_the_graph_before_and_after_its_passes() {
    let out = stdout_of(
        &[
            "--model",
            "resnet18",
            "--image-size",
            "48x40",
            "--batch-size",
            "2",
            "--compare-passes",
            "--warmup",
            "1",
            "--reps",
            "3",
        ],
        "infer_resnet",
    );
    assert!(
        out.contains("--- Running IR pass [fold_batch_norm] --- detected 20 subgraphs"),
        "{out}"
    );
    assert!(
        out.contains("--- Running IR pass [conv_epilogue] --- detected 17 subgraphs"),
        "{out}"
    );
    let row = |kernel: &str| -> Vec<String> {
        out.lines()
            .find(|l| l.starts_with(&format!("{kernel} ")))
            .unwrap_or_else(|| panic!("no {kernel} row in {out}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    // Fused away: only before. Made by the passes: only after. Untouched: both, a ratio.
    // The three 1x1 downsampling convolutions are rows of their own.
    assert_eq!(row("BatchNormForwardInference")[1..3], ["20", "-"]);
    assert_eq!(row("ConvForward")[1..3], ["17", "-"]);
    assert_eq!(row("ConvForward (1x1)")[2..4], ["3", "-"]);
    assert_eq!(row("ConvBiasActivationForward")[1..3], ["-", "17"]);
    assert_eq!(row("ConvBiasActivationForward (1x1)")[2..4], ["-", "3"]);
    let pool = row("PoolingForward");
    assert_eq!(pool[1..3], ["1", "1"]);
    assert!(pool[5].parse::<f64>().unwrap() > 0.0, "{pool:?}");
    let step = out
        .lines()
        .find(|l| l.starts_with("Step (median iteration)"))
        .unwrap_or_else(|| panic!("no step line in {out}"));
    let ratio = step
        .split("ratio ")
        .nth(1)
        .and_then(|r| r.split(';').next());
    let ratio: f64 = ratio.unwrap().parse().unwrap();
    assert!(ratio > 0.0 && ratio.is_finite(), "{step}");
    assert!(step.contains("mean ratio interval ["), "{step}");
    // Rows both graphs have carry an interval and say whether a pass rewrote them.
    assert!(
        pool[6].starts_with('[') && pool[7].ends_with(']'),
        "{pool:?}"
    );
    let max_pool_values_rewrote_it = pool[8] == "rewritten";
    assert!(max_pool_values_rewrote_it, "{pool:?}");
    assert!(
        out.contains(
            "before = none; after = fold_batch_norm (20 subgraphs), conv_epilogue (17 subgraphs)"
        ),
        "{out}"
    );
}

#[test]
fn passes_are_chosen_by_name_and_unknown_names_are_refused() {
    let out = resnet18_at_32(&["--passes", "fold_batch_norm"], "infer_resnet");
    assert!(out.contains("[fold_batch_norm] --- detected 20"), "{out}");
    assert!(!out.contains("conv_epilogue"), "{out}");
    let none = resnet18_at_32(&["--passes", "none"], "infer_resnet");
    assert!(!none.contains("Running IR pass"), "{none}");
    // profile_resnet keeps SINGA's op list unless asked.
    let profile = resnet18_at_32(&["--iterations", "2", "--skip", "1"], "profile_resnet");
    assert!(
        !profile.contains("Running IR pass") && profile.contains("BatchNormForwardTraining"),
        "{profile}"
    );
    let d = tempfile::tempdir().unwrap();
    let bad = run(d.path(), "infer_resnet", &["--passes", "fold_bn"], &[]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success()
            && err.contains("unknown pass `fold_bn`")
            && err.contains(
                "fold_batch_norm, conv_epilogue, max_pool_values, batch_norm_relu, add_relu"
            ),
        "{err}"
    );
}
