//! Cases on `--precision`: names that are no precision (refused naming the flag, on every
//! command that takes it), the flag given twice, and bf16 autocast runs that must work:
//! training with a checkpoint (f32 on disk), a profile, a depthwise model, a GPT-2.

use super::*;

/// train_gpt's smallest run.
#[rustfmt::skip]
const GPT: &[&str] = &["--steps", "1", "--context", "8", "--batch-size", "2", "--steps-per-epoch", "1"];

/// Values that name no precision: other dtypes wick does not autocast to, other
/// spellings, lists and padding.
const NOT_A_PRECISION: [&str; 11] = [
    "fp8", "", "BF16", "f16", "bfloat16", "tf32", "f64", "auto", "bf16,f32", " bf16", "fp32",
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
    let bf16 = ["--precision", "bf16"];
    for (program, base, extra, file) in [
        (
            "train_resnet",
            TRAIN,
            &["--save", "bf16.safetensors"][..],
            "bf16.safetensors",
        ),
        (
            "profile_resnet",
            PROFILE,
            &["--json", "bf16.json"],
            "bf16.json",
        ),
        (
            "train_resnet",
            &[
                "--model",
                "mobilenet_v2",
                "--image-size",
                "32",
                "--batch-size",
                "2",
                "--steps",
                "1",
            ][..],
            &["--save", "mb.safetensors"],
            "mb.safetensors",
        ),
        (
            "train_gpt",
            // Bytes of the suite's latin1.txt (any file is text to the bytes tokenizer).
            GPT,
            &["--text", "latin1.txt", "--save", "gpt.safetensors"],
            "gpt.safetensors",
        ),
    ] {
        let args = base
            .iter()
            .chain(extra)
            .chain(&bf16)
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
