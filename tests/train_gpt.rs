//! train_gpt run as a user would: on the shipped text with a tiny config.json, the loss
//! falls, the weights and config.json are written under Hugging Face's names, a second
//! run starts from them and generates text, a batch file trains, a LLaMA config.json
//! trains too, and bad settings are one clear line.

mod common;

use std::path::{Path, PathBuf};

use common::{run, run_ok};

const TINY: &str = r#"{"vocab_size": 256, "n_positions": 96, "n_embd": 32, "n_layer": 1, "n_head": 2,
  "embd_pdrop": 0.0, "attn_pdrop": 0.0, "resid_pdrop": 0.0}"#;

fn text() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples/data/sonnets.txt")
        .display()
        .to_string()
}

/// The train losses of the per-epoch lines.
fn train_losses(stdout: &str) -> Vec<f64> {
    stdout
        .lines()
        .filter(|l| l.starts_with("epoch "))
        .map(|l| {
            let after = l.split("train loss ").nth(1).unwrap();
            after.split_whitespace().next().unwrap().parse().unwrap()
        })
        .collect()
}

/// `--text text --config config` and then `settings`.
fn with_text<'a>(text: &'a str, config: &'a str, settings: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--text", text, "--config", config];
    args.extend_from_slice(settings);
    args
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

#[test]
fn the_loss_falls_the_weights_are_saved_and_generation_reads_them() {
    let d = common::scratch("wick-gpt-");
    let config = write(d.path(), "tiny.json", TINY);
    let text = text();
    let base = with_text(&text, &config, &["--context", "32", "--batch-size", "4"]);
    let args: Vec<&str> = base
        .iter()
        .copied()
        .chain([
            "--steps",
            "60",
            "--steps-per-epoch",
            "20",
            "--lr",
            "1e-2",
            "--save",
            "out/model.safetensors",
        ])
        .collect();
    std::fs::create_dir(d.path().join("out")).unwrap();
    let stdout = run_ok(d.path(), "train_gpt", &args);
    let losses = train_losses(&stdout);
    assert_eq!(losses.len(), 3, "{stdout}");
    assert!(losses[2] < losses[0] - 0.3, "the loss falls: {losses:?}");
    // Hugging Face's names, no separate head (tied), and its config.json beside them.
    let saved = wick::models::checkpoint::read_safetensors(&d.path().join("out/model.safetensors"))
        .unwrap();
    assert!(saved.contains_key("transformer.h.0.attn.c_attn.weight"));
    assert_eq!(saved["transformer.h.0.attn.c_attn.weight"].dims(), [32, 96]);
    assert!(!saved.contains_key("lm_head.weight"));
    let written = std::fs::read_to_string(d.path().join("out/config.json")).unwrap();
    assert!(written.contains("\"n_embd\":32"), "{written}");

    let args: Vec<&str> = base
        .iter()
        .copied()
        .chain([
            "--steps",
            "1",
            "--weights",
            "out/model.safetensors",
            "--lr",
            "0",
            "--generate",
            "30",
            "--temperature",
            "0",
            "--prompt",
            "Shall I",
        ])
        .collect();
    let stdout = run_ok(d.path(), "train_gpt", &args);
    let generated = stdout.split("---\n").nth(1).unwrap();
    assert!(
        generated.starts_with("Shall I") && generated.len() > "Shall I".len() + 30,
        "{generated:?}"
    );
    // From the saved weights, the first step's loss is the trained one, not a fresh model's.
    assert!(train_losses(&stdout)[0] < losses[0], "{stdout}");
}

