//! Modules as PyTorch's compose: a module applied twice shares its parameters (one set of
//! weights, whose gradient sums both uses; a shape that differs, or a layer with running
//! statistics applied twice, is an error naming the entry); a frozen backbone in eval
//! mode gets no gradient nodes, no updates and no batch statistics.

mod common;

use candle_core::{DType, Device, Tensor};
use common::assert_mentions;
use wick_graph::{Executor, GraphBuilder, Mode, ParamSelector, Phase};
use wick_models::nn::{Init, Layers};
use wick_models::{ModelConfig, Stem};
use wick_ops::Kernel;

fn run_grads(shared: bool) -> (usize, Vec<Vec<f64>>, Vec<f64>) {
    let cpu = Device::Cpu;
    let mut b = GraphBuilder::new(Mode::Train, DType::F64);
    let x1 = b.input("x1", &[2, 3], DType::F64).unwrap();
    let x2 = b.input("x2", &[2, 3], DType::F64).unwrap();
    let mut nn = Layers::new(&mut b);
    let loss = if shared {
        // sum(fc(x1)) + sum(fc(x2)): the weight's gradient is that of fc(x1 + x2), the
        // bias's twice one use's.
        let y1 = nn.linear("fc", x1, 3, 4, Init::LinearDefault).unwrap();
        let y2 = nn.linear("fc", x2, 3, 4, Init::LinearDefault).unwrap();
        let b = nn.builder();
        let (s1, s2) = (
            b.sum(y1, &[], false).unwrap(),
            b.sum(y2, &[], false).unwrap(),
        );
        b.add(s1, s2).unwrap()
    } else {
        let x = nn.builder().broadcast_add(x1, x2).unwrap();
        let y = nn.linear("fc", x, 3, 4, Init::LinearDefault).unwrap();
        let s = nn.builder().sum(y, &[], false).unwrap();
        nn.builder().mul_scalar(s, 1.0).unwrap()
    };
    let specs = nn.into_specs();
    let grads = b.backward(loss).unwrap();
    let params: Vec<_> = grads.iter().collect();
    params.iter().for_each(|(_, g)| b.output(*g));
    let mut exec = Executor::new(b.finish(), &cpu);
    for (name, t) in wick_models::nn::initial_state(&specs, 3).unwrap() {
        exec.set(&name, &t.to_dtype(DType::F64).unwrap()).unwrap();
    }
    let x1v = Tensor::new(&[[1.0f64, 2.0, -1.0], [0.5, 0.0, 3.0]], &cpu).unwrap();
    exec.set("x1", &x1v).unwrap();
    exec.set("x2", &(x1v.clone() * -0.25).unwrap()).unwrap();
    exec.run().unwrap();
    let weight = exec.value(params[0].1).unwrap().to_vec2().unwrap();
    let bias = exec.value(params[1].1).unwrap().to_vec1().unwrap();
    (specs.len(), weight, bias)
}

#[test]
fn a_linear_applied_twice_holds_one_weight_whose_gradient_sums_both_uses() {
    let (entries, w_shared, b_shared) = run_grads(true);
    let (_, w_once, b_once) = run_grads(false);
    assert_eq!(entries, 2, "one weight and one bias");
    for (a, b) in w_shared.iter().flatten().zip(w_once.iter().flatten()) {
        assert!((a - b).abs() < 1e-12, "{a} vs {b}");
    }
    assert_eq!(b_shared, b_once.iter().map(|v| 2.0 * v).collect::<Vec<_>>());
}

#[test]
fn sharing_with_another_shape_or_running_statistics_is_an_error() {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let x = b.input("x", &[2, 3], DType::F32).unwrap();
    let mut nn = Layers::new(&mut b);
    nn.linear("fc", x, 3, 4, Init::LinearDefault).unwrap();
    let err = nn
        .linear("fc", x, 3, 5, Init::LinearDefault)
        .unwrap_err()
        .to_string();
    assert_mentions(&err, &["fc.weight", "[5, 3]", "[4, 3]"]);
    let img = nn
        .builder()
        .input("img", &[1, 2, 4, 4], DType::F32)
        .unwrap();
    nn.batch_norm("bn", img, 2).unwrap();
    let err = nn.batch_norm("bn", img, 2).unwrap_err().to_string();
    assert_mentions(&err, &["bn.running_mean", "applied twice"]);
}

/// A ResNet-18 training step, frozen but for `fc` and in eval mode when `frozen`.
fn resnet_step(frozen: bool) -> wick_graph::Graph {
    let config = ModelConfig::by_name("resnet18", Stem::Cifar, Some(10)).unwrap();
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let images = b.input("images", &[2, 3, 8, 8], DType::F32).unwrap();
    let labels = b.input("labels", &[2], DType::I64).unwrap();
    let mut nn = Layers::new(&mut b);
    let logits = if frozen {
        nn.eval(|nn| config.record(nn, images)).unwrap()
    } else {
        config.record(&mut nn, images).unwrap()
    };
    let loss = b.cross_entropy(logits, labels).unwrap();
    if frozen {
        assert_eq!(b.freeze(&!ParamSelector::InLayer("fc".into())).unwrap(), 60);
    }
    let grads = b.backward(loss).unwrap();
    b.sgd(&grads, Default::default()).unwrap();
    let err = b.freeze(&ParamSelector::All).unwrap_err().to_string();
    assert!(err.contains("before backward"), "{err}");
    b.finish()
}

