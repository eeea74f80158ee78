//! Cases on datasets: ImageFolders with a bad file (in `val/`, which every run reads whole)
//! or layout, image files for
//! `infer_resnet --image`, ImageFolder flags, and text for `train_gpt`. The folders are
//! made by the suite's `prepare` (`img_*`, `latin1.txt`).

use super::*;

/// train_resnet on an ImageFolder: 12x12 crops, batch 2, one step.
#[rustfmt::skip]
const FOLDER: &[&str] = &["--image-size", "12", "--batch-size", "2", "--steps", "1", "--optimizer", "adamw"];
/// train_gpt's smallest run.
#[rustfmt::skip]
const GPT: &[&str] = &["--steps", "1", "--context", "8", "--batch-size", "2", "--steps-per-epoch", "1"];

fn with(base: &[&str], extra: &[&str]) -> Vec<String> {
    base.iter().chain(extra).map(|s| s.to_string()).collect()
}

fn refuse(program: &'static str, args: Vec<String>, needles: &[&str]) -> Case {
    Case {
        program,
        args,
        expect: Expect::Refused(needles.iter().map(|s| s.to_string()).collect()),
    }
}

/// The dataset cases.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    // Broken folders: each error names the file or folder and what is wrong.
    for (folder, needles) in [
        (
            "img_fifo",
            &["img_fifo/train/circle/zz.jpg", "not a regular file"][..],
        ),
        ("img_truncated", &["val/circle/0000.jpg", "truncated JPEG"]),
        ("img_text", &["val/circle/0000.jpg", "not a JPEG or PNG"]),
        ("img_empty_file", &["val/circle/0000.jpg", "empty file"]),
        (
            "img_empty_class",
            &["class `empty` has no JPEG or PNG images"],
        ),
        ("img_bmp", &["x.bmp", "wick decodes JPEG and PNG"]),
        (
            "img_classes_differ",
            &["train/ and val/ have different classes"],
        ),
        ("img_no_classes", &["has no class folders"]),
        ("img_loop", &["loops back"]),
        ("afile", &["not a folder"]),
        ("missing_folder", &["missing_folder"]),
    ] {
        v.push(refuse(
            "train_resnet",
            with(FOLDER, &["--data-dir", folder]),
            needles,
        ));
    }
    // The flags an ImageFolder adds, and those it constrains.
    let flat = with(FOLDER, &["--data-dir", "img_flat"]);
    let flat: Vec<&str> = flat.iter().map(String::as_str).collect();
    for (flag, value, needles) in [
        ("--val-split", "0", &["split"][..]),
        ("--val-split", "1", &["split"]),
        ("--val-split", "-0.5", &["split"]),
        ("--val-split", "nan", &["split"]),
        ("--val-split", "0.0001", &["split"]),
        ("--num-classes", "3", &["--num-classes 3", "has 2 classes"]),
        ("--augmentation", "flip", &["--augmentation flip"]),
        ("--batch-size", "100", &["fewer than one batch of 100"]),
    ] {
        let needles = needles.iter().map(|s| s.to_string()).collect();
        v.push(refused("train_resnet", &flat, flag, value, needles));
    }
    // Bad images on purpose: skipped and counted, the run goes on.
    v.push(Case {
        program: "train_resnet",
        args: with(
            FOLDER,
            &[
                "--data-dir",
                "img_truncated",
                "--skip-bad-images",
                "--save",
                "skipped.safetensors",
            ],
        ),
        expect: Expect::Works("skipped.safetensors"),
    });
    v.push(Case {
        program: "train_resnet",
        args: with(
            FOLDER,
            &["--data-dir", "img_flat", "--save", "flat.safetensors"],
        ),
        expect: Expect::Works("flat.safetensors"),
    });
    // infer_resnet --image on files that are not images.
    for source in [
        "missing.jpg",
        "adir",
        "empty.bin",
        "garbage.bin",
        "fifo",
        "good.safetensors",
    ] {
        let args = with(INFER, &["--image", source]);
        v.push(refuse("infer_resnet", args, &[source]));
    }
    v.push(refuse(
        "infer_resnet",
        with(
            INFER,
            &[
                "--image",
                "img_flat/circle/0000.jpg",
                "--input",
                "batch.safetensors",
            ],
        ),
        &["--image"],
    ));
    // Text: not UTF-8 for characters, a prompt outside the text's characters, too short.
    v.push(refuse(
        "train_gpt",
        with(GPT, &["--tokenizer", "chars", "--text", "latin1.txt"]),
        &["latin1.txt", "not UTF-8"],
    ));
    v.push(refuse(
        "train_gpt",
        with(
            GPT,
            &[
                "--tokenizer",
                "chars",
                "--text",
                "afile",
                "--prompt",
                "\u{20ac}uro",
            ],
        ),
        &["--prompt", "'\u{20ac}'"],
    ));
    v.push(refuse(
        "train_gpt",
        with(GPT, &["--text", "afile"]),
        &["afile", "shorter context"],
    ));
    v.push(refuse(
        "train_gpt",
        with(GPT, &["--tokenizer", "words"]),
        &["--tokenizer"],
    ));
    v.extend(custom_cnn());
    v.extend(paths());
    v
}

/// Folders that are links leading nowhere, and file names that name a folder: refused
/// before any work, naming the flag.
fn paths() -> Vec<Case> {
    let mut v = Vec::new();
    for flag in ["--checkpoint-dir", "--resume"] {
        for link in ["link_loop", "link_dangling"] {
            v.push(refused(
                "train_resnet",
                TRAIN,
                flag,
                link,
                vec![format!("{flag} {link}: is a symbolic link")],
            ));
        }
    }
    for (program, base, flag) in [
        ("train_resnet", TRAIN, "--save"),
        ("train_resnet", TRAIN, "--log"),
        ("profile_resnet", PROFILE, "--json"),
        ("infer_resnet", INFER, "--output"),
        ("profile_resnet", PROFILE, "--trace"),
    ] {
        v.push(refused(
            program,
            base,
            flag,
            "out.x/",
            vec![format!("{flag} out.x/: ends with '/'")],
        ));
    }
    v
}

/// `custom_cnn` held to the examples' standard: counts, sizes checked before any data is
/// made, a diverging run stopped, one-line errors.
fn custom_cnn() -> Vec<Case> {
    const BASE: &[&str] = &["--steps", "2", "--batch-size", "2", "--image-size", "8"];
    const LONGER: &[&str] = &["--steps", "6", "--batch-size", "2", "--image-size", "8"];
    let mut v = Vec::new();
    for flag in ["--steps", "--batch-size", "--image-size"] {
        for value in ["0", "-1", "abc", "1.5"] {
            v.push(refused("custom_cnn", BASE, flag, value, names_of(flag)));
        }
    }
    for (base, flag, value, needle) in [
        (BASE, "--batch-size", "10000000", "GiB"),
        (BASE, "--image-size", "100000", "GiB"),
        (LONGER, "--lr", "nan", "--lr"),
        (LONGER, "--lr", "-1", "--lr"),
        (LONGER, "--lr", "inf", "--lr"),
        (LONGER, "--lr", "1e30", "stopped"),
    ] {
        v.push(refused(
            "custom_cnn",
            base,
            flag,
            value,
            vec![needle.into()],
        ));
    }
    v
}
