//! bf16 autocast as a graph policy: casts of the products' weights only (once each),
//! float32 parameters, gradients and outputs, a training step that follows the float32
//! one within bf16's rounding but is not the float32 step, the cast's own backward, the
//! refusal of non-float casts and of 16-bit parameters, and batch-norm folding that
//! folds the float32 master weight under autocast.

mod common;

use candle_core::{DType, Device, Tensor};
use common::assert_mentions;
use wick_graph::{Executor, GraphBuilder, Mode, PassSet, Precision, ValueId};
use wick_ops::{BatchNorm2dParams, Conv2dParams, DeviceKind, SgdParams};

fn randn(dims: &[usize], seed: u64) -> Tensor {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| (((i as u64 * 2654435761 + seed * 97) % 1000) as f32 / 1000.0 - 0.5) * 0.8)
        .collect();
    Tensor::from_vec(v, dims, &Device::Cpu).unwrap()
}

/// conv (3x3, 8 -> 16) + batch norm + ReLU + depthwise conv + global pool + linear, and
/// cross-entropy; SGD.
fn small_net(mode: Mode, precision: Precision) -> (GraphBuilder, wick_graph::ValueId) {
    let mut b = GraphBuilder::new(mode, DType::F32);
    b.set_precision(precision);
    let x = b.input("x", &[4, 8, 10, 10], DType::F32).unwrap();
    let w = b.param("conv.weight", &[16, 8, 3, 3]).unwrap();
    let same = Conv2dParams {
        padding: [1, 1],
        ..Default::default()
    };
    let y = b.in_layer("conv", |b| b.conv2d(x, w, None, same)).unwrap();
    let (g, beta) = (
        b.param("bn.weight", &[16]).unwrap(),
        b.param("bn.bias", &[16]).unwrap(),
    );
    let (m, v) = (
        b.state("bn.running_mean", &[16]).unwrap(),
        b.state("bn.running_var", &[16]).unwrap(),
    );
    let y = b
        .batch_norm(y, g, beta, m, v, BatchNorm2dParams::default())
        .unwrap();
    let y = b.relu(y).unwrap();
    let dw = b.param("dw.weight", &[16, 1, 3, 3]).unwrap();
    let depthwise = Conv2dParams { groups: 16, ..same };
    let y = b
        .in_layer("dw", |b| b.conv2d(y, dw, None, depthwise))
        .unwrap();
    let y = b.adaptive_avg_pool2d(y, 1, 1).unwrap();
    let y = b.flatten(y).unwrap();
    let fc = b.param("fc.weight", &[5, 16]).unwrap();
    let logits = b.in_layer("fc", |b| b.linear(y, fc, None)).unwrap();
    b.output(logits);
    (b, logits)
}

fn weights() -> Vec<(&'static str, Tensor)> {
    vec![
        ("conv.weight", randn(&[16, 8, 3, 3], 1)),
        ("bn.weight", (randn(&[16], 2) + 1.0).unwrap()),
        ("bn.bias", randn(&[16], 3)),
        ("bn.running_mean", randn(&[16], 4)),
        (
            "bn.running_var",
            (randn(&[16], 5).abs().unwrap() + 0.5).unwrap(),
        ),
        ("dw.weight", randn(&[16, 1, 3, 3], 6)),
        ("fc.weight", randn(&[5, 16], 7)),
    ]
}

fn kernel_names(exec: &Executor) -> Vec<&'static str> {
    exec.graph()
        .nodes()
        .iter()
        .map(|n| n.op.kernel().name(DeviceKind::Cpu))
        .collect()
}

/// A training executor with the weights set and one batch in.
fn training(precision: Precision) -> Executor {
    training_with(precision, |_| {})
}

/// [`training`], with `before` run on the builder once the forward pass is recorded.
fn training_with(precision: Precision, before: impl FnOnce(&mut GraphBuilder)) -> Executor {
    let (mut b, logits) = small_net(Mode::Train, precision);
    before(&mut b);
    let labels = b.input("labels", &[4], DType::I64).unwrap();
    let loss = b.cross_entropy(logits, labels).unwrap();
    b.output(loss);
    let grads = b.backward(loss).unwrap();
    for (p, g) in grads.iter() {
        assert_eq!(
            b.dtype(g),
            DType::F32,
            "gradient of {}",
            b.graph().value(p).name
        );
    }
    b.sgd(
        &grads,
        SgdParams {
            lr: 0.5,
            ..Default::default()
        },
    )
    .unwrap();
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    for (name, t) in weights() {
        exec.set(name, &t).unwrap();
    }
    exec.set("x", &randn(&[4, 8, 10, 10], 9)).unwrap();
    exec.set(
        "labels",
        &Tensor::new(&[0i64, 3, 1, 4], &Device::Cpu).unwrap(),
    )
    .unwrap();
    exec
}

