//! GPT-2 against Hugging Face's GPT2LMHeadModel (`fixtures/gpt2`, made by
//! `scripts/make_gpt2_fixture.py`): its config.json read as transformers wrote it, its
//! weights loaded by their names, and the logits, the loss and every parameter after one
//! AdamW step, in float64 and float32.

mod transformers_fixture;

use transformers_fixture::{check_adamw_step, check_generation, Fixture};
use wick_models::gpt2::{Gpt2, Gpt2Config};

fn model(f: &Fixture) -> Gpt2 {
    let config = Gpt2Config::from_json(&f.config).unwrap();
    assert_eq!(
        (
            config.n_embd,
            config.n_layer,
            config.n_head,
            config.vocab_size,
            config.n_inner
        ),
        (32, 2, 4, 50, 128)
    );
    Gpt2::new(config)
}

#[test]
fn gpt2_matches_transformers_logits_loss_and_one_adamw_step() {
    let f = Fixture::read("gpt2");
    check_adamw_step(&model(&f), &f, 1e-12);
}

#[test]
fn config_json_settings_gpt2_lacks_are_refused() {
    let bad = [
        (r#"{"n_embd": 30, "n_head": 4}"#, "multiple of n_head"),
        (r#"{"activation_function": "relu"}"#, "activation_function"),
        (r#"{"tie_word_embeddings": false}"#, "tie_word_embeddings"),
        (
            r#"{"scale_attn_by_inverse_layer_idx": true}"#,
            "scale_attn_by_inverse_layer_idx",
        ),
        (r#"{"attn_pdrop": 1.5}"#, "attn_pdrop"),
        (r#"{"n_layer": 0}"#, "n_layer"),
        ("{", "config.json"),
    ];
    for (text, needle) in bad {
        let e = Gpt2Config::from_json(text).unwrap_err().to_string();
        assert!(e.contains(needle), "{text}: {e}");
    }
    let round = Gpt2Config::from_json(&Gpt2Config::small().to_json()).unwrap();
    assert_eq!(round, Gpt2Config::small());
}

#[test]
fn greedy_generation_with_the_cache_is_transformers() {
    let f = Fixture::read("gpt2");
    check_generation(&model(&f), &f, (14, "n_positions = 16"));
}
