//! Cases on flags: numbers that do not parse or are out of range, and names that mean
//! nothing.

use super::*;

/// train_resnet's count flags: each at least 1.
const TRAIN_COUNTS: &[&str] = &[
    "--steps",
    "--steps-per-epoch",
    "--batch-size",
    "--synthetic-classes",
    "--loader-threads",
    "--checkpoint-every",
    "--keep",
    "--threads",
    "--num-classes",
];

/// A program and the arguments every case of it starts with.
type Program = (&'static str, &'static [&'static str]);

/// The flag cases.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    // Counts (at least 1) and other integers.
    let counts: [(&'static str, &[&str], &[&str]); 4] = [
        ("train_resnet", TRAIN, TRAIN_COUNTS),
        (
            "infer_resnet",
            INFER,
            &[
                "--batch-size",
                "--threads",
                "--num-classes",
                "--reps",
                "--warmup",
            ],
        ),
        (
            "profile_resnet",
            PROFILE,
            &[
                "--batch-size",
                "--threads",
                "--num-classes",
                "--iterations",
                "--skip",
            ],
        ),
        (
            "ops_tour",
            OPS,
            &["--batch", "--channels", "--size", "--reps"],
        ),
    ];
    for (program, base, flags) in counts {
        for flag in flags {
            for value in NOT_A_COUNT {
                v.push(refused(program, base, flag, value, names_of(flag)));
            }
        }
    }
    // Zero where at least one is needed.
    for (program, base, flags) in [
        ("train_resnet", TRAIN, TRAIN_COUNTS),
        (
            "infer_resnet",
            INFER,
            &["--batch-size", "--threads", "--num-classes"][..],
        ),
        (
            "profile_resnet",
            PROFILE,
            &["--batch-size", "--threads", "--num-classes", "--iterations"][..],
        ),
        (
            "ops_tour",
            OPS,
            &["--batch", "--channels", "--size", "--reps"][..],
        ),
    ] {
        for flag in flags {
            v.push(refused(program, base, flag, "0", names_of(flag)));
        }
    }
    // Floating-point settings: not numbers, and values out of their range, each flag's
    // range written once for the programs that take it.
    const RATES: &[&str] = &["inf", "-1", "-inf"];
    const PROBABILITIES: &[&str] = &["inf", "-1", "1.5"];
    const POSITIVE: &[&str] = &["inf", "-1", "0"];
    let train = ("train_resnet", TRAIN);
    let infer = ("infer_resnet", INFER);
    let profile = ("profile_resnet", PROFILE);
    let floats: [(&str, &[&str], &[Program]); 7] = [
        ("--lr", RATES, &[train, profile]),
        ("--momentum", &["inf", "-1", "-0.5"], &[train]),
        ("--weight-decay", &["inf", "-1", "-1e-5"], &[train]),
        ("--dropout", PROBABILITIES, &[train, infer, profile]),
        (
            "--stochastic-depth",
            PROBABILITIES,
            &[train, infer, profile],
        ),
        // inf is PyTorch's "no clipping", and accepted as such.
        ("--clip-grad-norm", &["-inf", "-1", "0"], &[train]),
        ("--bucket-mb", POSITIVE, &[train]),
    ];
    for (flag, out_of_range, programs) in floats {
        for (program, base) in programs {
            for value in NOT_A_NUMBER.iter().chain(out_of_range) {
                v.push(refused(program, base, flag, value, names_of(flag)));
            }
        }
    }
    // Names and lists that mean nothing.
    let words: [(&'static str, &[&str], &[&str]); 3] = [
        (
            "train_resnet",
            TRAIN,
            &[
                "--model",
                "--stem",
                "--device",
                "--passes",
                "--optimizer",
                "--lr-schedule",
                "--augmentation",
                "--dist",
                "--schedule",
                "--verbosity",
                "--image-size",
            ],
        ),
        (
            "infer_resnet",
            INFER,
            &[
                "--model",
                "--stem",
                "--device",
                "--passes",
                "--image-size",
                "--verbosity",
            ],
        ),
        (
            "profile_resnet",
            PROFILE,
            &[
                "--model",
                "--stem",
                "--device",
                "--passes",
                "--schedule",
                "--image-size",
                "--verbosity",
            ],
        ),
    ];
    for (program, base, flags) in words {
        for flag in flags {
            for value in ["bogus", "cuda:x,", "?"] {
                v.push(refused(program, base, flag, value, names_of(flag)));
            }
        }
    }
    // A setting the chosen optimizer does not have: Adam has betas, not momentum.
    let adam = [TRAIN, &["--optimizer", "adam"]].concat();
    v.push(refused(
        "train_resnet",
        &adam,
        "--momentum",
        "0.5",
        vec!["--momentum is SGD's".into()],
    ));
    // A flag the model ignores, or a count beyond another: refused, not bent.
    let stem = || vec!["mobilenet_v2 has no stem choice".into()];
    v.push(refused(
        "train_resnet",
        TRAIN,
        "--model",
        "mobilenet_v2",
        stem(),
    ));
    v.push(refused(
        "profile_resnet",
        PROFILE,
        "--model",
        "mobilenet_v2",
        stem(),
    ));
    let five = [TRAIN, &["--num-classes", "5"]].concat();
    let at_most = vec!["--synthetic-classes 10: the model has 5 classes".into()];
    v.push(refused(
        "train_resnet",
        &five,
        "--synthetic-classes",
        "10",
        at_most,
    ));
    // --compare-passes writes no profile: an output flag beside it is refused, not dropped.
    let needle = || vec!["--compare-passes prints its comparison and writes no profile".into()];
    let compare = [PROFILE, &["--compare-passes"]].concat();
    v.push(refused(
        "profile_resnet",
        &compare,
        "--json",
        "p.json",
        needle(),
    ));
    v.push(refused(
        "profile_resnet",
        &compare,
        "--folded",
        "p.folded",
        needle(),
    ));
    let compare = [INFER, &["--compare-passes"]].concat();
    v.push(refused(
        "infer_resnet",
        &compare,
        "--report",
        "r.html",
        needle(),
    ));
    v
}