fn values(exec: &Executor, name: &str) -> Vec<f32> {
    let t = exec.get(name).unwrap().unwrap();
    assert_eq!(t.dtype(), DType::F32, "{name} stays f32");
    t.flatten_all().unwrap().to_vec1().unwrap()
}

#[test]
fn autocast_casts_each_products_weight_once_and_keeps_everything_else_f32() {
    let exec = training(Precision::Bf16Autocast);
    let graph = exec.graph();
    let casts: Vec<_> = graph
        .nodes()
        .iter()
        .filter(|n| n.op.kernel().name(DeviceKind::Cpu) == "Cast")
        .map(|n| graph.value(n.inputs[0]).name.clone())
        .collect();
    // The dense conv's and the linear layer's weights; not the depthwise conv's.
    assert_eq!(casts, ["conv.weight", "fc.weight"]);
    assert!(
        !kernel_names(&exec).contains(&"CastBackward"),
        "gradients are f32 already"
    );
    // What the profile sees: every product of the dense conv and the linear layer,
    // weight gradients included, computes in bf16; the depthwise conv in f32.
    for info in exec.node_infos() {
        let dense = info
            .origin
            .layer
            .as_deref()
            .is_some_and(|l| l == "conv" || l == "fc");
        let product = matches!(
            info.name,
            "ConvForward"
                | "ConvBackwardData"
                | "ConvBackwardFilter"
                | "LinearForward"
                | "LinearBackward"
        );
        if product {
            let want = if dense { DType::BF16 } else { DType::F32 };
            assert_eq!(
                info.dtype, want,
                "OP_ID{} {} in {:?}",
                info.op_id, info.name, info.origin.layer
            );
        }
    }
    assert_eq!(graph.precision(), Precision::Bf16Autocast);
    let f32_graph = training(Precision::F32);
    assert!(!kernel_names(&f32_graph).contains(&"Cast"));
}

#[test]
fn an_autocast_step_follows_the_f32_step_within_bf16_rounding() {
    let (mut low, mut full) = (training(Precision::Bf16Autocast), training(Precision::F32));
    for _ in 0..3 {
        low.run().unwrap();
        full.run().unwrap();
    }
    for name in ["conv.weight", "fc.weight", "bn.weight", "dw.weight"] {
        let (a, b) = (values(&low, name), values(&full, name));
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = a
            .iter()
            .zip(&b)
            .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        // Three SGD steps at lr 0.5 on bf16 products: a few parts in a thousand of the
        // weights' scale; identical would mean the products ran in f32.
        assert!(
            worst < 2e-2 * scale,
            "{name}: differs by {worst} (scale {scale})"
        );
        assert!(
            worst > 0.0,
            "{name}: identical to f32: bf16 products did not run"
        );
    }
}

#[test]
fn a_cast_passes_f32_gradients_through_and_refuses_integers() {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let x = b.input("x", &[3, 4], DType::F32).unwrap();
    let w = b.param("w", &[2, 4]).unwrap();
    let wh = b.to_dtype(w, DType::BF16).unwrap();
    assert_eq!(
        b.to_dtype(wh, DType::BF16).unwrap(),
        wh,
        "a cast to its own dtype is a no-op"
    );
    let y = b.linear(x, wh, None).unwrap();
    assert_eq!(b.dtype(y), DType::F32);
    let loss = b.sum(y, &[], false).unwrap();
    let grads = b.backward(loss).unwrap();
    let (p, g) = grads.iter().next().unwrap();
    assert_eq!((p, b.dtype(g)), (w, DType::F32));
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let idx = b.input("i", &[3], DType::I64).unwrap();
    let err = b
        .in_layer("head", |b| b.to_dtype(idx, DType::F32))
        .unwrap_err()
        .to_string();
    assert_mentions(&err, &["to", "head", "I64"]);
}

#[test]
fn a_16_bit_graph_is_refused_at_its_first_parameter_naming_the_policy_to_use() {
    for (dtype, policy) in [(DType::BF16, "Bf16Autocast"), (DType::F16, "F16Autocast")] {
        let mut b = GraphBuilder::new(Mode::Train, dtype);
        b.input("x", &[2, 4], dtype).unwrap();
        let err = b
            .in_layer("fc", |b| b.param("fc.weight", &[3, 4]))
            .unwrap_err()
            .to_string();
        assert_mentions(&err, &["fc.weight", "fc", &format!("{dtype:?}"), policy]);
        let err = b.state("bn.running_mean", &[3]).unwrap_err().to_string();
        assert_mentions(&err, &["bn.running_mean", "float32"]);
    }
    let err = GraphBuilder::new(Mode::Eval, DType::U32)
        .param("w", &[2])
        .unwrap_err()
        .to_string();
    assert_mentions(&err, &["`w`", "U32", "float32 or float64"]);
    let mut b = GraphBuilder::new(Mode::Train, DType::F64);
    let w = b.param("w", &[2]).unwrap();
    assert_eq!(b.dtype(w), DType::F64);
}

