//! `train_resnet --data-dir` on an ImageFolder of JPEGs and PNGs that
//! `make_image_folder` writes: the loss falls, a resumed run (with another loader thread
//! count) ends with the uninterrupted run's weights byte for byte, the checkpoint names
//! the classes, the profile names the slowest input stage, and a corrupt image stops the
//! run naming the file or, with --skip-bad-images, is skipped and counted.

mod common;

use std::path::Path;

use common::{assert_mentions, run, run_ok};

/// A 3-class folder of about 40x32 images: 16 training and 4 validation images a class.
fn make_folder(dir: &Path) {
    let args = "--out shapes --classes 3 --train-per-class 16 --val-per-class 4 --size 40x32";
    run_ok(dir, "make_image_folder", &words(args));
}

/// A fresh scratch folder (named from `prefix`) holding [`make_folder`]'s images.
fn scratch_folder(prefix: &str) -> tempfile::TempDir {
    let d = common::scratch(prefix);
    make_folder(d.path());
    d
}

/// A command line's arguments, split at white space.
fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// ResNet-18 on 24x24 crops, batch 8 (6 steps an epoch), AdamW, seed 3.
#[rustfmt::skip]
const RUN: [&str; 10] = ["--data-dir", "shapes", "--image-size", "24", "--batch-size", "8", "--seed", "3", "--optimizer", "adamw"];

/// `train_resnet` with [`RUN`]'s arguments and then `extra`'s, asserting that it succeeded.
fn train(dir: &Path, extra: &str) -> String {
    let args: Vec<&str> = RUN.iter().copied().chain(words(extra)).collect();
    run_ok(dir, "train_resnet", &args)
}

/// The training loss of each epoch in a metrics log.
fn epoch_losses(log: &str) -> Vec<f64> {
    log.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["train_loss"].as_f64().unwrap()
        })
        .collect()
}

#[test]
fn an_image_folder_trains_resumes_exactly_and_names_its_classes() {
    let d = scratch_folder("wick-folder-");
    let dir = d.path();
    let out = train(
        dir,
        "--epochs 6 --save reference.safetensors --log m.jsonl \
         --checkpoint-dir ck --checkpoint-every 12 --keep 10",
    );
    assert!(
        out.contains("RandomResizedCrop + RandomHorizontalFlip"),
        "{out}"
    );
    let losses = epoch_losses(&std::fs::read_to_string(dir.join("m.jsonl")).unwrap());
    assert_eq!(losses.len(), 6);
    // Six steps an epoch are noisy: the first two epochs against the last two.
    let (first, last) = (losses[0] + losses[1], losses[4] + losses[5]);
    assert!(last < 0.8 * first, "the loss should fall: {losses:?}");
    let classes = wick::models::checkpoint::read_class_names(&dir.join("reference.safetensors"))
        .unwrap()
        .unwrap();
    assert_eq!(classes, ["circle", "cross", "diamond"]);
    // infer_resnet names the classes of each file's top-5 (three here), from the checkpoint.
    let files: Vec<String> = ["circle", "cross", "diamond"]
        .iter()
        .map(|c| {
            let first = std::fs::read_dir(dir.join("shapes/val").join(c))
                .unwrap()
                .next()
                .unwrap();
            first.unwrap().path().display().to_string()
        })
        .collect();
    let mut args = vec![
        "--model",
        "resnet18",
        "--weights",
        "reference.safetensors",
        "--image-size",
        "24",
        "--image",
    ];
    args.extend(files.iter().map(String::as_str));
    let out = run_ok(dir, "infer_resnet", &args);
    for f in &files {
        let line = out
            .lines()
            .find(|l| l.starts_with(f.as_str()))
            .unwrap_or_else(|| panic!("{f}: {out}"));
        let shares: Vec<&str> = line.split(": ").nth(1).unwrap().split(", ").collect();
        assert_eq!(shares.len(), 3, "{line}");
        assert!(
            shares.iter().all(|s| ["circle ", "cross ", "diamond "]
                .iter()
                .any(|c| s.starts_with(c))),
            "{line}"
        );
    }

    // Resume from step 12 of the same run, on three loader threads.
    let reference = std::fs::read(dir.join("reference.safetensors")).unwrap();
    for later in ["step-24", "step-36", "best"] {
        let _ = std::fs::remove_dir_all(dir.join("ck").join(later));
    }
    train(
        dir,
        "--epochs 6 --save resumed.safetensors --resume ck --loader-threads 3 \
         --checkpoint-every 12 --keep 10",
    );
    let resumed = std::fs::read(dir.join("resumed.safetensors")).unwrap();
    assert!(
        resumed == reference,
        "the resumed run's weights differ from the uninterrupted run's"
    );
}

