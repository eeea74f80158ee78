//! LLaMA against Hugging Face's LlamaForCausalLM (`fixtures/llama`, made by
//! `scripts/make_llama_fixture.py`): grouped-query attention (4 query heads, 2 key/value
//! heads), rope_theta 1000, an untied head; its config.json read as transformers 5 wrote
//! it, its weights loaded by their names, the logits, the loss and every parameter after
//! one AdamW step in float64 and float32, and generation with the key/value cache; and the
//! same with Llama 3's rotary scaling and a tied head (`fixtures/llama/llama3.*`).

mod transformers_fixture;

use candle_core::DType;
use transformers_fixture::{check_adamw_step, check_generation, Fixture};
use wick_graph::{GraphBuilder, Mode, ValueKind};
use wick_models::language_model::rotary::RopeScaling;
use wick_models::llama::{Llama, LlamaConfig};
use wick_models::nn::Layers;
use wick_models::CausalLm;

fn model(f: &Fixture) -> Llama {
    let config = LlamaConfig::from_json(&f.config).unwrap();
    let c = &config;
    assert_eq!(
        (
            c.hidden_size,
            c.num_hidden_layers,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.head_dim,
            c.intermediate_size,
            c.vocab_size,
            c.max_position_embeddings,
        ),
        (32, 2, 4, 2, 8, 48, 64, 16)
    );
    assert_eq!((c.rope_theta, c.rms_norm_eps), (1000.0, 1e-6));
    assert!(!c.tie_word_embeddings);
    Llama::new(config)
}

#[test]
fn llama_matches_transformers_logits_loss_and_one_adamw_step() {
    let f = Fixture::read("llama");
    // The fixture's float64 reference computes the norms and the rotary tables in
    // float64, where transformers' own float64 model computes them in float32: how far
    // that moves the logits (so a float64 bound below it shows the difference is seen).
    let upcast = f.figure("f64_upcast_effect");
    assert!(upcast > 1e-9, "{upcast:.2e}");
    check_adamw_step(&model(&f), &f, 1e-12);
}

#[test]
fn greedy_generation_with_the_cache_is_transformers() {
    let f = Fixture::read("llama");
    check_generation(&model(&f), &f, (14, "max_position_embeddings = 16"));
}

#[test]
fn llama3_rotary_scaling_and_a_tied_head_match_transformers() {
    let f = Fixture::read_stem("llama", "llama3");
    let c = LlamaConfig::from_json(&f.config).unwrap();
    assert!(c.tie_word_embeddings);
    assert!(matches!(
        c.rope_scaling,
        RopeScaling::Llama3 { factor: 4.0, .. }
    ));
    // The scaled frequencies in float32, bit for bit transformers' (one in each band:
    // kept, interpolated, divided by the factor).
    let ours: Vec<f32> = c
        .rotary()
        .inverse_frequencies(DType::F32)
        .iter()
        .map(|&x| x as f32)
        .collect();
    let theirs: Vec<f32> = f.tensors["rope_inv_freq"].to_vec1().unwrap();
    assert_eq!(ours, theirs);
    let model = Llama::new(c);
    check_adamw_step(&model, &f, 1e-12);
    check_generation(&model, &f, (62, "max_position_embeddings = 64"));
}

