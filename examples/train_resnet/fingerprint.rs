//! Every flag's value, as the command line set it (defaults included), recorded in each
//! checkpoint and compared on resume: derived from the argument parser's own definitions,
//! so a flag added later is checked without anyone listing it. Only the flags named in
//! [`NOT_TRAJECTORY`], each with its reason, are left out.

use clap::CommandFactory;

use crate::args::Args;

/// Flags that do not change what a run computes, and why: where outputs go, how the run
/// is shown and timed, how fast it runs, the run's length, and resume's own flags.
pub const NOT_TRAJECTORY: &[(&str, &str)] = &[
    ("steps", "the run's length: a resume may extend it"),
    ("epochs", "the run's length: a resume may extend it"),
    ("log", "an output"),
    ("save", "an output"),
    ("checkpoint_dir", "where checkpoints go"),
    ("checkpoint_every", "when checkpoints are written"),
    ("keep", "how many checkpoints are kept"),
    ("resume", "resume's own flag"),
    ("resume_override", "resume's own flag"),
    (
        "weights",
        "refused with --resume: the checkpoint sets the weights",
    ),
    (
        "detect_anomaly",
        "a check that stops on a NaN; the values are unchanged",
    ),
    (
        "loader_threads",
        "the batches are the same whatever the count (tested)",
    ),
    (
        "threads",
        "the kernels' threads: speed, not the update rule",
    ),
    ("device", "where the run computes: a resume may move it"),
    ("verbosity", "the profiler"),
    ("skip", "the profiler"),
    ("schedule", "the profiler"),
    ("trace", "the profiler's output"),
    ("json", "the profiler's output"),
    ("folded", "the profiler's output"),
    ("by_shape", "the profiler's tables"),
    ("report", "the profiler's output"),
    ("replace_read_only", "how outputs are written"),
];

/// (`--flag`, value) for every argument of `command` not in [`NOT_TRAJECTORY`], as
/// `matches` holds it (defaults included; `-` for an unset option).
pub fn flags_of(command: &clap::Command, matches: &clap::ArgMatches) -> Vec<(String, String)> {
    command
        .get_arguments()
        .filter(|arg| {
            !NOT_TRAJECTORY
                .iter()
                .any(|(id, _)| *id == arg.get_id().as_str())
        })
        .map(|arg| {
            let id = arg.get_id().as_str();
            let value = matches
                .try_get_raw(id)
                .ok()
                .flatten()
                .map(|v| {
                    v.map(|s| s.to_string_lossy().into_owned())
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_else(|| "-".into());
            (format!("--{}", arg.get_long().unwrap_or(id)), value)
        })
        .collect()
}

/// The fingerprint of this process's command line.
pub fn of_this_run() -> Vec<(String, String)> {
    let command = Args::command();
    match command.clone().try_get_matches_from(std::env::args_os()) {
        Ok(matches) => flags_of(&command, &matches),
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fingerprint(command: &clap::Command, args: &[&str]) -> Vec<(String, String)> {
        let matches = command
            .clone()
            .try_get_matches_from(std::iter::once("train_resnet").chain(args.iter().copied()))
            .unwrap();
        flags_of(command, &matches)
    }

    #[test]
    fn every_exempt_flag_exists_and_every_other_flag_is_recorded() {
        let command = Args::command();
        let ids: Vec<&str> = command
            .get_arguments()
            .map(|a| a.get_id().as_str())
            .collect();
        for (id, reason) in NOT_TRAJECTORY {
            assert!(
                ids.contains(id),
                "{id} ({reason}) is no flag of train_resnet"
            );
        }
        let recorded = fingerprint(&command, &[]);
        assert_eq!(recorded.len() + NOT_TRAJECTORY.len(), ids.len());
        for flag in [
            "--lr",
            "--optimizer",
            "--seed",
            "--augmentation",
            "--val-split",
            "--passes",
        ] {
            assert!(
                recorded.iter().any(|(f, _)| f == flag),
                "{flag} is not recorded"
            );
        }
        // A changed setting changes the fingerprint; an output does not.
        let base = fingerprint(&command, &["--lr", "0.1"]);
        assert_ne!(base, fingerprint(&command, &["--lr", "0.2"]));
        assert_eq!(
            base,
            fingerprint(&command, &["--lr", "0.1", "--save", "w.safetensors"])
        );
    }

    #[test]
    fn a_flag_added_later_is_recorded_without_being_listed() {
        let command = Args::command().arg(
            clap::Arg::new("new_setting")
                .long("new-setting")
                .default_value("1"),
        );
        let a = fingerprint(&command, &[]);
        let b = fingerprint(&command, &["--new-setting", "2"]);
        assert!(a.contains(&("--new-setting".into(), "1".into())), "{a:?}");
        assert_ne!(a, b);
    }
}