#[test]
fn the_profile_names_the_slowest_input_stage_per_loader_thread() {
    let d = scratch_folder("wick-folder-prof-");
    let dir = d.path();
    let out = train(
        dir,
        "--steps 10 --loader-threads 2 --verbosity 2 --json p.json --trace t.json",
    );
    assert!(out.contains("Slowest input stage : "), "{out}");
    assert!(out.contains("  loader 1 : "), "{out}");
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("p.json")).unwrap()).unwrap();
    let threads = p["input_pipeline"]["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 2, "{threads:?}");
    let images: u64 = threads.iter().map(|t| t["images"].as_u64().unwrap()).sum();
    let batches: u64 = threads.iter().map(|t| t["batches"].as_u64().unwrap()).sum();
    assert_eq!(images, 8 * batches, "every batch holds 8 images");
    assert!(threads
        .iter()
        .all(|t| t["decode_sec"].as_f64().unwrap() > 0.0));
    // The trace has a track per loader thread, with the four stages of each batch.
    let trace = std::fs::read_to_string(dir.join("t.json")).unwrap();
    let t: serde_json::Value = serde_json::from_str(&trace).unwrap();
    let events = t["traceEvents"].as_array().unwrap();
    let named = |n: &str| {
        events
            .iter()
            .filter(|e| e["name"] == n && e["cat"] == "input")
            .count()
    };
    assert_eq!(named("decode") as u64, batches);
    assert_eq!(named("batch") as u64, batches);
    assert!(trace.contains("\"loader 1\""));
}

#[test]
fn a_corrupt_image_is_named_or_skipped_and_counted() {
    let d = scratch_folder("wick-folder-bad-");
    let dir = d.path();
    let bad = dir.join("shapes/train/cross/0003.jpg");
    let bytes = std::fs::read(&bad).unwrap();
    std::fs::write(&bad, &bytes[..bytes.len() / 3]).unwrap();
    let args: Vec<&str> = RUN.iter().copied().chain(["--epochs", "1"]).collect();
    let out = run(dir, "train_resnet", &args, &[]);
    let err = common::assert_fails(
        &out,
        1,
        &["shapes/train/cross/0003.jpg", "truncated JPEG"],
        "corrupt",
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    let args: Vec<&str> = args
        .into_iter()
        .chain(["--skip-bad-images", "--verbosity", "1"])
        .collect();
    let out = run_ok(dir, "train_resnet", &args);
    assert!(out.contains("epoch 1/1"), "{out}");
    let stderr = String::from_utf8_lossy(&run(dir, "train_resnet", &args, &[]).stderr).into_owned();
    assert_mentions(&stderr, &["skipped an unreadable image", "0003.jpg"]);
}

/// A case: its name, how it breaks a fresh folder, what the error must say.
type Breakage<'a> = (&'a str, &'a dyn Fn(&Path), &'a [&'a str]);

#[test]
fn a_folder_that_is_not_an_image_folder_is_refused_clearly() {
    let d = scratch_folder("wick-folder-refused-");
    let dir = d.path();
    let cases: [Breakage; 3] = [
        (
            "empty class",
            &|d| std::fs::create_dir(d.join("shapes/train/empty")).unwrap(),
            &["class `empty` has no JPEG or PNG images"],
        ),
        (
            "bmp",
            &|d| std::fs::write(d.join("shapes/val/circle/x.bmp"), b"BM").unwrap(),
            &["x.bmp", "wick decodes JPEG and PNG"],
        ),
        (
            "classes differ",
            &|d| std::fs::rename(d.join("shapes/val/cross"), d.join("shapes/val/kross")).unwrap(),
            &["train/ and val/ have different classes"],
        ),
    ];
    for (case, break_it, needles) in cases {
        let fresh = dir.join(case.replace(' ', "_"));
        std::fs::create_dir(&fresh).unwrap();
        make_folder(&fresh);
        break_it(&fresh);
        let args: Vec<&str> = RUN.iter().copied().chain(["--steps", "1"]).collect();
        let out = run(&fresh, "train_resnet", &args, &[]);
        common::assert_fails(&out, 1, needles, case);
    }
    let args: Vec<&str> = RUN
        .iter()
        .copied()
        .chain(["--steps", "1", "--num-classes", "5"])
        .collect();
    let out = run(dir, "train_resnet", &args, &[]);
    common::assert_fails(
        &out,
        1,
        &["--num-classes 5", "has 3 classes"],
        "num classes",
    );
}
