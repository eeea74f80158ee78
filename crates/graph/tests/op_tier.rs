//! The second op tier through the graph: every new op's backward rule checked by finite
//! differences on a small f64 net whose loss is a sum of losses (cross-entropy, MSE and
//! BCE); Adam/AdamW with parameter groups and clipping in the optimizer phase; dropout;
//! a user's custom op; and the errors of misuse.

mod common;

use candle_core::{DType, Device, Tensor};
use common::assert_mentions;
use wick_graph::nodes::optim::{Optimizer, OptimizerConfig, ParamSelector};
use wick_graph::{Executor, GraphBuilder, GraphError, Mode, Result, ValueId, ValueKind};
use wick_ops::{AdamParams, BinaryOp};

const BATCH: usize = 2;

/// A net touching every new op: linear → reshape to a feature map → group norm → SiLU →
/// squeeze-excitation (channel mean as a 1x1 average, hardsigmoid, broadcasting mul) →
/// concat with a GELU branch → permute to channels-last → layer norm → hardswish → permute
/// back → sub/div by parameters → flatten → three heads: cross-entropy on softmax-free
/// logits, MSE on tanh'd logits, BCE on LeakyReLU'd logits; the loss is CE + 0.5·MSE +
/// BCE scaled.
fn tier_net(b: &mut GraphBuilder, dtype: DType) -> Result<ValueId> {
    let x = b.input("x", &[BATCH, 6], dtype)?;
    let labels = b.input("labels", &[BATCH], DType::I64)?;
    let target = b.input("target", &[BATCH, 3], dtype)?;
    let w = b.param("lin.weight", &[4 * 3 * 3, 6])?;
    let h = b.linear(x, w, None)?;
    let h = b.reshape(h, &[BATCH, 4, 3, 3])?;
    let gw = b.param("gn.weight", &[4])?;
    let gb = b.param("gn.bias", &[4])?;
    let h = b.group_norm(h, 2, Some(gw), Some(gb), 1e-5)?;
    let h = b.silu(h)?;
    let s = b.global_avg_pool(h)?;
    let s = b.hardsigmoid(s)?;
    let h = b.mul(h, s)?;
    let branch = b.gelu(h)?;
    let h = b.concat(&[h, branch], 1)?;
    let h = b.permute(h, &[0, 2, 3, 1])?;
    let lw = b.param("ln.weight", &[8])?;
    let lb = b.param("ln.bias", &[8])?;
    let h = b.layer_norm(h, Some(lw), Some(lb), 1e-6)?;
    let h = b.hardswish(h)?;
    let h = b.transpose(h, 1, 3)?;
    let h = b.transpose(h, 2, 3)?;
    let shift = b.param("shift", &[8, 1, 1])?;
    let h = b.sub(h, shift)?;
    let div = b.param("div", &[8, 1, 1])?;
    let h = b.div(h, div)?;
    let h = b.flatten(h)?;
    let fw = b.param("fc.weight", &[3, 72])?;
    let logits = b.linear(h, fw, None)?;
    let ce = b.cross_entropy(logits, labels)?;
    let t = b.tanh(logits)?;
    let mse = b.mse_loss(t, target)?;
    let mse = b.scale(mse, 0.5)?;
    let lr = b.leaky_relu(logits, 0.1)?;
    let sig = b.sigmoid(target)?;
    let bce = b.bce_with_logits(lr, sig)?;
    let sm = b.softmax(logits, 1)?;
    let sm = b.sigmoid(sm)?;
    let soft = b.mse_loss(sm, sig)?;
    let total = b.add(ce, mse)?;
    let total = b.add(total, bce)?;
    let total = b.broadcast_add(total, soft)?;
    b.output(total);
    Ok(total)
}

fn feed(exec: &mut Executor, dtype: DType) {
    let cpu = Device::Cpu;
    let x = Tensor::from_vec(common::uniform(90, BATCH * 6), (BATCH, 6), &cpu).unwrap();
    let t = Tensor::from_vec(common::uniform(91, BATCH * 3), (BATCH, 3), &cpu).unwrap();
    exec.set("x", &x.to_dtype(dtype).unwrap()).unwrap();
    exec.set("target", &t.to_dtype(dtype).unwrap()).unwrap();
    exec.set("labels", &Tensor::new(&[2i64, 0], &cpu).unwrap())
        .unwrap();
}