#[test]
fn the_rotary_tables_are_float32_as_transformers_computes_them() {
    let mut c = LlamaConfig::from_json(r#"{"hidden_size": 16, "num_attention_heads": 2}"#).unwrap();
    c.rope_theta = 10000.0;
    let (cos, sin) = c.rotary().tables(3, 2, DType::F32).unwrap();
    assert_eq!(cos.dims(), [2, 8]);
    // The two halves of a head share each angle; pair 0's frequency is 1.
    let cos: Vec<Vec<f32>> = cos.to_vec2().unwrap();
    let sin: Vec<Vec<f32>> = sin.to_vec2().unwrap();
    assert_eq!(cos[0][1], cos[0][5]);
    assert_eq!(cos[0][0], 3f32.cos());
    assert_eq!(sin[1][0], 4f32.sin());
    // Far along, each step's rounding to float32 shows: position 1234, pair 1, computed
    // in float32 arithmetic as transformers does, and not the float64 value rounded once.
    let (far, _) = c.rotary().tables(1234, 1, DType::F32).unwrap();
    let far: Vec<Vec<f32>> = far.to_vec2().unwrap();
    let inv = 1.0f32 / 10000f32.powf(2.0 / 8.0);
    assert_eq!(far[0][1], (1234.0 * inv).cos());
    let (far64, _) = c.rotary().tables(1234, 1, DType::F64).unwrap();
    let far64: Vec<Vec<f64>> = far64.to_vec2().unwrap();
    assert_eq!(far64[0][1], (1234.0 * 10000f64.powf(-0.25)).cos());
    assert!((far[0][1] as f64 - far64[0][1]).abs() > 5e-7);
}

#[test]
fn a_tied_head_is_the_embedding_and_the_tables_are_constants() {
    let c = LlamaConfig::from_json(
        r#"{"vocab_size": 40, "hidden_size": 16, "intermediate_size": 24,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
            "max_position_embeddings": 8, "tie_word_embeddings": true, "attention_bias": true}"#,
    )
    .unwrap();
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let tokens = b.input("tokens", &[2, 5], DType::I64).unwrap();
    let mut nn = Layers::new(&mut b);
    let out = Llama::new(c).next_token_loss(&mut nn, tokens).unwrap();
    let names: Vec<String> = nn.into_specs().into_iter().map(|s| s.name).collect();
    assert!(!names.iter().any(|n| n.starts_with("lm_head")), "{names:?}");
    assert!(names.contains(&"model.layers.0.self_attn.q_proj.bias".to_string()));
    assert!(!names
        .iter()
        .any(|n| n.contains("mlp") && n.ends_with("bias")));
    assert_eq!(b.shape(out.logits), [2, 4, 40]);
    let graph = b.finish();
    let cos = graph.find("model.rotary_emb.cos").unwrap();
    assert_eq!(graph.value(cos).kind, ValueKind::Constant);
    assert_eq!(graph.value(cos).shape, [4, 8]);
}

#[test]
fn config_json_settings_llama_lacks_are_refused() {
    let bad = [
        (r#"{"hidden_act": "gelu"}"#, "hidden_act"),
        (
            r#"{"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}"#,
            "`rope_scaling.low_freq_factor` is missing",
        ),
        (
            r#"{"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}}"#,
            "rope_type `yarn`",
        ),
        (
            r#"{"rope_scaling": {"type": "linear", "factor": 2.0}}"#,
            "rope_type `linear`",
        ),
        (
            r#"{"num_attention_heads": 6, "num_key_value_heads": 4}"#,
            "multiple of num_key_value_heads",
        ),
        (r#"{"head_dim": 7}"#, "head_dim 7 is odd"),
        (r#"{"num_hidden_layers": 0}"#, "num_hidden_layers"),
        (r#"{"tie_word_embeddings": "yes"}"#, "tie_word_embeddings"),
        (r#"{"attention_dropout": 1.0}"#, "attention_dropout"),
        ("[", "config.json"),
    ];
    for (text, needle) in bad {
        let e = LlamaConfig::from_json(text).unwrap_err().to_string();
        assert!(e.contains(needle), "{text}: {e}");
    }
    // Earlier transformers versions write the base at the top level, and the scaling as
    // `rope_scaling` (Llama 3.2 1B's config.json).
    let old = LlamaConfig::from_json(
        r#"{"rope_theta": 500000.0, "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0,
            "low_freq_factor": 1.0, "original_max_position_embeddings": 8192,
            "rope_type": "llama3"}}"#,
    )
    .unwrap();
    assert_eq!(old.rope_theta, 500000.0);
    assert_eq!(
        old.rope_scaling,
        RopeScaling::Llama3 {
            factor: 32.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 8192.0
        }
    );
    let round = LlamaConfig::from_json(&old.to_json()).unwrap();
    assert_eq!(round, old);
    assert_eq!(
        LlamaConfig::from_json("{}").unwrap(),
        LlamaConfig::llama_7b()
    );
    // A configuration built in code is checked when the model is recorded: an error, not
    // a division by zero.
    let zero_kv = LlamaConfig {
        num_key_value_heads: 0,
        ..LlamaConfig::llama_7b()
    };
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let tokens = b.input("tokens", &[1, 4], DType::I64).unwrap();
    let mut nn = Layers::new(&mut b);
    let e = Llama::new(zero_kv)
        .next_token_loss(&mut nn, tokens)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`num_key_value_heads` must be a positive integer"),
        "{e}"
    );
}
