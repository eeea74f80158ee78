//! Cases on files (outputs, inputs, wick-prof's profiles), the round-two cases of issue
//! #31, and valid runs.

use super::*;

/// The file cases and the valid runs.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    // Output paths: a folder, below a regular file, a read-only file, an input, the
    // same file twice, an empty name.
    let outputs: [(&'static str, &[&str], &[&str]); 3] = [
        (
            "train_resnet",
            TRAIN,
            &["--save", "--log", "--json", "--report", "--checkpoint-dir"],
        ),
        ("infer_resnet", INFER, &["--output", "--json", "--report"]),
        (
            "profile_resnet",
            PROFILE,
            &["--json", "--report", "--trace"],
        ),
    ];
    for (program, base, flags) in outputs {
        for flag in flags {
            for target in [
                "adir",
                "afile/x.out",
                "ro.json",
                "good.safetensors",
                "batch.safetensors",
            ] {
                if program == "profile_resnet" && target.ends_with(".safetensors") {
                    continue; // no input of profile_resnet: replacing the file is what was asked
                }
                let mut needles = names_of(flag);
                needles.push(target.to_string());
                let mut c = refused(program, base, flag, target, needles);
                // Inputs named so that an output on them would destroy them.
                c.args.extend(["--verbosity".into(), "2".into()]);
                if program == "train_resnet" {
                    c.args
                        .extend(["--weights".into(), "good.safetensors".into()]);
                    c.args.extend(["--data".into(), "batch.safetensors".into()]);
                } else if program == "infer_resnet" {
                    c.args
                        .extend(["--weights".into(), "good.safetensors".into()]);
                    c.args
                        .extend(["--input".into(), "batch.safetensors".into()]);
                }
                if flag == &"--checkpoint-dir" && target == "adir" {
                    continue; // a folder is what --checkpoint-dir takes
                }
                v.push(c);
            }
        }
    }
    for (program, base, a, b) in [
        ("train_resnet", TRAIN, "--json", "--report"),
        ("train_resnet", TRAIN, "--log", "--save"),
        ("train_resnet", TRAIN, "--json", "--save"),
        ("infer_resnet", INFER, "--output", "--json"),
        ("profile_resnet", PROFILE, "--json", "--report"),
        ("profile_resnet", PROFILE, "--json", "--trace"),
    ] {
        let mut c = refused(
            program,
            base,
            a,
            "o1.out",
            vec!["o1.out".into(), a.into(), b.into()],
        );
        c.args.push(format!("{b}=o1.out"));
        c.args.extend(["--verbosity".into(), "2".into()]);
        v.push(c);
    }
    // Input files: missing, a folder, empty, garbage, a FIFO, a profile for a model.
    let inputs: [(&'static str, &[&str], &[&str]); 2] = [
        ("train_resnet", TRAIN, &["--weights", "--data", "--resume"]),
        ("infer_resnet", INFER, &["--weights", "--input"]),
    ];
    for (program, base, flags) in inputs {
        for flag in flags {
            for source in [
                "missing.bin",
                "adir",
                "empty.bin",
                "garbage.bin",
                "fifo",
                "prof.json",
            ] {
                let mut needles = names_of(flag);
                needles.push(source.to_string());
                if flag == &"--resume" && source == "adir" {
                    continue; // an empty folder: see the resume tests
                }
                v.push(refused(program, base, flag, source, needles));
            }
        }
    }
    // wick-prof on files that are not profiles.
    for sub in [
        &["report"][..],
        &["diff", "prof.json"][..],
        &["predict"][..],
    ] {
        for source in [
            "missing.json",
            "adir",
            "empty.bin",
            "garbage.bin",
            "fifo",
            "good.safetensors",
        ] {
            let mut args: Vec<String> = sub.iter().map(|s| s.to_string()).collect();
            args.push(source.into());
            if sub[0] == "report" {
                args.extend(["-o".into(), format!("r-{source}.html")]);
            }
            v.push(Case {
                program: "wick-prof",
                args,
                expect: Expect::Refused(vec![source.into()]),
            });
        }
    }
    for (args, needle) in [
        (vec!["report", "prof.json", "-o", "prof.json"], "prof.json"),
        (vec!["report", "prof.json", "-o", "ro.json"], "ro.json"),
        (
            vec!["diff", "prof.json", "prof.json", "--json", "prof.json"],
            "prof.json",
        ),
        (
            vec!["diff", "prof.json", "prof.json", "--confidence", "0.99999"],
            "--confidence",
        ),
        (
            vec!["diff", "prof.json", "prof.json", "--min-share", "nan"],
            "--min-share",
        ),
        (vec!["predict", "prof.json", "--device", "tpu"], "tpu"),
        (
            vec!["predict", "prof.json", "--device", "garbage.bin"],
            "garbage.bin",
        ),
        (
            vec!["predict", "prof.json", "--json", "prof.json"],
            "prof.json",
        ),
    ] {
        v.push(Case {
            program: "wick-prof",
            args: args.into_iter().map(String::from).collect(),
            expect: Expect::Refused(vec![needle.into()]),
        });
    }
    // The round-two cases of issue #31 that are not one of the classes above.
    for (program, args, needle) in [
        (
            "train_resnet",
            vec![
                "--lr",
                "1e3",
                "--steps",
                "2",
                "--save",
                "good.safetensors",
                "--replace-read-only",
            ],
            "diverged",
        ),
        ("train_resnet", vec!["--threads", "1000"], "--threads"),
        (
            "infer_resnet",
            vec!["--bench", "--warmup", "18446744073709551615"],
            "--warmup",
        ),
        ("ops_tour", vec!["--size", "4000000000"], "GiB"),
        ("ops_tour", vec!["--batch", "100000000"], "GiB"),
        (
            "train_resnet",
            vec!["--image-size", "20000", "--batch-size", "64"],
            "GiB",
        ),
        ("train_resnet", vec!["--checkpoint-dir", "afile"], "afile"),
        (
            "train_resnet",
            vec!["--checkpoint-dir", "ck", "--save", "ck"],
            "ck",
        ),
    ] {
        let mut c = Case {
            program,
            args: TRAIN.iter().map(|s| s.to_string()).collect(),
            expect: Expect::Refused(vec![needle.into()]),
        };
        if program != "train_resnet" {
            c.args = if program == "ops_tour" {
                vec![]
            } else {
                INFER.iter().map(|s| s.to_string()).collect()
            };
        }
        let flags: Vec<&str> = args
            .iter()
            .copied()
            .filter(|a| a.starts_with("--"))
            .collect();
        c.args = refused(
            program,
            &c.args.iter().map(String::as_str).collect::<Vec<_>>(),
            "--none",
            "",
            vec![],
        )
        .args
        .into_iter()
        .filter(|a| a != "--none=")
        .collect();
        // Drop base flags the case sets itself.
        let mut kept = Vec::new();
        let mut it = c.args.into_iter();
        while let Some(a) = it.next() {
            if flags.contains(&a.as_str()) {
                it.next();
            } else {
                kept.push(a);
            }
        }
        kept.extend(args.into_iter().map(String::from));
        c.args = kept;
        v.push(c);
    }
    // Valid runs: each must work and write its output.
    for (program, args, file) in [
        (
            "train_resnet",
            vec!["--save", "w1.safetensors"],
            "w1.safetensors",
        ),
        (
            "train_resnet",
            vec![
                "--weights",
                "good.safetensors",
                "--save",
                "w2.safetensors",
                "--verbosity",
                "1",
                "--skip",
                "0",
                "--json",
                "w2.json",
            ],
            "w2.json",
        ),
        (
            "infer_resnet",
            vec![
                "--weights",
                "good.safetensors",
                "--input",
                "batch.safetensors",
                "--output",
                "l.safetensors",
            ],
            "l.safetensors",
        ),
        (
            "infer_resnet",
            vec![
                "--bench",
                "--reps",
                "2",
                "--verbosity",
                "2",
                "--json",
                "b.json",
            ],
            "b.json",
        ),
        (
            "profile_resnet",
            vec!["--json", "p2.json", "--report", "p2.html"],
            "p2.html",
        ),
        ("ops_tour", vec![], ""),
        (
            "wick-prof",
            vec!["report", "prof.json", "-o", "r.html"],
            "r.html",
        ),
        ("wick-prof", vec!["diff", "prof.json", "prof.json"], ""),
        (
            "wick-prof",
            vec![
                "predict",
                "prof.json",
                "--device",
                "a100",
                "--json",
                "pr.json",
            ],
            "pr.json",
        ),
    ] {
        let base: &[&str] = match program {
            "train_resnet" => TRAIN,
            "infer_resnet" => INFER,
            "profile_resnet" => PROFILE,
            "ops_tour" => OPS,
            _ => &[],
        };
        let mut a: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        a.extend(args.into_iter().map(String::from));
        v.push(Case {
            program,
            args: a,
            expect: Expect::Works(file),
        });
    }
    v
}
