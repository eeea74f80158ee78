//! Issue #31: one file, one writer. A command whose output is one of its inputs, or
//! another of its outputs, however the path is spelled (the same name, `./`, `..`, an
//! absolute path, a symlink, a hard link), is refused before any work with exit status 1
//! (2 for `wick-prof`), naming both flags, and every file is left as it was. A checkpoint
//! folder that cannot be one is refused up front too.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{assert_fails, run, wick_prof};

/// Every file in `dir` with its bytes.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

#[test]
fn an_output_that_is_another_file_of_the_command_is_refused_before_any_work() {
    let d = common::scratch("wick-one-writer-");
    let p = d.path();
    for name in [
        "B.safetensors",
        "W.safetensors",
        "P.json",
        "R2.json",
        "A.json",
        "C.json",
        "p.html",
    ] {
        std::fs::write(p.join(name), format!("the user's {name}")).unwrap();
    }
    std::fs::hard_link(p.join("W.safetensors"), p.join("W-hard.safetensors")).unwrap();
    std::os::unix::fs::symlink("B.safetensors", p.join("B-link.safetensors")).unwrap();
    std::fs::create_dir(p.join("D")).unwrap();
    std::fs::create_dir(p.join("sub")).unwrap();
    let abs_c = format!("--json c.json --trace {}", p.join("c.json").display());
    let small = "--stem cifar --image-size 8 --batch-size 4 --steps 1";
    // "example | its flags | the two flags the error names".
    let examples = [
        "profile_resnet | --json d.json --report d.json | --report --json",
        "train_resnet | --log e.bin --save e.bin | --log --save",
        "train_resnet | --verbosity 1 --json X --save X | --json --save",
        &format!("profile_resnet | {abs_c} | --trace --json"),
        "profile_resnet | --json c.json --trace sub/../c.json | --trace --json",
        "infer_resnet | --input B.safetensors --output B.safetensors | --output --input",
        "infer_resnet | --input B.safetensors --output ./B-link.safetensors | --output --input",
        "infer_resnet | --weights W.safetensors --output W-hard.safetensors | --output --weights",
        "train_resnet | --weights W.safetensors --save W-hard.safetensors | --save --weights",
        "train_resnet | --checkpoint-dir X --save X | --checkpoint-dir --save",
        "train_resnet | --data-dir D --checkpoint-dir D | --checkpoint-dir --data-dir",
        "train_resnet | --data B.safetensors --log B-link.safetensors | --log --data",
    ];
    let mut cases = 0;
    for case in examples {
        let [name, args, named]: [&str; 3] =
            case.split(" | ").collect::<Vec<_>>().try_into().unwrap();
        let (flag, other) = named.split_once(' ').unwrap();
        let before = snapshot(p);
        let started = Instant::now();
        let base = match name {
            "train_resnet" => small,
            "profile_resnet" => "--stem cifar --image-size 8 --iterations 1",
            _ => "--model resnet18 --image-size 8",
        };
        let all: Vec<&str> = base.split(' ').chain(args.split(' ')).collect();
        let out = run(p, name, &all, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name} {args:?}: {err}");
        assert!(
            err.contains(flag) && err.contains(other) && err.contains("name the same file"),
            "{name} {args:?}: {err}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{name} {args:?}: checked late"
        );
        assert_eq!(snapshot(p), before, "{name} {args:?} changed a file");
        cases += 1;
    }
    // An output inside the checkpoint folder, which wick writes and replaces as a whole.
    std::fs::create_dir_all(p.join("CK/best")).unwrap();
    for (args, inner) in [
        (
            "--checkpoint-dir CK --save CK/best/model.safetensors",
            "--save",
        ),
        ("--checkpoint-dir CK --log CK/.wick-lock", "--log"),
        (
            "--checkpoint-dir ./CK --log sub/../CK/best/m.jsonl",
            "--log",
        ),
    ] {
        let before = snapshot(p);
        let all: Vec<&str> = small.split(' ').chain(args.split(' ')).collect();
        let out = run(p, "train_resnet", &all, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!("{inner} is inside --checkpoint-dir")),
            "{args:?}: {err}"
        );
        assert_eq!(snapshot(p), before, "{args:?} changed a file");
        cases += 1;
    }
    // "wick-prof's arguments | the flag the error names first | the other".
    let prof = [
        "report P.json -o P.json | -o | PROFILE",
        "report p.html | the default output | PROFILE",
        "report B.safetensors --diff R2.json -o R2.json | -o | --diff",
        "diff A.json B.safetensors --json A.json | --json | A",
        "diff A.json P.json --base-run C.json --json sub/../C.json | --json | --base-run",
    ];
    for case in prof {
        let [args, flag, other]: [&str; 3] =
            case.split(" | ").collect::<Vec<_>>().try_into().unwrap();
        let args: Vec<&str> = args.split(' ').collect();
        let before = snapshot(p);
        let out = wick_prof(p, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(flag) && err.contains(&format!("and {other} (")),
            "{args:?}: {err}"
        );
        assert_eq!(snapshot(p), before, "wick-prof {args:?} changed a file");
        cases += 1;
    }
    println!("one file, one writer: {cases} cases, all refused before any work, nothing changed");
}

#[test]
fn a_checkpoint_folder_that_cannot_be_one_is_refused_before_training() {
    let d = common::scratch("wick-ckpt-dir-");
    let p = d.path();
    std::fs::write(p.join("f"), b"a file").unwrap();
    let small: Vec<&str> = "--stem cifar --image-size 8 --batch-size 4 --steps 1"
        .split(' ')
        .collect();
    let cases: [(&str, &str); 4] = [
        ("f", "not a folder"),
        ("/dev/full", "not a folder"),
        ("f/sub", "cannot be created"),
        ("missing/sub", "cannot be created"),
    ];
    for (dir, needle) in cases {
        let started = Instant::now();
        let mut args = small.clone();
        args.extend(["--checkpoint-dir", dir, "--save", "model.safetensors"]);
        let out = run(p, "train_resnet", &args, &[]);
        assert_fails(&out, 1, &["--checkpoint-dir", needle], dir);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{dir}: checked late"
        );
        assert!(!p.join("model.safetensors").exists());
    }
    println!(
        "checkpoint folders: {} cases, refused before training",
        cases.len()
    );
}
