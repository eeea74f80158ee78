//! An LSTM classifier unrolled over time: one `weight_ih`/`weight_hh` pair applied at
//! every step (a layer applied again shares its parameters), PyTorch's gate order
//! (input, forget, cell, output).

use candle_core::{DType, Device, Tensor};
use wick::graph::GraphBuilder;
use wick::models::nn::{Init, Layers};

use crate::{assert_trained, train, Recorded};

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
        ("h0", Tensor::zeros((N, H), DType::F32, &cpu).unwrap()),
    ];
    let mut params = 0;
    let record = |b: &mut GraphBuilder| {
        let x = b.input("x", &[N, T, I], DType::F32)?;
        let labels = b.input("labels", &[N], DType::I64)?;
        let h0 = b.input("h0", &[N, H], DType::F32)?;
        let mut nn = Layers::new(b);
        let (mut h, mut c) = (h0, h0);
        for t in 0..T {
            let xt = nn.builder().narrow(x, 1, t, 1)?;
            let xt = nn.builder().squeeze(xt, 1)?;
            let gi = nn.linear("lstm.ih", xt, I, 4 * H, Init::LinearDefault)?;
            let gh = nn.linear("lstm.hh", h, H, 4 * H, Init::LinearDefault)?;
            let b = nn.builder();
            let gates = b.broadcast_add(gi, gh)?;
            let g = b.chunk(gates, 4, 1)?;
            let (i, f) = (b.sigmoid(g[0])?, b.sigmoid(g[1])?);
            let (cell, o) = (b.tanh(g[2])?, b.sigmoid(g[3])?);
            let fc = b.mul(f, c)?;
            let ic = b.mul(i, cell)?;
            c = b.broadcast_add(fc, ic)?;
            let tc = b.tanh(c)?;
            h = b.mul(o, tc)?;
        }
        let logits = nn.linear("fc", h, H, 2, Init::LinearDefault)?;
        let specs = nn.into_specs();
        params = specs.len();
        let loss = b.cross_entropy(logits, labels)?;
        Ok(Recorded { loss, specs })
    };
    let (losses, profile) = train(record, &feed, 2e-2, 30);
    assert_eq!(
        params, 6,
        "one ih and one hh linear for every time step, and the head"
    );
    assert_trained(
        "lstm",
        &losses,
        0.3,
        &profile,
        &["Narrow", "NarrowBackward", "AccumulateGrad"],
    );
}