fn init_params(exec: &mut Executor, dtype: DType) {
    let params: Vec<_> = exec.graph().values_of(ValueKind::Param).collect();
    for (i, p) in params.into_iter().enumerate() {
        let info = exec.graph().value(p).clone();
        let n = info.shape.iter().product();
        let mut v = common::uniform(100 + i as u64, n);
        if info.name == "div" {
            v.iter_mut().for_each(|x| *x = 1.5 + *x * 0.5);
        }
        let t = Tensor::from_vec(v, info.shape.as_slice(), &Device::Cpu).unwrap();
        exec.set(&info.name, &t.to_dtype(dtype).unwrap()).unwrap();
    }
}

/// Checks every parameter's gradient of `build`'s loss against central differences
/// (every `step`-th element), on graphs in f64 set up by `setup`; returns how many
/// parameters have a gradient.
fn assert_gradients_match_finite_differences(
    build: impl Fn(&mut GraphBuilder) -> ValueId,
    setup: impl Fn(&mut Executor),
    step: usize,
) -> usize {
    let cpu = Device::Cpu;
    let mut b = GraphBuilder::new(Mode::Train, DType::F64);
    let loss = build(&mut b);
    let grads = b.backward(loss).unwrap();
    let pairs: Vec<_> = grads.iter().collect();
    pairs.iter().for_each(|(_, g)| b.output(*g));
    let mut exec = Executor::new(b.finish(), &cpu);
    setup(&mut exec);
    exec.run().unwrap();
    let mut fb = GraphBuilder::new(Mode::Train, DType::F64);
    let floss = build(&mut fb);
    fb.output(floss);
    let mut fwd = Executor::new(fb.finish(), &cpu);
    setup(&mut fwd);
    let values = |t: &Tensor| -> Vec<f64> { t.flatten_all().unwrap().to_vec1().unwrap() };
    for (p, g) in &pairs {
        let info = exec.graph().value(*p).clone();
        let base = values(exec.get(&info.name).unwrap().unwrap());
        let analytic = values(exec.value(*g).unwrap());
        let scale = analytic.iter().fold(1e-3f64, |m, v| m.max(v.abs()));
        let mut worst: f64 = 0.0;
        for i in (0..base.len()).step_by(step) {
            let mut at = |d: f64| {
                let mut v = base.clone();
                v[i] += d;
                fwd.set(
                    &info.name,
                    &Tensor::from_vec(v, info.shape.as_slice(), &cpu).unwrap(),
                )
                .unwrap();
                fwd.run().unwrap();
                fwd.value(floss).unwrap().to_scalar::<f64>().unwrap()
            };
            let numeric = (at(1e-6) - at(-1e-6)) / 2e-6;
            worst = worst.max((numeric - analytic[i]).abs() / scale);
        }
        fwd.set(
            &info.name,
            &Tensor::from_vec(base, info.shape.as_slice(), &cpu).unwrap(),
        )
        .unwrap();
        assert!(
            worst < 1e-6,
            "{}: finite differences differ by {worst:.2e} (relative)",
            info.name
        );
    }
    pairs.len()
}

#[test]
fn every_new_backward_rule_matches_finite_differences_from_a_sum_of_losses() {
    let setup = |e: &mut Executor| {
        init_params(e, DType::F64);
        feed(e, DType::F64);
    };
    let build = |b: &mut GraphBuilder| tier_net(b, DType::F64).unwrap();
    let params = assert_gradients_match_finite_differences(build, setup, 1);
    assert_eq!(params, 8, "every parameter has a gradient");
}

/// A training graph of an input `x` times a parameter `w`, both of `shape`, and a target
/// `t` like them: the builder and `[x, x * w, t]`.
fn x_times_w(shape: &[usize]) -> (GraphBuilder, [ValueId; 3]) {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let x = b.input("x", shape, DType::F32).unwrap();
    let w = b.param("w", shape).unwrap();
    let y = b.mul(x, w).unwrap();
    let t = b.input("t", shape, DType::F32).unwrap();
    (b, [x, y, t])
}

#[test]
fn the_loss_of_backward_must_be_a_scalar_that_a_parameter_reaches() {
    let (mut b, [x, y, t]) = x_times_w(&[2, 3]);
    let err = b.backward(y).unwrap_err().to_string();
    assert_mentions(&err, &["must be a scalar", "[2, 3]"]);
    let no_param = b.mse_loss(x, t).unwrap();
    let err = b.backward(no_param).unwrap_err().to_string();
    assert!(err.contains("no parameter flows into"), "{err}");
    let err = b.backward(x).unwrap_err().to_string();
    assert!(err.contains("not the output of a recorded op"), "{err}");
}