#[test]
fn a_frozen_eval_mode_backbone_records_no_backward_update_or_batch_statistics() {
    let count = |g: &wick_graph::Graph, f: &dyn Fn(&wick_graph::Node) -> bool| {
        g.nodes().iter().filter(|n| f(n)).count()
    };
    let full = resnet_step(false);
    let frozen = resnet_step(true);
    let kernel = |k: Kernel| move |n: &wick_graph::Node| n.op.kernel() == k;
    assert_eq!(count(&full, &kernel(Kernel::ConvBackwardFilter)), 20);
    assert_eq!(count(&frozen, &kernel(Kernel::ConvBackwardFilter)), 0);
    assert_eq!(
        count(&frozen, &kernel(Kernel::ConvBackwardData)),
        0,
        "nothing below fc needs a gradient"
    );
    assert_eq!(count(&frozen, &kernel(Kernel::BatchNormForwardTraining)), 0);
    assert_eq!(
        count(&frozen, &kernel(Kernel::BatchNormForwardInference)),
        20
    );
    // Only fc's weight and bias are updated; backward is the loss's and fc's.
    let updates = count(&frozen, &|n| n.phase == Phase::Optimizer);
    assert_eq!(updates, 2);
    let backward = count(&frozen, &|n| n.phase == Phase::Backward);
    assert!(backward <= 3, "{backward} backward nodes");
    assert!(count(&full, &|n| n.phase == Phase::Backward) > 60);
}

/// A GAN's losses on one graph: the discriminator `D` applied to the real batch, to the
/// detached fake batch and to the fake batch (one set of weights).
struct Gan {
    graph: GraphBuilder,
    d_loss: wick_graph::ValueId,
    g_loss: wick_graph::ValueId,
    specs: Vec<wick_models::nn::TensorSpec>,
}

fn gan() -> Gan {
    let mut b = GraphBuilder::new(Mode::Train, DType::F64);
    let real = b.input("real", &[4, 2], DType::F64).unwrap();
    let z = b.input("z", &[4, 3], DType::F64).unwrap();
    let mut nn = Layers::new(&mut b);
    let d = |nn: &mut Layers, x| -> wick_graph::Result<wick_graph::ValueId> {
        nn.scope("D", |nn| {
            let h = nn.linear("0", x, 2, 8, Init::LinearDefault)?;
            let h = nn.builder().leaky_relu(h, 0.2)?;
            nn.linear("2", h, 8, 1, Init::LinearDefault)
        })
    };
    let fake = nn
        .scope("G", |nn| {
            let h = nn.linear("0", z, 3, 8, Init::LinearDefault)?;
            let h = nn.builder().tanh(h)?;
            nn.linear("2", h, 8, 2, Init::LinearDefault)
        })
        .unwrap();
    let on_real = d(&mut nn, real).unwrap();
    let detached = nn.builder().detach(fake).unwrap();
    let on_fake = d(&mut nn, detached).unwrap();
    let on_fake_for_g = d(&mut nn, fake).unwrap();
    let specs = nn.into_specs();
    let ones = b.ones_like(on_real).unwrap();
    let zeros = b.zeros_like(on_real).unwrap();
    let l_real = b.bce_with_logits(on_real, ones).unwrap();
    let l_fake = b.bce_with_logits(on_fake, zeros).unwrap();
    let d_loss = b.add(l_real, l_fake).unwrap();
    let g_loss = b.bce_with_logits(on_fake_for_g, ones).unwrap();
    Gan {
        graph: b,
        d_loss,
        g_loss,
        specs,
    }
}