/// The output of the cast of `param`, kept as a graph output so that it can be read.
fn cast_of(b: &mut GraphBuilder, param: &str) -> String {
    let graph = b.graph();
    let p = graph.find(param).unwrap();
    let node = graph.nodes().iter().find(|n| n.inputs == [p]).unwrap();
    let (v, name) = (node.outputs[0], graph.value(node.outputs[0]).name.clone());
    b.output(v);
    name
}

/// The bytes each cast node moves, as hooks (the profiler) see them.
fn cast_bytes(exec: &Executor) -> Vec<u64> {
    let casts = exec.node_infos().iter().filter(|i| i.name == "Cast");
    casts.map(|i| i.bytes).collect()
}

#[test]
fn an_inference_graph_keeps_its_weight_casts_until_a_weight_is_set_again() {
    let (mut b, logits) = small_net(Mode::Eval, Precision::Bf16Autocast);
    let fc = cast_of(&mut b, "fc.weight");
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    // Kept between iterations: the two weights' bf16 copies.
    let held = exec.graph().memory_plan().split.pass_products;
    assert_eq!(held, 2 * (16 * 8 * 9 + 5 * 16) as u64);
    assert_eq!(
        cast_bytes(&exec),
        [0, 0],
        "the roofline charges a kept cast nothing"
    );
    for (name, t) in weights() {
        exec.set(name, &t).unwrap();
    }
    exec.set("x", &randn(&[4, 8, 10, 10], 9)).unwrap();
    exec.run().unwrap();
    let first = exec.get(&fc).unwrap().unwrap().clone();
    exec.run().unwrap();
    assert_eq!(
        exec.get(&fc).unwrap().unwrap().id(),
        first.id(),
        "cast once"
    );
    // A new weight is cast again, and the logits follow it.
    let w = (randn(&[5, 16], 11) * 3.0).unwrap();
    exec.set("fc.weight", &w).unwrap();
    exec.run().unwrap();
    let again = exec.get(&fc).unwrap().unwrap();
    assert_ne!(again.id(), first.id());
    let rounded = |t: &Tensor| -> Vec<f32> {
        let t = t.to_dtype(DType::F32).unwrap();
        t.flatten_all().unwrap().to_vec1().unwrap()
    };
    assert_eq!(rounded(again), rounded(&w.to_dtype(DType::BF16).unwrap()));
    let got = values(&exec, &exec.graph().value(logits).name.clone());
    let (mut fresh, logits) = small_net(Mode::Eval, Precision::Bf16Autocast);
    let name = fresh.graph().value(logits).name.clone();
    fresh.output(logits);
    let mut fresh = Executor::new(fresh.finish(), &Device::Cpu);
    for (n, t) in weights() {
        fresh
            .set(n, if n == "fc.weight" { &w } else { &t })
            .unwrap();
    }
    fresh.set("x", &randn(&[4, 8, 10, 10], 9)).unwrap();
    fresh.run().unwrap();
    assert_eq!(got, values(&fresh, &name));
}

#[test]
fn a_training_graph_casts_its_updated_weights_every_step() {
    let mut fc = String::new();
    let mut exec = training_with(Precision::Bf16Autocast, |b| fc = cast_of(b, "fc.weight"));
    assert_eq!(exec.graph().memory_plan().split.pass_products, 0);
    let f32_and_bf16 = |n: u64| 6 * n;
    let want = [f32_and_bf16(16 * 8 * 9), f32_and_bf16(5 * 16)];
    assert_eq!(cast_bytes(&exec), want);
    exec.run().unwrap();
    let first = exec.get(&fc).unwrap().unwrap().clone();
    exec.run().unwrap();
    let second = exec.get(&fc).unwrap().unwrap();
    assert_ne!(second.id(), first.id());
    let diff = (second.to_dtype(DType::F32).unwrap() - first.to_dtype(DType::F32).unwrap())
        .unwrap()
        .abs()
        .unwrap()
        .sum_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(diff > 0.0, "the updated weight is cast again");
}