#[test]
fn a_batch_file_trains_and_bad_settings_are_one_line() {
    let d = common::scratch("wick-gpt-");
    let config = write(d.path(), "tiny.json", TINY);
    let text = text();
    let tokens: Vec<i64> = (0..2 * 17).map(|i| (i * 7 % 256) as i64).collect();
    let batch = candle_core::Tensor::from_vec(tokens, (2, 17), &candle_core::Device::Cpu).unwrap();
    let batch_file = d.path().join("batch.safetensors");
    let map = std::collections::HashMap::from([("tokens".to_string(), batch)]);
    wick::models::checkpoint::write_safetensors(&map, &batch_file).unwrap();
    let batch_file = batch_file.display().to_string();
    let out = run(
        d.path(),
        "train_gpt",
        &[
            "--text",
            &text,
            "--config",
            &config,
            "--data",
            &batch_file,
            "--steps",
            "30",
            "--steps-per-epoch",
            "10",
            "--lr",
            "1e-2",
        ],
        &[],
    );
    let stdout = common::succeeded(&out, "train_gpt");
    assert!(stdout.contains("batch 2 x 16 tokens"), "{stdout}");
    let losses = train_losses(&stdout);
    assert!(losses[2] < losses[0], "one batch is learnt: {losses:?}");

    let cases: [(&[&str], &str); 3] = [
        (
            &["--context", "200"],
            "--context 200 must be 1..=n_positions (96)",
        ),
        (&["--weights", "missing.safetensors"], "missing.safetensors"),
        (&["--optimizer", "lion"], "--optimizer lion"),
    ];
    for (extra, needle) in cases {
        let args: Vec<&str> = ["--text", &text, "--config", &config]
            .iter()
            .copied()
            .chain(extra.iter().copied())
            .collect();
        let out = run(d.path(), "train_gpt", &args, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {err}");
        assert!(
            err.contains(needle) && !err.contains("panicked"),
            "{extra:?}: {err}"
        );
    }
}

/// A LLaMA config.json trains the same way: the loss falls, and the weights are written
/// under `LlamaForCausalLM`'s names with its own head, beside a config.json that reads
/// back as the same model; a model type wick lacks is one clear line.
#[test]
fn a_llama_config_trains_and_saves_under_its_names() {
    let d = common::scratch("wick-gpt-");
    let config = write(
        d.path(),
        "llama.json",
        r#"{"model_type": "llama", "vocab_size": 256, "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 64}"#,
    );
    let text = text();
    std::fs::create_dir(d.path().join("out")).unwrap();
    let settings = [
        "--context",
        "32",
        "--batch-size",
        "4",
        "--steps",
        "40",
        "--steps-per-epoch",
        "20",
        "--lr",
        "1e-2",
        "--optimizer",
        "adamw",
        "--save",
        "out/model.safetensors",
    ];
    let stdout = run_ok(d.path(), "train_gpt", &with_text(&text, &config, &settings));
    assert!(
        stdout.contains("training a LLaMA (1 layers, 32 wide, 4 heads"),
        "{stdout}"
    );
    let losses = train_losses(&stdout);
    assert!(losses[1] < losses[0] - 0.3, "the loss falls: {losses:?}");
    let saved = wick::models::checkpoint::read_safetensors(&d.path().join("out/model.safetensors"))
        .unwrap();
    assert_eq!(
        saved["model.layers.0.self_attn.k_proj.weight"].dims(),
        [16, 32]
    );
    assert_eq!(saved["lm_head.weight"].dims(), [256, 32]);
    let written = std::fs::read_to_string(d.path().join("out/config.json")).unwrap();
    let model = wick::models::LanguageModel::from_json(&written).unwrap();
    let original = std::fs::read_to_string(&config).unwrap();
    assert_eq!(
        model,
        wick::models::LanguageModel::from_json(&original).unwrap()
    );

    let other = write(d.path(), "bert.json", r#"{"model_type": "bert"}"#);
    let out = run(d.path(), "train_gpt", &with_text(&text, &other, &[]), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("model_type `bert`"), "{err}");
}

/// A run stopped after 7 of 12 steps and resumed from its checkpoints ends with the
/// uninterrupted run's weights, byte for byte; a resume with another learning rate is
/// refused, naming it.
#[test]
fn a_resumed_run_ends_with_the_uninterrupted_weights() {
    let d = common::scratch("wick-gpt-");
    let config = write(d.path(), "tiny.json", TINY.replace("0.0", "0.1").as_str());
    let text = text();
    let settings = [
        "--context",
        "16",
        "--batch-size",
        "2",
        "--steps-per-epoch",
        "4",
    ];
    let base = with_text(&text, &config, &settings);
    let with = |extra: &[&'static str]| -> Vec<&str> {
        base.iter().copied().chain(extra.iter().copied()).collect()
    };
    run_ok(
        d.path(),
        "train_gpt",
        &with(&["--steps", "12", "--save", "straight.safetensors"]),
    );
    let first = with(&[
        "--steps",
        "7",
        "--checkpoint-dir",
        "ck",
        "--checkpoint-every",
        "3",
    ]);
    run_ok(d.path(), "train_gpt", &first);
    let steps: Vec<u64> = wick::models::resume::periodic(&d.path().join("ck"))
        .unwrap()
        .iter()
        .map(|(s, _)| *s)
        .collect();
    assert_eq!(steps, [3, 6, 7], "every 3 steps and at the run's end");
    let resumed = with(&[
        "--steps",
        "12",
        "--resume",
        "ck",
        "--save",
        "resumed.safetensors",
    ]);
    let stdout = run_ok(d.path(), "train_gpt", &resumed);
    assert!(stdout.contains("at step 7"), "{stdout}");
    let read = |name: &str| std::fs::read(d.path().join(name)).unwrap();
    assert!(
        read("straight.safetensors") == read("resumed.safetensors"),
        "resumed weights differ"
    );

    let other = with(&["--steps", "14", "--resume", "ck", "--lr", "0.01"]);
    let out = run(d.path(), "train_gpt", &other, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("lr 0.003, this one 0.01"), "{err}");
}
