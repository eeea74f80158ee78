//! `examples/custom_cnn.rs` as a user runs it: a user-defined CNN with a custom op (Mish)
//! and AdamW trains (the loss falls) and its profile times the custom op by name.

mod common;

use common::assert_mentions;

#[test]
fn the_custom_cnn_example_trains_and_profiles_its_custom_op() {
    let dir = common::scratch("wick-custom-cnn-");
    let args = ["--steps", "16", "--batch-size", "8"];
    let stdout = common::run_ok(dir.path(), "custom_cnn", &args);
    let losses: Vec<f64> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("step "))
        .map(|l| {
            l.split("loss ")
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(losses.len() >= 3, "{stdout}");
    assert!(
        losses.last().unwrap() < &(losses[0] * 0.9),
        "the loss falls: {losses:?}"
    );
    assert!(stdout.contains("6 Mish nodes timed"), "{stdout}");
    assert_mentions(&stdout, &[". MishForward : ", ". MishBackward : "]);
    assert_mentions(&stdout, &[". AdamUpdate : ", ". ClipGradNorm : "]);
}
