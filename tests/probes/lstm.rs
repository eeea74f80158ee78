//! An LSTM classifier: `Layers::lstm` (nn.LSTM, checked against PyTorch in
//! crates/models/tests/recurrent_pytorch.rs) unrolled over time with one set of weights,
//! and a linear head on the last step's hidden state.

use candle_core::{DType, Device, Tensor};
use wick::graph::GraphBuilder;
use wick::models::nn::{Init, Layers, Recurrent};

use crate::{Probe, Recorded};

const N: usize = 4;
const T: usize = 5;
const I: usize = 3;
const H: usize = 8;

#[test]
fn an_lstm_unrolled_with_shared_weights_learns_to_classify_sequences() {
    let cpu = Device::Cpu;
    let x: Vec<f32> = (0..N * T * I)
        .map(|i| ((i * 13) % 11) as f32 / 11.0 - 0.5)
        .collect();
    let feed = [
        ("x", Tensor::from_vec(x, (N, T, I), &cpu).unwrap()),
        ("labels", Tensor::new(&[1i64, 0, 1, 0], &cpu).unwrap()),
    ];
    let mut params = 0;
    let record = |b: &mut GraphBuilder| {
        let x = b.input("x", &[N, T, I], DType::F32)?;
        let labels = b.input("labels", &[N], DType::I64)?;
        let mut nn = Layers::new(b);
        let lstm = nn.lstm("lstm", x, Recurrent::new(I, H), None)?;
        let last = nn.builder().narrow(lstm.output, 1, T - 1, 1)?;
        let last = nn.builder().reshape(last, &[N, H])?;
        let logits = nn.linear("fc", last, H, 2, Init::LinearDefault)?;
        let specs = nn.into_specs();
        params = specs.len();
        let loss = b.cross_entropy(logits, labels)?;
        Ok(Recorded { loss, specs })
    };
    Probe {
        name: "lstm",
        lr: 2e-2,
        steps: 30,
        loss_ratio: 0.3,
        ops: &["Narrow", "NarrowBackward", "AccumulateGrad"],
    }
    .check(record, &feed);
    assert_eq!(
        params, 6,
        "one set of LSTM weights for every time step, and the head"
    );
}
