//! The reliability suite's cases (`tests/reliability_suite.rs` runs them): flags in
//! `flags.rs`, files and valid runs in `files.rs`, datasets in `data.rs`, `--precision`
//! in `precision.rs`.

mod data;
mod files;
mod flags;
mod precision;

/// What a case must do.
pub enum Expect {
    /// Be refused with an error containing one of these.
    Refused(Vec<String>),
    /// Succeed and write this file (in the scratch folder).
    Works(&'static str),
}

/// One run of a command, and what it must do.
pub struct Case {
    /// An example's name, or `wick-prof`.
    pub program: &'static str,
    /// Its arguments.
    pub args: Vec<String>,
    /// What it must do.
    pub expect: Expect,
}

/// What an error about `flag` may say: the flag, its name with underscores, or its last
/// word (`--num-classes`: `num_classes`, `classes`).
pub fn names_of(flag: &str) -> Vec<String> {
    let bare = flag.trim_start_matches('-');
    let mut v = vec![flag.to_string(), bare.replace('-', "_")];
    if let Some(last) = bare.rsplit('-').next() {
        v.push(last.to_string());
    }
    v
}

pub fn refused(
    program: &'static str,
    base: &[&str],
    flag: &str,
    value: &str,
    needles: Vec<String>,
) -> Case {
    // The flag replaces its value in the base arguments, if there.
    let mut args: Vec<String> = Vec::new();
    let mut skip = false;
    for a in base {
        if skip {
            skip = false;
            continue;
        }
        if *a == flag {
            skip = true;
            continue;
        }
        args.push(a.to_string());
    }
    args.push(format!("{flag}={value}"));
    Case {
        program,
        args,
        expect: Expect::Refused(needles),
    }
}

/// The smallest run of each command: ResNet-18 with the CIFAR stem on 8x8 images.
#[rustfmt::skip]
pub const TRAIN: &[&str] = &["--stem", "cifar", "--image-size", "8", "--batch-size", "4", "--steps", "1"];
#[rustfmt::skip]
pub const INFER: &[&str] = &["--model", "resnet18", "--stem", "cifar", "--image-size", "8", "--batch-size", "2"];
#[rustfmt::skip]
pub const PROFILE: &[&str] = &["--model", "resnet18", "--stem", "cifar", "--image-size", "8", "--batch-size", "2", "--iterations", "2", "--skip", "1"];
pub const OPS: &[&str] = &[
    "--batch",
    "1",
    "--channels",
    "2",
    "--size",
    "4",
    "--reps",
    "1",
];

/// Values no count accepts, and what no float setting accepts.
pub const NOT_A_COUNT: [&str; 8] = [
    "abc",
    "",
    "-1",
    "1.5",
    "1e3",
    "18446744073709551616",
    "nan",
    "0x10",
];
pub const NOT_A_NUMBER: [&str; 4] = ["abc", "", "nan", "1,5"];

/// Every case.
pub fn all() -> Vec<Case> {
    let mut v = flags::cases();
    v.extend(files::cases());
    v.extend(data::cases());
    v.extend(precision::cases());
    v
}
