//! Every requested output is written, or the run is refused naming the flag: each
//! command's output flags against each of its modes, `--compare-passes` included. A run
//! that succeeds must have written the file (non-empty; a checkpoint folder with a
//! checkpoint in it); a run that fails must name the flag, and must have written nothing.

mod common;

use std::path::Path;

use common::run;

/// One command: its smallest run, its modes (extra flags) and its output flags, each
/// with the path it is given.
struct Command {
    program: &'static str,
    base: &'static [&'static str],
    modes: &'static [&'static [&'static str]],
    outputs: &'static [(&'static str, &'static str)],
}

/// The profile outputs every command takes.
const PROFILES: [(&str, &str); 4] = [
    ("--json", "out.json"),
    ("--report", "out.html"),
    ("--trace", "out.trace.json"),
    ("--folded", "out.folded"),
];

#[rustfmt::skip]
const COMMANDS: &[Command] = &[
    Command {
        program: "profile_resnet",
        base: &["--model", "resnet18", "--stem", "cifar", "--image-size", "8", "--batch-size", "2", "--iterations", "2", "--skip", "1"],
        modes: &[&[], &["--compare-passes"], &["--precision", "bf16"], &["--verbosity", "0"]],
        outputs: &PROFILES,
    },
    Command {
        program: "infer_resnet",
        base: &["--model", "resnet18", "--stem", "cifar", "--image-size", "8", "--batch-size", "2"],
        modes: &[&[], &["--bench", "--warmup", "1", "--reps", "2", "--verbosity", "2"], &["--compare-passes", "--warmup", "1", "--reps", "2"]],
        outputs: &[("--output", "out.safetensors"), PROFILES[0], PROFILES[1], PROFILES[2], PROFILES[3]],
    },
    Command {
        program: "train_resnet",
        base: &["--stem", "cifar", "--image-size", "8", "--batch-size", "4", "--steps", "2"],
        modes: &[&[], &["--precision", "bf16", "--verbosity", "1", "--skip", "1"], &["--verbosity", "2", "--skip", "1"]],
        outputs: &[("--save", "out.safetensors"), ("--log", "out.jsonl"), ("--checkpoint-dir", "ck"), PROFILES[0], PROFILES[1], PROFILES[2], PROFILES[3]],
    },
    Command {
        program: "train_gpt",
        base: &["--text", "text.txt", "--steps", "2", "--context", "8", "--batch-size", "2", "--steps-per-epoch", "1"],
        modes: &[&[], &["--generate", "4", "--verbosity", "2", "--skip", "1"], &["--precision", "bf16", "--verbosity", "1", "--skip", "1"]],
        outputs: &[("--save", "out.safetensors"), ("--checkpoint-dir", "ck"), PROFILES[0], PROFILES[1], PROFILES[2], PROFILES[3]],
    },
];

/// Whether `path` holds what an output flag writes: a non-empty file, or a folder with
/// something in it.
fn written(path: &Path) -> bool {
    if path.is_dir() {
        return std::fs::read_dir(path)
            .map(|mut d| d.next().is_some())
            .unwrap_or(false);
    }
    std::fs::metadata(path)
        .map(|m| m.len() > 0)
        .unwrap_or(false)
}

#[test]
fn every_output_flag_in_every_mode_is_written_or_refused_by_name() {
    let mut checked = 0;
    let mut refused = Vec::new();
    for c in COMMANDS {
        for mode in c.modes {
            for (flag, file) in c.outputs {
                let dir = tempfile::tempdir().unwrap();
                std::fs::write(
                    dir.path().join("text.txt"),
                    "a small text to learn. ".repeat(40),
                )
                .unwrap();
                let args: Vec<&str> = c
                    .base
                    .iter()
                    .chain(mode.iter())
                    .chain([flag, file])
                    .copied()
                    .collect();
                let out = run(dir.path(), c.program, &args, &[]);
                let stderr = String::from_utf8_lossy(&out.stderr);
                let path = dir.path().join(file);
                if out.status.success() {
                    assert!(
                        written(&path),
                        "{} {args:?} exited 0 but wrote no {file}: {stderr}",
                        c.program
                    );
                } else {
                    assert!(
                        stderr.contains(flag),
                        "{} {args:?} failed without naming {flag}: {stderr}",
                        c.program
                    );
                    assert!(
                        !path.exists(),
                        "{} {args:?} failed but left {file} behind",
                        c.program
                    );
                    refused.push(format!("{} {} {flag}", c.program, mode.join(" ")));
                }
                checked += 1;
            }
        }
    }
    eprintln!("{checked} combinations; refused by name: {refused:#?}");
    // --compare-passes writes no profile and no logits: each of its outputs is refused.
    let compare = refused
        .iter()
        .filter(|r| r.contains("--compare-passes"))
        .count();
    assert_eq!(
        compare,
        4 + 5,
        "profile_resnet's four profile outputs, infer_resnet's five"
    );
    // Not vacuous: every output flag of every command is written in some mode.
    for c in COMMANDS {
        for (flag, _) in c.outputs {
            let in_every_mode = c.modes.len();
            let refusals = refused
                .iter()
                .filter(|r| r.starts_with(c.program) && r.ends_with(&format!(" {flag}")))
                .count();
            assert!(
                refusals < in_every_mode,
                "{} never writes {flag}",
                c.program
            );
        }
    }
}
