//! Issue #31: resume checks the run. A checkpoint records the settings that define the
//! trajectory and a resume with other settings is refused, naming the setting, unless
//! `--resume-override`; the step comes from the checkpoint, not its folder's name;
//! resuming at the target only writes `--save`, past it nothing; the metrics log keeps
//! one line per epoch; wick replaces only checkpoints it wrote; one run at a time writes
//! a folder.

mod common;

use std::path::Path;

use common::{run, spawn};

const SMALL: [&str; 6] = [
    "--stem",
    "cifar",
    "--image-size",
    "8",
    "--steps-per-epoch",
    "2",
];

/// A small run at batch 4 (unless `extra` gives another).
fn train(dir: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = SMALL.to_vec();
    if !extra.contains(&"--batch-size") {
        args.extend(["--batch-size", "4"]);
    }
    args.extend_from_slice(extra);
    run(dir, "train_resnet", &args, &[])
}

fn ok(out: &std::process::Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn refused(out: &std::process::Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}: {err}");
    }
}

#[test]
fn resume_refuses_a_changed_run_and_trusts_the_checkpoint_not_its_name() {
    let d = common::scratch("wick-resume-checks-");
    let p = d.path();
    let first = [
        "--steps",
        "6",
        "--checkpoint-dir",
        "ck",
        "--keep",
        "3",
        "--log",
        "m.jsonl",
        "--save",
        "final.safetensors",
    ];
    ok(&train(p, &first));
    let log = std::fs::read_to_string(p.join("m.jsonl")).unwrap();
    assert_eq!(log.lines().count(), 3, "{log}");
    let mut cases = 0;
    // Another batch size, learning rate, seed, clipping, decay or data: refused, naming
    // the setting (a zoo model's --dropout and --stochastic-depth are recorded too).
    for (changed, named) in [
        (&["--batch-size", "8"][..], "batch 4, this one 8"),
        (&["--lr", "0.5"], "lr 0.05, this one 0.5"),
        (&["--seed", "9"], "seed"),
        (
            &["--clip-grad-norm", "1"],
            "clip grad norm None, this one Some(1.0)",
        ),
        (&["--no-decay-1d"], "no decay 1d false, this one true"),
        (
            &["--synthetic-classes", "3"],
            "synthetic classes 10, this one 3",
        ),
        // A flag no one listed: recorded from the parser's definitions.
        (&["--passes", "none"], "flag --passes -, this one none"),
    ] {
        let resume = ["--steps", "8", "--resume", "ck"];
        let out = train(p, &[&resume[..], changed].concat());
        refused(&out, &[named, "--resume-override"]);
        cases += 1;
    }
    // A fresh run (another seed) into the folder would replace this run's checkpoints
    // one by one: refused, pointing at --resume.
    let out = train(
        p,
        &["--steps", "4", "--seed", "5", "--checkpoint-dir", "ck"],
    );
    refused(
        &out,
        &[
            "holds another run's checkpoints (step-2, step-4, step-6, best)",
            "--resume ck",
        ],
    );
    cases += 1;
    // --weights under --resume would be ignored: refused before any work.
    let out = train(
        p,
        &[
            "--steps",
            "8",
            "--resume",
            "ck",
            "--weights",
            "final.safetensors",
        ],
    );
    refused(
        &out,
        &["--weights and --resume both set the starting weights"],
    );
    cases += 1;
    // At the target: nothing to train, the log untouched, and --save writes the run's
    // final weights (a run killed after its last checkpoint still gets its file).
    let before = std::fs::read_to_string(p.join("m.jsonl")).unwrap();
    let at_end = ["--steps", "6", "--resume", "ck", "--log", "m.jsonl"];
    let out = ok(&train(
        p,
        &[&at_end[..], &["--save", "again.safetensors"]].concat(),
    ));
    assert!(
        out.contains("the run's end (6 steps): nothing to train; saved again.safetensors"),
        "{out}"
    );
    assert_eq!(std::fs::read_to_string(p.join("m.jsonl")).unwrap(), before);
    let weights = |f: &str| std::fs::read(p.join(f)).unwrap();
    assert_eq!(weights("again.safetensors"), weights("final.safetensors"));
    // Past it: the checkpoint is not this run's end, so nothing is written.
    let past = [
        "--steps",
        "4",
        "--resume",
        "ck",
        "--save",
        "past.safetensors",
    ];
    let out = ok(&train(p, &past));
    assert!(out.contains("nothing to train; nothing written"), "{out}");
    assert!(!p.join("past.safetensors").exists());
    cases += 1;
    // From an older checkpoint: the log redoes the later epochs instead of repeating them.
    std::fs::remove_dir_all(p.join("ck/step-6")).unwrap();
    std::fs::remove_dir_all(p.join("ck/step-4")).unwrap();
    ok(&train(
        p,
        &["--steps", "6", "--resume", "ck", "--log", "m.jsonl"],
    ));
    let log = std::fs::read_to_string(p.join("m.jsonl")).unwrap();
    let epochs: Vec<&str> = log.lines().map(|l| &l[..12]).collect();
    assert_eq!(
        epochs,
        ["{\"epoch\":1,\"", "{\"epoch\":2,\"", "{\"epoch\":3,\""],
        "{log}"
    );
    cases += 1;
    // A renamed step folder: the content's step wins.
    std::fs::rename(p.join("ck/step-6"), p.join("ck/step-9")).unwrap();
    let out = ok(&train(p, &["--steps", "8", "--resume", "ck"]));
    assert!(
        out.contains("holds step 6; its folder name says 9"),
        "{out}"
    );
    assert!(out.contains("at step 6"), "{out}");
    cases += 1;
    // --resume-override resumes a changed run anyway.
    ok(&train(
        p,
        &[
            "--steps",
            "10",
            "--resume",
            "ck",
            "--lr",
            "0.5",
            "--resume-override",
        ],
    ));
    cases += 1;
    println!("resume checks: {cases} cases");
}