/// A one-layer regression trained by `optimizer`: (graph executor, weight, bias, grads kept).
fn regression(config: &OptimizerConfig) -> (Executor, Vec<ValueId>) {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let x = b.input("x", &[4, 3], DType::F32).unwrap();
    let t = b.input("t", &[4, 2], DType::F32).unwrap();
    let w = b.param("fc.weight", &[2, 3]).unwrap();
    let bias = b.param("fc.bias", &[2]).unwrap();
    let y = b.linear(x, w, Some(bias)).unwrap();
    let loss = b.mse_loss(y, t).unwrap();
    let grads = b.backward(loss).unwrap();
    let gs: Vec<ValueId> = grads.iter().map(|(_, g)| g).collect();
    gs.iter().for_each(|g| b.output(*g));
    b.optimize(&grads, config).unwrap();
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    let cpu = Device::Cpu;
    let data = |seed, shape: &[usize]| {
        let n = shape.iter().product();
        Tensor::from_vec(common::uniform(seed, n), shape, &cpu)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
    };
    exec.set("fc.weight", &data(1, &[2, 3])).unwrap();
    exec.set("fc.bias", &data(2, &[2])).unwrap();
    exec.set("x", &(data(3, &[4, 3]) * 4.0).unwrap()).unwrap();
    exec.set("t", &data(4, &[4, 2])).unwrap();
    (exec, gs)
}

#[test]
fn adamw_in_the_graph_follows_the_kernel_with_groups_and_clipping() {
    let adamw = AdamParams::adamw(0.05).with_weight_decay(0.1);
    let config = OptimizerConfig::from(Optimizer::Adam(adamw))
        .no_weight_decay_on(ParamSelector::OneDimensional)
        .clip_grad_norm(0.5);
    let (mut exec, grads) = regression(&config);
    let names = ["fc.weight", "fc.bias"];
    let mut expected: Vec<Tensor> = names
        .iter()
        .map(|n| exec.get(n).unwrap().unwrap().copy().unwrap())
        .collect();
    let mut moments: Vec<Option<(Tensor, Tensor)>> = vec![None, None];
    for step in 0..3i64 {
        exec.set("step", &Tensor::new(step, &Device::Cpu).unwrap())
            .unwrap();
        exec.run().unwrap();
        let g: Vec<Tensor> = grads
            .iter()
            .map(|g| exec.value(*g).unwrap().copy().unwrap())
            .collect();
        let (_, coef) = wick_ops::optim::clip_factor(&[&g[0], &g[1]], 0.5).unwrap();
        assert!(coef < 1.0, "the test's gradients are clipped");
        for i in 0..2 {
            let p = if i == 1 {
                AdamParams {
                    weight_decay: 0.0,
                    ..adamw
                }
            } else {
                adamw
            };
            let gi = wick_ops::broadcast::scale(&g[i], coef).unwrap();
            let m = moments[i].clone();
            let (np, nm, nv) = wick_ops::optim::adam::adam_step(
                &expected[i],
                &gi,
                m.as_ref().map(|m| &m.0),
                m.as_ref().map(|m| &m.1),
                step as u64 + 1,
                &p,
            )
            .unwrap();
            let got = exec.get(names[i]).unwrap().unwrap();
            assert_eq!(
                wick_ops::max_abs_diff(got, &np).unwrap(),
                0.0,
                "{} at step {step}",
                names[i]
            );
            let state = exec
                .get(&format!("{}.exp_avg_sq", names[i]))
                .unwrap()
                .unwrap();
            assert_eq!(wick_ops::max_abs_diff(state, &nv).unwrap(), 0.0);
            expected[i] = np;
            moments[i] = Some((nm, nv));
        }
    }
    let norm = exec.graph().find("grad_norm#7");
    let kernels: Vec<_> = exec
        .graph()
        .nodes()
        .iter()
        .map(|n| n.kernel().name(wick_ops::DeviceKind::Cpu))
        .collect();
    assert!(
        kernels.contains(&"ClipGradNorm") && kernels.contains(&"AdamUpdate"),
        "{kernels:?} {norm:?}"
    );
    assert_eq!(
        exec.graph().optimizer_state().len(),
        4,
        "exp_avg and exp_avg_sq per parameter"
    );
}

#[test]
fn a_second_optimizer_call_says_what_is_wrong() {
    let (mut b, [_, y, t]) = x_times_w(&[1, 2]);
    let loss = b.mse_loss(y, t).unwrap();
    let early = b.optimize(
        &Default::default(),
        &Optimizer::Adam(AdamParams::adam(0.1)).into(),
    );
    assert!(early
        .unwrap_err()
        .to_string()
        .contains("call backward(loss) first"));
    let grads = b.backward(loss).unwrap();
    b.sgd(&grads, Default::default()).unwrap();
    let err = b
        .optimize(&grads, &Optimizer::Adam(AdamParams::adam(0.1)).into())
        .unwrap_err();
    assert!(err.to_string().contains("already added"), "{err}");
}