fn gan_grads(which: &[&str]) -> Vec<(String, Vec<f64>)> {
    let mut g = gan();
    let b = &mut g.graph;
    let mut wanted = Vec::new();
    for w in which {
        let (loss, layer) = if *w == "D" {
            (g.d_loss, "D")
        } else {
            (g.g_loss, "G")
        };
        let grads = b
            .backward_of(loss, &ParamSelector::InLayer(layer.into()))
            .unwrap();
        for (p, gv) in grads.iter() {
            b.output(gv);
            wanted.push((b.graph().value(p).name.clone(), gv));
        }
    }
    let graph = std::mem::replace(b, GraphBuilder::new(Mode::Train, DType::F64)).finish();
    let mut exec = Executor::new(graph, &Device::Cpu);
    for (name, t) in wick_models::nn::initial_state(&g.specs, 5).unwrap() {
        exec.set(&name, &t.to_dtype(DType::F64).unwrap()).unwrap();
    }
    let cpu = Device::Cpu;
    exec.set(
        "real",
        &Tensor::new(&[[1.0f64, 2.0], [1.5, 2.5], [0.5, 1.0], [2.0, 3.0]], &cpu).unwrap(),
    )
    .unwrap();
    let z: Vec<f64> = (0..12).map(|i| ((i * 7) % 5) as f64 / 5.0 - 0.4).collect();
    exec.set("z", &Tensor::from_vec(z, (4, 3), &cpu).unwrap())
        .unwrap();
    exec.run().unwrap();
    wanted
        .into_iter()
        .map(|(n, v)| {
            (
                n,
                exec.value(v)
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1()
                    .unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_gan_holds_two_backward_passes_with_their_own_optimizers_in_one_graph() {
    // Both passes in one graph give each network the gradients a graph with its loss alone gives.
    let both = gan_grads(&["D", "G"]);
    let mut alone = gan_grads(&["D"]);
    alone.extend(gan_grads(&["G"]));
    assert_eq!(both.len(), 8, "D's and G's two weights and biases each");
    assert_eq!(both, alone);
    assert!(both.iter().take(4).all(|(n, _)| n.starts_with("D.")));
    // Each optimizer updates its own network; a parameter takes one optimizer, and every
    // backward pass comes before the first optimizer.
    let mut g = gan();
    let b = &mut g.graph;
    let dg = b
        .backward_of(g.d_loss, &ParamSelector::InLayer("D".into()))
        .unwrap();
    let gg = b
        .backward_of(g.g_loss, &ParamSelector::InLayer("G".into()))
        .unwrap();
    b.sgd(&dg, Default::default()).unwrap();
    let err = b.sgd(&dg, Default::default()).unwrap_err().to_string();
    assert_mentions(&err, &["`D.0.weight`", "already added"]);
    b.sgd(&gg, Default::default()).unwrap();
    let err = b.backward(g.g_loss).unwrap_err().to_string();
    assert!(err.contains("before the first optimize"), "{err}");
}

#[test]
fn a_transposed_convolution_layer_has_pytorchs_names_shapes_and_init_bound() {
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let z = b.input("z", &[2, 8, 4, 4], DType::F32).unwrap();
    let mut nn = Layers::new(&mut b);
    let conv = wick_models::nn::Conv::new(8, 4, 3)
        .stride(2)
        .padding(1)
        .bias();
    let y = nn.conv_transpose2d("up", z, conv, 1).unwrap();
    assert_eq!(
        nn.builder().shape(y),
        &[2, 4, 8, 8],
        "(4 - 1)·2 - 2 + 3 + 1"
    );
    let specs = nn.into_specs();
    let shapes: Vec<_> = specs
        .iter()
        .map(|s| (s.name.as_str(), s.shape.clone()))
        .collect();
    assert_eq!(
        shapes,
        [("up.weight", vec![8, 4, 3, 3]), ("up.bias", vec![4])]
    );
    let w = &wick_models::nn::initial_state(&specs, 1).unwrap()["up.weight"];
    let max = w
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    let bound = 1.0 / ((4 * 3 * 3) as f32).sqrt();
    assert!(max <= bound && max > 0.8 * bound, "{max} within ±{bound}");
}

#[test]
fn an_rms_norm_layer_has_pytorchs_name_init_and_default_eps() {
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let x = b.input("x", &[2, 4], DType::F32).unwrap();
    let mut nn = Layers::new(&mut b);
    let y = nn.rms_norm("norm", x, 4, None).unwrap();
    let err = nn.rms_norm("bad", x, 3, None).unwrap_err().to_string();
    assert_mentions(&err, &["rms_norm", "bad", "weight", "[3]", "[4]"]);
    let specs: Vec<_> = nn
        .into_specs()
        .into_iter()
        .filter(|s| s.name.starts_with("norm"))
        .collect();
    assert_eq!(specs.len(), 1);
    assert_eq!(
        (specs[0].name.as_str(), specs[0].shape.clone()),
        ("norm.weight", vec![4])
    );
    b.output(y);
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    for (name, t) in wick_models::nn::initial_state(&specs, 0).unwrap() {
        assert_eq!(t.flatten_all().unwrap().to_vec1::<f32>().unwrap(), [1.0; 4]);
        exec.set(&name, &t).unwrap();
    }
    // The second row is small enough that the eps decides its scale: PyTorch's default,
    // float32's machine epsilon (1.19e-7), against mean(x²) = 1e-8.
    let rows = [[1.0f32, -2.0, 3.0, 0.5], [1e-4, -1e-4, 1e-4, -1e-4]];
    exec.set("x", &Tensor::new(&rows, &Device::Cpu).unwrap())
        .unwrap();
    exec.run().unwrap();
    let got = exec.value(y).unwrap().to_vec2::<f32>().unwrap();
    for (row, out) in rows.iter().zip(&got) {
        let ms = row.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>() / 4.0;
        let scale = 1.0 / (ms + f64::from(f32::EPSILON)).sqrt();
        for (v, o) in row.iter().zip(out) {
            let want = f64::from(*v) * scale;
            assert!(
                (f64::from(*o) - want).abs() <= 1e-6 * want.abs().max(1.0),
                "{o} vs {want}"
            );
        }
    }
}
