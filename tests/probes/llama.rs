//! A LLaMA-style char-level decoder written layer by layer (`wick::models::llama` is the
//! full model): RMS norms, rotary position embeddings on the queries and keys (their cos
//! and sin tables computed in the graph from the positions and the inverse frequencies),
//! causal attention and a SwiGLU MLP.

use candle_core::{DType, Device, Tensor};
use wick::graph::{GraphBuilder, ValueId};
use wick::models::language_model::rotary::apply_rotary;
use wick::models::nn::Layers;

use crate::{char_windows, dense, language_model_loss, Probe};

const TEXT: &str = "to be or not to be, that is the question";
const T: usize = 8;
const N: usize = 4;
const DIM: usize = 16;
const HEADS: usize = 2;
const HEAD_DIM: usize = DIM / HEADS;

#[test]
fn a_llama_style_decoder_with_rms_norm_rotary_positions_and_swiglu_learns_its_text() {
    let (v, tokens, targets) = char_windows(TEXT, N, T);
    let cpu = Device::Cpu;
    let positions: Vec<f32> = (0..T).map(|t| t as f32).collect();
    let feed = [
        ("tokens", tokens),
        ("targets", targets),
        (
            "positions",
            Tensor::from_vec(positions, (T, 1), &cpu).unwrap(),
        ),
        (
            "inv_freq",
            Tensor::from_vec(inverse_frequencies(), (1, HEAD_DIM), &cpu).unwrap(),
        ),
    ];
    let record = |b: &mut GraphBuilder| {
        let tokens = b.input("tokens", &[N, T], DType::I64)?;
        let targets = b.input("targets", &[N, T], DType::I64)?;
        let positions = b.input("positions", &[T, 1], DType::F32)?;
        let inv_freq = b.input("inv_freq", &[1, HEAD_DIM], DType::F32)?;
        let angles = b.mul(positions, inv_freq)?; // [T, HEAD_DIM]
        let (cos, sin) = (b.cos(angles)?, b.sin(angles)?);
        let mut nn = Layers::new(b);
        let x = nn.embedding("embed_tokens", tokens, v, DIM, None)?;
        let x = nn.scope("layers.0", |nn| {
            let h = nn.rms_norm("input_layernorm", x, DIM, Some(1e-6))?;
            let h = attention(nn, h, (cos, sin))?;
            let x = nn.builder().add(x, h)?;
            let h = nn.rms_norm("post_attention_layernorm", x, DIM, Some(1e-6))?;
            let h = swiglu(nn, h)?;
            nn.builder().add(x, h)
        })?;
        let x = nn.rms_norm("norm", x, DIM, None)?;
        language_model_loss(nn, x, (DIM, v), targets)
    };
    Probe {
        name: "llama",
        lr: 1e-2,
        steps: 40,
        loss_ratio: 0.3,
        ops: &[
            "RMSNormForward",
            "RMSNormBackward",
            "Cos",
            "Sin",
            "AttentionBackward",
        ],
    }
    .check(record, &feed);
}

/// `θ_i = 10000^(-2i/HEAD_DIM)` for each half of a row (Hugging Face's `rotate_half`
/// layout: the two halves of a head rotate by the same angles).
fn inverse_frequencies() -> Vec<f32> {
    let half = HEAD_DIM / 2;
    (0..HEAD_DIM)
        .map(|j| 10000f64.powf(-2.0 * (j % half) as f64 / HEAD_DIM as f64) as f32)
        .collect()
}

/// Causal self-attention with rotary positions on q and k, as layer `self_attn`.
fn attention(
    nn: &mut Layers,
    h: ValueId,
    rope: (ValueId, ValueId),
) -> wick::graph::Result<ValueId> {
    nn.scope("self_attn", |nn| {
        let mut heads = Vec::new();
        for proj in ["q_proj", "k_proj", "v_proj"] {
            let p = dense(nn, proj, h, DIM, DIM)?;
            let p = nn.builder().reshape(p, &[N, T, HEADS, HEAD_DIM])?;
            heads.push(nn.builder().transpose(p, 1, 2)?); // [N, heads, T, HEAD_DIM]
        }
        let b = nn.builder();
        let q = apply_rotary(b, heads[0], rope)?;
        let k = apply_rotary(b, heads[1], rope)?;
        let y = b.scaled_dot_product_attention(q, k, heads[2], None, 0.0, true, None)?;
        let y = b.transpose(y, 1, 2)?;
        let y = b.reshape(y, &[N, T, DIM])?;
        dense(nn, "o_proj", y, DIM, DIM)
    })
}

/// LLaMA's MLP, `down(silu(gate(x)) · up(x))`, as layer `mlp`.
fn swiglu(nn: &mut Layers, x: ValueId) -> wick::graph::Result<ValueId> {
    nn.scope("mlp", |nn| {
        let gate = dense(nn, "gate_proj", x, DIM, 2 * DIM)?;
        let up = dense(nn, "up_proj", x, DIM, 2 * DIM)?;
        let gate = nn.builder().silu(gate)?;
        let h = nn.builder().mul(gate, up)?;
        dense(nn, "down_proj", h, 2 * DIM, DIM)
    })
}