#[test]
fn adam_without_the_step_input_is_an_error_naming_it() {
    let (mut exec, _) = regression(&Optimizer::Adam(AdamParams::adam(0.1)).into());
    let err = exec.run().unwrap_err().to_string();
    assert_mentions(&err, &["`step`", "AdamUpdate"]);
}

#[test]
fn reading_a_freed_intermediate_is_an_error_naming_it() {
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let x = b.input("x", &[2], DType::F32).unwrap();
    let y = b.sigmoid(x).unwrap();
    let z = b.scale(y, 2.0).unwrap();
    b.output(z);
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    assert!(
        exec.get_id(z).unwrap().is_none(),
        "an output before the first run"
    );
    let err = exec.value(z).unwrap_err().to_string();
    let name = &exec.graph().value(z).name;
    assert!(
        err.contains(&format!("`{name}` has no tensor yet")),
        "{err}"
    );
    exec.set("x", &Tensor::new(&[0f32, 1.0], &Device::Cpu).unwrap())
        .unwrap();
    exec.run().unwrap();
    assert_eq!(exec.value(z).unwrap().to_vec1::<f32>().unwrap()[0], 1.0);
    let err = exec.get_id(y).unwrap_err();
    assert!(
        matches!(&err, GraphError::Freed(n) if n.starts_with("Sigmoid#")),
        "{err}"
    );
    assert!(err.to_string().contains("GraphBuilder::output"), "{err}");
}

#[test]
fn dropout_is_seeded_by_step_train_only_and_its_gradient_uses_the_mask() {
    let build = |mode| {
        let mut b = GraphBuilder::new(mode, DType::F32);
        let x = b.param("x", &[64, 64]).unwrap();
        let y = b.dropout(x, 0.25).unwrap();
        let t = b.input("t", &[64, 64], DType::F32).unwrap();
        let loss = b.mse_loss(y, t).unwrap();
        b.output(y);
        let grads = (mode == Mode::Train).then(|| b.backward(loss).unwrap());
        if let Some(g) = &grads {
            b.output(g.get(x).unwrap());
        }
        (b.finish(), y, grads.map(|g| g.get(x).unwrap()))
    };
    let (graph, y, gx) = build(Mode::Train);
    let mut exec = Executor::new(graph, &Device::Cpu);
    let ones = Tensor::ones((64, 64), DType::F32, &Device::Cpu).unwrap();
    exec.set("x", &ones).unwrap();
    exec.set("t", &ones.zeros_like().unwrap()).unwrap();
    let mut run_at = |step: i64| -> (Vec<f32>, Vec<f32>) {
        exec.set("step", &Tensor::new(step, &Device::Cpu).unwrap())
            .unwrap();
        exec.run().unwrap();
        let out = |v| {
            exec.value(v)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        };
        (out(y), out(gx.unwrap()))
    };
    let (a, ga) = run_at(3);
    let (b, _) = run_at(4);
    let (again, _) = run_at(3);
    assert_eq!(a, again, "the mask is a function of the step");
    assert_ne!(a, b, "another step draws another mask");
    let dropped = a.iter().filter(|v| **v == 0.0).count() as f64 / a.len() as f64;
    assert!((dropped - 0.25).abs() < 0.03, "dropped {dropped}");
    assert!(a.iter().all(|v| *v == 0.0 || *v == 1.0 / 0.75));
    // d mse(y, 0) / dx = 2 y / n · mask, zero exactly where dropped.
    for (y, g) in a.iter().zip(&ga) {
        assert_eq!(*y == 0.0, *g == 0.0);
    }
    let (eval, y_eval, _) = build(Mode::Eval);
    assert!(eval
        .nodes()
        .iter()
        .all(|n| n.kernel() != wick_ops::Kernel::Dropout));
    assert_eq!(
        eval.value(y_eval).name,
        "x",
        "dropout is the identity in eval graphs"
    );
}

#[test]
fn broadcasting_errors_name_the_layer_and_shapes() {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let x = b.input("x", &[2, 3, 4, 4], DType::F32).unwrap();
    let s = b.param("s", &[2, 4, 1, 1]).unwrap();
    let err = b
        .in_layer("se", |b| b.binary(BinaryOp::Mul, x, s))
        .unwrap_err()
        .to_string();
    for needle in ["Mul", "se", "[2, 3, 4, 4]", "[2, 4, 1, 1]"] {
        assert!(err.contains(needle), "{needle} in {err}");
    }
}

