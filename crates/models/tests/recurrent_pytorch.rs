//! `Layers::lstm` and `Layers::gru` against `nn.LSTM` and `nn.GRU` (`batch_first=True`;
//! fixtures/tensor-ops/{lstm,gru}_*, made by scripts/make_tensor_op_fixtures.py): the
//! outputs `output`, `h_n` (and `c_n`) and the gradients of the input, of the initial
//! state and of every parameter under PyTorch's names, in float64 and float32.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use wick_graph::{GraphBuilder, GraphError, Mode, ValueId};
use wick_models::nn::{Layers, Recurrent};

mod common;

use common::{assert_mentions, VjpCheck};

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Lstm,
    Gru,
}

struct Case {
    name: &'static str,
    kind: Kind,
    layers: usize,
    bidirectional: bool,
    state: bool,
}

const CASES: [Case; 4] = [
    Case {
        name: "lstm_l2_bidirectional_state",
        kind: Kind::Lstm,
        layers: 2,
        bidirectional: true,
        state: true,
    },
    Case {
        name: "lstm_l1",
        kind: Kind::Lstm,
        layers: 1,
        bidirectional: false,
        state: false,
    },
    Case {
        name: "gru_l2_bidirectional_state",
        kind: Kind::Gru,
        layers: 2,
        bidirectional: true,
        state: true,
    },
    Case {
        name: "gru_l1",
        kind: Kind::Gru,
        layers: 1,
        bidirectional: false,
        state: false,
    },
];

const N: usize = 2;
const T: usize = 5;
const INPUT: usize = 3;
const HIDDEN: usize = 4;

fn fixture(name: &str) -> (HashMap<String, Tensor>, f64) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../../fixtures/tensor-ops/{name}.safetensors"));
    let bytes = std::fs::read(&path).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let torch_f32: f64 = header.metadata().as_ref().unwrap()["torch_f32_err"]
        .parse()
        .unwrap();
    let tensors = candle_core::safetensors::load_buffer(&bytes, &Device::Cpu).unwrap();
    (tensors, torch_f32)
}

/// Records the case's layer with its outputs flattened into one vector, as the
/// generator does; returns that vector.
fn record(b: &mut GraphBuilder, case: &Case) -> wick_graph::Result<ValueId> {
    let dirs = if case.bidirectional { 2 } else { 1 };
    let x = b.param("x", &[N, T, INPUT])?;
    let state_shape = [case.layers * dirs, N, HIDDEN];
    let h0 = case
        .state
        .then(|| b.param("h0", &state_shape))
        .transpose()?;
    let c0 = (case.state && case.kind == Kind::Lstm)
        .then(|| b.param("c0", &state_shape))
        .transpose()?;
    let mut cfg = Recurrent::new(INPUT, HIDDEN).num_layers(case.layers);
    if case.bidirectional {
        cfg = cfg.bidirectional();
    }
    let mut nn = Layers::new(b);
    let parts = match case.kind {
        Kind::Lstm => {
            let o = nn.lstm("rnn", x, cfg, h0.zip(c0))?;
            vec![o.output, o.h_n, o.c_n]
        }
        Kind::Gru => {
            let o = nn.gru("rnn", x, cfg, h0)?;
            vec![o.output, o.h_n]
        }
    };
    let flat: Vec<ValueId> = parts
        .iter()
        .map(|p| {
            let n = b.shape(*p).iter().product();
            b.reshape(*p, &[n])
        })
        .collect::<wick_graph::Result<_>>()?;
    b.concat(&flat, 0)
}

/// The worst relative error of the outputs and of every gradient against the fixture.
fn worst_error(case: &Case, dtype: DType) -> f64 {
    let (f, _) = fixture(case.name);
    let mut b = GraphBuilder::new(Mode::Train, dtype);
    let out = record(&mut b, case).unwrap();
    let shape = b.shape(out).to_vec();
    let go = b.input("grad_out", &shape, dtype).unwrap();
    let mut check = VjpCheck::new(b, out, go);
    let fixture_name = |n: &str| match n {
        "x" => "input".to_string(),
        n => n.strip_prefix("rnn.").unwrap_or(n).to_string(),
    };
    assert_eq!(
        check.grads.len(),
        f.keys().filter(|k| k.starts_with("grad_")).count() - 1
    );
    for &(p, _) in &check.grads {
        let name = check.exec.graph().value(p).name.clone();
        let t = f[&fixture_name(&name)].to_dtype(dtype).unwrap();
        check.exec.set(&name, &t).unwrap();
    }
    let go = f["grad_out"].to_dtype(dtype).unwrap();
    check.exec.set("grad_out", &go).unwrap();
    check.worst_error(&f, fixture_name)
}

#[test]
fn lstm_and_gru_match_pytorch_in_float64() {
    for case in &CASES {
        let worst = worst_error(case, DType::F64);
        assert!(
            worst < 1e-12,
            "{}: {worst:.2e} from PyTorch float64",
            case.name
        );
    }
}

#[test]
fn lstm_and_gru_in_float32_are_as_close_as_pytorchs_float32() {
    for case in &CASES {
        let (_, torch_f32) = fixture(case.name);
        let worst = worst_error(case, DType::F32);
        let f64_err = worst_error(case, DType::F64);
        println!(
            "{:<28} wick f64 {f64_err:.1e}  wick f32 {worst:.1e}  PyTorch f32 {torch_f32:.1e}",
            case.name
        );
        assert!(
            worst < 4.0 * torch_f32.max(1e-7),
            "{}: {worst:.2e} from float64, PyTorch's float32 {torch_f32:.2e}",
            case.name
        );
    }
}

#[test]
fn an_lstm_applied_twice_shares_its_weights_and_bad_shapes_name_the_layer() {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let x = b.input("x", &[2, 7, 3], DType::F32).unwrap();
    let y = b.input("y", &[2, 4, 3], DType::F32).unwrap();
    let mut nn = Layers::new(&mut b);
    let cfg = Recurrent::new(3, 5);
    nn.lstm("enc", x, cfg, None).unwrap();
    nn.lstm("enc", y, cfg, None).unwrap();
    assert_eq!(
        nn.specs().len(),
        4,
        "the second call reuses enc's parameters"
    );
    let err = nn.gru("dec", x, Recurrent::new(4, 5), None).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, GraphError::Usage(_))
            && msg.contains("gru `dec`")
            && msg.contains("[2, 7, 3]"),
        "{msg}"
    );
    let h0 = nn.builder().input("h0", &[1, 3, 5], DType::F32).unwrap();
    let msg = nn
        .gru("dec", x, Recurrent::new(3, 5), Some(h0))
        .unwrap_err()
        .to_string();
    assert_mentions(&msg, &["`h0`", "[1, 2, 5]"]);
}
