//! Cases on `--precision`: names that are no precision (refused naming the flag, on every
//! command that takes it), the flag given twice, and bf16 and f16 autocast runs that must
//! work: training with a checkpoint (f32 on disk), a profile, a depthwise model, a GPT-2
//! (f16 with loss scaling).

use super::*;

/// train_gpt's smallest run.
#[rustfmt::skip]
const GPT: &[&str] = &["--steps", "1", "--context", "8", "--batch-size", "2", "--steps-per-epoch", "1"];

/// Values that name no precision: other dtypes wick does not autocast to, other
/// spellings, lists and padding.
const NOT_A_PRECISION: [&str; 12] = [
    "fp8", "", "BF16", "fp16", "half", "bfloat16", "tf32", "f64", "auto", "bf16,f32", " bf16",
    "fp32",
];

/// The precision cases.
pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    let programs: [(&'static str, &[&str]); 4] = [
        ("train_resnet", TRAIN),
        ("infer_resnet", INFER),
        ("profile_resnet", PROFILE),
        ("train_gpt", GPT),
    ];
    for (program, base) in programs {
        for value in NOT_A_PRECISION {
            v.push(refused(
                program,
                base,
                "--precision",
                value,
                names_of("--precision"),
            ));
        }
        let mut twice: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        twice.extend(["--precision", "bf16", "--precision", "f32"].map(String::from));
        v.push(Case {
            program,
            args: twice,
            expect: Expect::Refused(names_of("--precision")),
        });
    }
    for (precision, files) in [
        (
            "bf16",
            [
                "bf16.safetensors",
                "bf16.json",
                "mb.safetensors",
                "gpt.safetensors",
            ],
        ),
        (
            "f16",
            [
                "f16.safetensors",
                "f16.json",
                "mb16.safetensors",
                "gpt16.safetensors",
            ],
        ),
    ] {
        v.extend(runs_that_work(precision, files));
    }
    v
}

/// Runs in `precision` that must work, each writing its file of `files`: a training run
/// with a checkpoint, a profile, a depthwise model, a GPT-2.
fn runs_that_work(precision: &'static str, files: [&'static str; 4]) -> Vec<Case> {
    #[rustfmt::skip]
    const MOBILENET: &[&str] = &["--model", "mobilenet_v2", "--image-size", "32", "--batch-size", "2", "--steps", "1"];
    let runs: [(&str, &[&str], [&str; 2]); 4] = [
        ("train_resnet", TRAIN, ["--save", files[0]]),
        ("profile_resnet", PROFILE, ["--json", files[1]]),
        ("train_resnet", MOBILENET, ["--save", files[2]]),
        // Bytes of the suite's latin1.txt (any file is text to the bytes tokenizer).
        ("train_gpt", GPT, ["--save", files[3]]),
    ];
    let mut v = Vec::new();
    for ((program, base, out), file) in runs.into_iter().zip(files) {
        let text: &[&str] = if program == "train_gpt" {
            &["--text", "latin1.txt"]
        } else {
            &[]
        };
        let args = base
            .iter()
            .chain(text)
            .chain(&out)
            .chain(&["--precision", precision])
            .map(|s| s.to_string())
            .collect();
        v.push(Case {
            program,
            args,
            expect: Expect::Works(file),
        });
    }
    v
}