#[test]
fn wick_replaces_only_its_own_checkpoints_and_one_run_writes_a_folder() {
    let d = common::scratch("wick-ckpt-owner-");
    let p = d.path();
    // A user's `best` folder, or a file named `best`, is refused before training.
    std::fs::create_dir_all(p.join("ck/best")).unwrap();
    std::fs::write(p.join("ck/best/notes.txt"), b"my notes").unwrap();
    let out = train(p, &["--steps", "2", "--checkpoint-dir", "ck"]);
    refused(
        &out,
        &[
            "ck/best",
            "not a checkpoint wick wrote",
            "a folder of yours",
        ],
    );
    assert_eq!(
        std::fs::read(p.join("ck/best/notes.txt")).unwrap(),
        b"my notes"
    );
    std::fs::create_dir(p.join("ck2")).unwrap();
    std::fs::write(p.join("ck2/best"), b"a file").unwrap();
    let out = train(p, &["--steps", "2", "--checkpoint-dir", "ck2"]);
    refused(&out, &["ck2/best", "a file"]);
    assert_eq!(std::fs::read(p.join("ck2/best")).unwrap(), b"a file");
    // Two runs on one folder: the second is refused while the first runs.
    let mut args = SMALL.to_vec();
    args.extend([
        "--batch-size",
        "4",
        "--steps",
        "100000",
        "--checkpoint-dir",
        "ck3",
    ]);
    let mut first = spawn(p, "train_resnet", &args);
    let started = std::time::Instant::now();
    while !p.join("ck3/.wick-lock").exists() {
        assert!(
            started.elapsed().as_secs() < 60,
            "the first run never took the lock"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = train(p, &["--steps", "2", "--checkpoint-dir", "ck3"]);
    refused(&out, &["another run (process", "ck3"]);
    first.kill().unwrap();
    first.wait().unwrap();
    // Its lock is left behind by the kill, and taken over: the process is gone.
    ok(&train(p, &["--steps", "2", "--checkpoint-dir", "ck3"]));
    assert!(!p.join("ck3/.wick-lock").exists(), "the lock is released");
    // A lock file naming a live process that does not hold the folder's flock (a pid
    // reused after a restart: here process 1) is taken over, with a note.
    std::fs::write(p.join("ck3/.wick-lock"), "1\n").unwrap();
    let out = train(
        p,
        &["--steps", "2", "--checkpoint-dir", "ck3", "--resume", "ck3"],
    );
    ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("locked by process 1, which is gone"), "{err}");
    println!("checkpoint ownership and locking: 5 cases");
}

/// Sets `field.<key>` in the metadata of a checkpoint's training state, leaving its
/// tensors as they are.
fn set_state_field(ckpt: &Path, key: &str, value: &str) {
    let path = ckpt.join("training.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    header["__metadata__"][format!("field.{key}")] = value.into();
    let mut text = serde_json::to_string(&header).unwrap();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(&bytes[8 + n..]);
    std::fs::write(&path, out).unwrap();
}

/// The `best` checkpoint's accuracy carries through a resume, also from a checkpoint
/// written at an epoch's end before that epoch's evaluation: a resumed run whose models
/// all score below `best` leaves `best` as it was.
#[test]
fn best_is_never_replaced_by_a_worse_model_after_a_resume() {
    let d = common::scratch("wick-resume-best-");
    let p = d.path();
    ok(&train(
        p,
        &["--steps", "4", "--checkpoint-dir", "ck", "--keep", "5"],
    ));
    let best = p.join("ck/best");
    // No model of this run reaches an accuracy of 2 (200%): `best` must stay.
    set_state_field(&best, "best_accuracy", "2");
    // Its training state (with the planted accuracy) tells a replaced `best` apart even
    // when the replacing model is bit-identical (the resumed run retrains the same steps).
    let state = || std::fs::read(best.join("training.safetensors")).unwrap();
    let before = state();
    // Back to the end of epoch 1 (a checkpoint folder given directly), whose checkpoint
    // was written before that epoch's evaluation.
    // No --checkpoint-dir: the run's folder is the checkpoint's parent.
    let mut resume = ["--steps", "4", "--keep", "5", "--resume", "ck/step-2"];
    let out = ok(&train(p, &resume));
    assert!(out.contains("resumed from ck/step-2 at step 2"), "{out}");
    assert!(p.join("ck/step-4/model.safetensors").is_file());
    assert!(!p.join("ck/step-2/step-4").exists());
    assert_eq!(
        state(),
        before,
        "a worse model replaced best after the resume"
    );
    // Without the carried accuracy the same resume does replace it (the test can fail).
    set_state_field(&best, "best_accuracy", "-inf");
    let before = state();
    // The folder of the run's checkpoints: its latest, step 2 again.
    std::fs::remove_dir_all(p.join("ck/step-4")).unwrap();
    resume[5] = "ck";
    ok(&train(p, &resume));
    assert_ne!(state(), before, "best was not replaced");
}
