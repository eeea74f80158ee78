//! A char-level GPT: token and position embeddings, one pre-norm block with a causal
//! mask, a per-token cross-entropy over `[N, vocab, T]`.

use candle_core::{DType, Device, Tensor};
use wick::graph::GraphBuilder;
use wick::models::nn::Layers;

use crate::{block, char_windows, language_model_loss, Probe};

const TEXT: &str = "to be or not to be, that is the question";
const T: usize = 8;
const N: usize = 4;
const DIM: usize = 16;

#[test]
fn a_char_level_gpt_with_a_causal_mask_learns_its_text() {
    let (v, tokens, targets) = char_windows(TEXT, N, T);
    let cpu = Device::Cpu;
    let causal: Vec<u8> = (0..T * T).map(|i| u8::from(i % T > i / T)).collect();
    let feed = [
        ("tokens", tokens),
        ("targets", targets),
        ("positions", Tensor::arange(0i64, T as i64, &cpu).unwrap()),
        (
            "causal_mask",
            Tensor::from_vec(causal, (T, T), &cpu).unwrap(),
        ),
    ];
    let record = |b: &mut GraphBuilder| {
        let tokens = b.input("tokens", &[N, T], DType::I64)?;
        let targets = b.input("targets", &[N, T], DType::I64)?;
        let positions = b.input("positions", &[T], DType::I64)?;
        let mask = b.input("causal_mask", &[T, T], DType::U8)?;
        let mut nn = Layers::new(b);
        let tok = nn.embedding("wte", tokens, v, DIM, None)?;
        let pos = nn.embedding("wpe", positions, T, DIM, None)?;
        let x = nn.builder().broadcast_add(tok, pos)?;
        let x = block(&mut nn, "h.0", x, DIM, 2, Some(mask))?;
        let x = nn.layer_norm("ln_f", x, DIM, 1e-5)?;
        language_model_loss(nn, x, (DIM, v), targets)
    };
    Probe {
        name: "gpt",
        lr: 1e-2,
        steps: 40,
        loss_ratio: 0.3,
        ops: &[
            "AttentionForward",
            "AttentionBackward",
            "EmbeddingBackward",
            "NllLossForward",
        ],
    }
    .check(record, &feed);
}