#[test]
fn folding_batch_norm_under_autocast_folds_the_f32_master_weight() {
    let run = |passes: PassSet| {
        let mut graph = small_net(Mode::Eval, Precision::Bf16Autocast).0.finish();
        graph.apply_passes(passes);
        let mut exec = Executor::new(graph, &Device::Cpu);
        for (name, t) in weights() {
            exec.set(name, &t).unwrap();
        }
        exec.set("x", &randn(&[4, 8, 10, 10], 9)).unwrap();
        exec.run().unwrap();
        let out = exec.graph().outputs()[0];
        let names = kernel_names(&exec);
        (
            exec.value(out)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap(),
            names,
        )
    };
    let (plain, plain_names) = run(PassSet::NONE);
    let (folded, folded_names) = run(PassSet::default());
    assert_eq!(plain_names.iter().filter(|n| **n == "Cast").count(), 2);
    // The conv's cast went into the fold; the linear layer's stays.
    assert_eq!(
        folded_names.iter().filter(|n| **n == "Cast").count(),
        1,
        "{folded_names:?}"
    );
    assert!(folded_names.contains(&"ConvBiasActivationForward"));
    for (a, b) in plain.iter().zip(&folded) {
        assert!(
            (a - b).abs() < 2e-2 * (1.0 + b.abs()),
            "folded {a} vs unfolded {b}"
        );
    }
}

/// `b`'s graph with the loss `sum(y)` and its backward pass, `y` and the first
/// parameter's gradient as outputs: its executor and that gradient.
fn sum_and_first_gradient(mut b: GraphBuilder, y: ValueId) -> (Executor, ValueId) {
    let loss = b.sum(y, &[], false).unwrap();
    let grads = b.backward(loss).unwrap();
    let g = grads.iter().next().unwrap().1;
    b.output(y);
    b.output(g);
    (Executor::new(b.finish(), &Device::Cpu), g)
}

#[test]
fn autocast_attention_computes_its_products_in_bf16_without_casting_activations() {
    for (precision, want) in [
        (Precision::Bf16Autocast, DType::BF16),
        (Precision::F32, DType::F32),
    ] {
        let mut b = GraphBuilder::new(Mode::Train, DType::F32);
        b.set_precision(precision);
        let q = b.param("q", &[2, 3, 9, 8]).unwrap();
        let y = b
            .scaled_dot_product_attention(q, q, q, None, 0.0, true, None)
            .unwrap();
        let (mut exec, gq) = sum_and_first_gradient(b, y);
        let names = kernel_names(&exec);
        assert!(!names.contains(&"Cast"), "{precision:?}: {names:?}");
        for info in exec.node_infos() {
            if info.name.starts_with("Attention") {
                assert_eq!(info.dtype, want, "{precision:?}: {}", info.name);
            }
        }
        exec.set("q", &randn(&[2, 3, 9, 8], 5)).unwrap();
        exec.run().unwrap();
        for v in [y, gq] {
            let name = exec.graph().value(v).name.clone();
            let t = exec.get(&name).unwrap().unwrap();
            assert_eq!(t.dtype(), DType::F32, "{precision:?}: {name}");
        }
    }
}

#[test]
fn autocast_matmul_of_two_activations_runs_bf16_products_and_f32_gradients() {
    let run = |precision: Precision| {
        let mut b = GraphBuilder::new(Mode::Train, DType::F32);
        b.set_precision(precision);
        let q = b.param("q", &[2, 3, 6, 8]).unwrap();
        let k = b.param("k", &[2, 3, 6, 8]).unwrap();
        let kt = b.transpose(k, 2, 3).unwrap();
        let scores = b.matmul(q, kt).unwrap();
        let (mut exec, gq) = sum_and_first_gradient(b, scores);
        assert!(
            !kernel_names(&exec).contains(&"Cast"),
            "no cast of activations"
        );
        let dtypes: Vec<DType> = exec
            .node_infos()
            .iter()
            .filter(|i| i.name.starts_with("MatMul"))
            .map(|i| i.dtype)
            .collect();
        exec.set("q", &randn(&[2, 3, 6, 8], 6)).unwrap();
        exec.set("k", &randn(&[2, 3, 6, 8], 7)).unwrap();
        exec.run().unwrap();
        let name = exec.graph().value(gq).name.clone();
        let g = exec.get(&name).unwrap().unwrap().clone();
        assert_eq!(g.dtype(), DType::F32);
        (dtypes, g)
    };
    let (low, g_low) = run(Precision::Bf16Autocast);
    let (full, g_full) = run(Precision::F32);
    assert_eq!(low.len(), 3, "the product and both gradients: {low:?}");
    assert!(low.iter().all(|&d| d == DType::BF16), "{low:?}");
    assert!(full.iter().all(|&d| d == DType::F32), "{full:?}");
    let diff = (g_low - &g_full).unwrap().abs().unwrap().max_all().unwrap();
    let scale = g_full.abs().unwrap().max_all().unwrap();
    let (diff, scale) = (
        diff.to_scalar::<f32>().unwrap(),
        scale.to_scalar::<f32>().unwrap(),
    );
    assert!(
        diff > 0.0 && diff < 2f32.powi(-7) * scale,
        "{diff} of {scale}"
    );
}