#[test]
fn a_training_graph_and_an_eval_graph_share_weights_in_one_call() {
    use wick_graph::{LoadMode, LoadReport};
    let (mut train, _) = regression(&Optimizer::Adam(AdamParams::adam(0.1)).into());
    train
        .set("step", &Tensor::new(0i64, &Device::Cpu).unwrap())
        .unwrap();
    train.run().unwrap();
    let state: std::collections::HashMap<String, Tensor> =
        train.state_dict().unwrap().into_iter().collect();
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let x = b.input("x", &[4, 3], DType::F32).unwrap();
    let w = b.param("fc.weight", &[2, 3]).unwrap();
    let bias = b.param("fc.bias", &[2]).unwrap();
    let extra = b.param("head.weight", &[2]).unwrap();
    let y = b.linear(x, w, Some(bias)).unwrap();
    let y = b.mul(y, extra).unwrap();
    b.output(y);
    let mut eval = Executor::new(b.finish(), &Device::Cpu);
    let err = eval
        .load_state_dict(&state, LoadMode::Strict)
        .unwrap_err()
        .to_string();
    assert_mentions(&err, &["head.weight", "fc.weight.exp_avg"]);
    assert!(
        eval.get("fc.weight").unwrap().is_none(),
        "a refused strict load sets nothing"
    );
    let LoadReport {
        loaded,
        missing,
        unexpected,
    } = eval.load_state_dict(&state, LoadMode::NonStrict).unwrap();
    assert_eq!(loaded.len(), 2);
    assert_eq!(missing, ["head.weight"]);
    assert_eq!(
        unexpected,
        [
            "fc.bias.exp_avg",
            "fc.bias.exp_avg_sq",
            "fc.weight.exp_avg",
            "fc.weight.exp_avg_sq"
        ]
    );
    let same = wick_ops::max_abs_diff(eval.get("fc.weight").unwrap().unwrap(), &state["fc.weight"])
        .unwrap();
    assert_eq!(same, 0.0);
    let wrong: std::collections::HashMap<String, Tensor> = [(
        "fc.bias".to_string(),
        Tensor::zeros(3, DType::F32, &Device::Cpu).unwrap(),
    )]
    .into();
    let err = eval
        .load_state_dict(&wrong, LoadMode::NonStrict)
        .unwrap_err()
        .to_string();
    assert_mentions(&err, &["fc.bias", "[2]", "[3]"]);
}

/// A decoder: transposed convolution (stride 2, output padding, groups, bias), nearest
/// and bilinear upsampling, MSE against a target.
fn decoder(b: &mut GraphBuilder) -> ValueId {
    use wick_ops::conv::Conv2dParams;
    use wick_ops::resample::UpsampleMode;
    let x = b.param("x", &[2, 4, 3, 4]).unwrap(); // a parameter, so its gradient is checked too
    let t = b.input("t", &[2, 6, 11, 13], DType::F64).unwrap();
    let w = b.param("up.weight", &[4, 3, 3, 3]).unwrap();
    let bias = b.param("up.bias", &[6]).unwrap();
    let p = Conv2dParams::new(2, 1).with_groups(2);
    let h = b.conv_transpose2d(x, w, Some(bias), p, [1, 0]).unwrap();
    let h = b.upsample(h, 8, 9, UpsampleMode::Nearest).unwrap();
    let h = b.tanh(h).unwrap();
    let h = b.upsample(h, 11, 13, UpsampleMode::Bilinear).unwrap();
    let loss = b.mse_loss(h, t).unwrap();
    b.output(loss);
    loss
}

#[test]
fn decoder_gradients_match_finite_differences() {
    let setup = |e: &mut Executor| {
        let cpu = Device::Cpu;
        let data = |seed, shape: &[usize]| {
            Tensor::from_vec(common::uniform(seed, shape.iter().product()), shape, &cpu).unwrap()
        };
        e.set("x", &data(1, &[2, 4, 3, 4])).unwrap();
        e.set("t", &data(2, &[2, 6, 11, 13])).unwrap();
        e.set("up.weight", &data(3, &[4, 3, 3, 3])).unwrap();
        e.set("up.bias", &data(4, &[6])).unwrap();
    };
    assert_eq!(
        assert_gradients_match_finite_differences(decoder, setup, 5),
        3
    );
}
