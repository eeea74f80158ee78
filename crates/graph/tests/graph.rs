//! The graph on a small residual conv net: OP_IDs and phases, liveness, gradients against
//! finite differences and the per-op kernels, inference graphs, errors, and training.

mod common;

use candle_core::{DType, Device, Tensor};
use common::*;
use wick_graph::{Executor, GraphBuilder, GraphError, Mode, Phase, ValueKind};
use wick_ops::{Conv2dParams, Kernel, SgdParams};

fn feed(exec: &mut Executor, dtype: DType, batch: usize, size: usize, classes: usize, seed: u64) {
    let imgs = Tensor::from_vec(
        uniform(seed, batch * 3 * size * size),
        (batch, 3, size, size),
        &Device::Cpu,
    )
    .unwrap()
    .to_dtype(dtype)
    .unwrap();
    let labels: Vec<u32> = (0..batch as u32).map(|i| i % classes as u32).collect();
    exec.set("images", &imgs).unwrap();
    exec.set("labels", &Tensor::new(labels, &Device::Cpu).unwrap())
        .unwrap();
}

/// The small training net (batch 2, 8x8, 3 classes) on the CPU with weights from seed 1,
/// and a batch from `batch_seed` fed when given.
fn initialised(batch_seed: Option<u64>) -> (Executor, SmallNet) {
    let (graph, net, _) = build(Mode::Train, DType::F32, 2, 8, 3);
    let mut exec = Executor::new(graph, &Device::Cpu);
    init(&mut exec, DType::F32, 1);
    if let Some(seed) = batch_seed {
        feed(&mut exec, DType::F32, 2, 8, 3, seed);
    }
    (exec, net)
}

#[test]
fn op_ids_follow_recording_order_and_phases_are_set_when_recorded() {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let net = small_net(&mut b, DType::F32, 2, 8, 3).unwrap();
    let n_forward = b.graph().nodes().len();
    let grads = b.backward(net.loss).unwrap();
    let n_backward = b.graph().nodes().len();
    b.sgd(
        &grads,
        SgdParams {
            lr: 0.1,
            momentum: 0.9,
            ..Default::default()
        },
    )
    .unwrap();
    let g = b.finish();
    let forward: Vec<Kernel> = g.nodes()[..n_forward]
        .iter()
        .map(|n| n.op.kernel())
        .collect();
    use Kernel::*;
    assert_eq!(
        forward,
        vec![
            ConvForward,
            BatchNormForwardTraining,
            ReLU,
            PoolingForward,
            ConvForward,
            BatchNormForwardTraining,
            ReLU,
            ConvForward,
            BatchNormForwardTraining,
            Add,
            ReLU,
            GlobalAvgPoolForward,
            Reshape,
            LinearForward,
            SoftmaxCrossEntropyForward
        ]
    );
    for (op_id, n) in g.nodes().iter().enumerate() {
        let expected = if op_id < n_forward {
            Phase::Forward
        } else if op_id < n_backward {
            Phase::Backward
        } else {
            Phase::Optimizer
        };
        assert_eq!(n.phase, expected, "OP_ID{op_id} {:?}", n.op);
    }
    let params = g.values_of(ValueKind::Param).count();
    assert_eq!(grads.len(), params);
    assert_eq!(
        g.nodes().len() - n_backward,
        params,
        "one fused update per parameter"
    );
    assert!(g.nodes()[n_backward..]
        .iter()
        .all(|n| n.op.kernel() == Kernel::SgdUpdate));
    // The residual input is read twice: its two gradients are summed.
    assert!(g
        .nodes()
        .iter()
        .any(|n| n.op.kernel() == Kernel::AccumulateGrad));
    // The executor names kernels by device.
    let exec = Executor::new(g, &Device::Cpu);
    assert_eq!(exec.node_infos()[0].name, "ConvForward");
    assert_eq!(exec.node_infos()[0].op_id, 0);
}

#[test]
fn gradients_match_finite_differences() {
    let (batch, size, classes) = (3, 6, 3);
    let (graph, net, grads) = build(Mode::Train, DType::F64, batch, size, classes);
    let grads = grads.unwrap();
    let mut b = GraphBuilder::new(Mode::Train, DType::F64);
    let _ = small_net(&mut b, DType::F64, batch, size, classes).unwrap();
    let forward_graph = b.finish();

    let mut g2 = graph.clone();
    for (_, g) in grads.iter() {
        g2.outputs_mut().push(g);
    }
    let mut exec = Executor::new(g2, &Device::Cpu);
    init(&mut exec, DType::F64, 7);
    feed(&mut exec, DType::F64, batch, size, classes, 99);
    let params = exec.state_dict().unwrap();
    exec.run().unwrap();

    let mut fwd = Executor::new(forward_graph, &Device::Cpu);
    let loss_at = |fwd: &mut Executor, name: &str, t: &Tensor| -> f64 {
        for (n, v) in &params {
            fwd.set(n, if n == name { t } else { v }).unwrap();
        }
        feed(fwd, DType::F64, batch, size, classes, 99);
        fwd.run().unwrap();
        fwd.value(net.loss).unwrap().to_scalar::<f64>().unwrap()
    };
    for name in [
        "stem.weight",
        "stem.bn.weight",
        "block.conv2.weight",
        "block.conv1.bn.bias",
        "fc.weight",
        "fc.bias",
    ] {
        let pid = exec.graph().find(name).unwrap();
        let analytic = exec
            .get_id(grads.get(pid).unwrap())
            .unwrap()
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f64>()
            .unwrap();
        let base = params.iter().find(|(n, _)| n == name).unwrap().1.clone();
        let shape = base.dims().to_vec();
        let flat = base.flatten_all().unwrap().to_vec1::<f64>().unwrap();
        let h = 1e-6;
        let scale = analytic.iter().fold(0f64, |m, v| m.max(v.abs()));
        for i in (0..flat.len()).step_by(flat.len().div_ceil(12)) {
            let mut v = flat.clone();
            v[i] += h;
            let plus = loss_at(
                &mut fwd,
                name,
                &Tensor::from_vec(v.clone(), shape.as_slice(), &Device::Cpu).unwrap(),
            );
            v[i] -= 2.0 * h;
            let minus = loss_at(
                &mut fwd,
                name,
                &Tensor::from_vec(v, shape.as_slice(), &Device::Cpu).unwrap(),
            );
            let numeric = (plus - minus) / (2.0 * h);
            assert!(
                (numeric - analytic[i]).abs() <= 1e-6 * scale.max(1e-3),
                "{name}[{i}]: graph {} vs finite difference {numeric}",
                analytic[i]
            );
        }
    }
}

#[test]
fn gradients_match_the_per_op_kernels_composed_by_hand() {
    use wick_ops::{conv, linear, loss, pool};
    let mut b = GraphBuilder::new(Mode::Train, DType::F64);
    let x = b.input("x", &[2, 2, 5, 5], DType::F64).unwrap();
    let y = b.input("y", &[2], DType::U32).unwrap();
    let w = b.param("w", &[3, 2, 3, 3]).unwrap();
    let fw = b.param("fw", &[4, 3]).unwrap();
    let h = b.conv2d(x, w, None, Conv2dParams::new(2, 1)).unwrap();
    let h = b.relu(h).unwrap();
    let h = b.global_avg_pool(h).unwrap();
    let h = b.flatten(h).unwrap();
    let logits = b.linear(h, fw, None).unwrap();
    let l = b.cross_entropy(logits, y).unwrap();
    let grads = b.backward(l).unwrap();
    let (gw, gfw) = (grads.get(w).unwrap(), grads.get(fw).unwrap());
    b.output(gw);
    b.output(gfw);
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    let xt = Tensor::from_vec(uniform(1, 100), (2, 2, 5, 5), &Device::Cpu).unwrap();
    let wt = Tensor::from_vec(uniform(2, 54), (3, 2, 3, 3), &Device::Cpu).unwrap();
    let fwt = Tensor::from_vec(uniform(3, 12), (4, 3), &Device::Cpu).unwrap();
    let yt = Tensor::new(&[1u32, 3], &Device::Cpu).unwrap();
    for (n, t) in [("x", &xt), ("w", &wt), ("fw", &fwt), ("y", &yt)] {
        exec.set(n, t).unwrap();
    }
    exec.run().unwrap();
    // The same chain, kernel by kernel.
    let p = Conv2dParams::new(2, 1);
    let c = conv::conv2d(&xt, &wt, None, &p).unwrap();
    let r = wick_ops::relu(&c).unwrap();
    let gap = pool::global_avg_pool(&r).unwrap();
    let flat = gap.reshape((2, 3)).unwrap();
    let lg = linear::linear(&flat, &fwt, None).unwrap();
    let dl =
        loss::cross_entropy_backward(&Tensor::new(1f64, &Device::Cpu).unwrap(), &lg, &yt).unwrap();
    let lgrads = linear::linear_backward(&dl, &flat, &fwt, false).unwrap();
    let dgap =
        pool::global_avg_pool_backward(&lgrads.x.reshape((2, 3, 1, 1)).unwrap(), r.dims()).unwrap();
    let dr = wick_ops::relu_backward(&dgap, &r).unwrap();
    let dw = conv::conv2d_backward_filter(&dr, &xt, wt.dims(), &p).unwrap();
    let diff = |a: &Tensor, b: &Tensor| wick_ops::max_abs_diff(a, b).unwrap();
    assert_eq!(diff(exec.value(gw).unwrap(), &dw), 0.0);
    assert_eq!(diff(exec.value(gfw).unwrap(), &lgrads.weight), 0.0);
}

#[test]
fn intermediates_are_freed_after_their_last_use_and_state_persists() {
    let (mut exec, net) = initialised(Some(5));
    let running_mean = |exec: &Executor| -> Vec<f32> {
        let t = exec.get("stem.bn.running_mean").unwrap().unwrap();
        t.to_vec1().unwrap()
    };
    let rm_before = running_mean(&exec);
    exec.run().unwrap();
    let g = exec.graph();
    for (i, v) in g.values().iter().enumerate() {
        let id = wick_graph::ValueId(i);
        let held = exec.get_id(id).ok().flatten().is_some();
        match v.kind {
            ValueKind::Intermediate if id == net.loss || id == net.logits => {
                assert!(held, "output {} kept", v.name)
            }
            ValueKind::Intermediate => {
                assert!(!held, "intermediate {} should have been freed", v.name)
            }
            _ => assert!(held, "{} must persist", v.name),
        }
    }
    let rm_after = running_mean(&exec);
    assert_ne!(
        rm_before, rm_after,
        "training-mode batch norm updates its running mean"
    );
    // Each value is freed by a node that touches it, and no later node reads it.
    let nodes = exec.graph().nodes();
    for (op_id, freed) in exec.graph().last_uses().iter().enumerate() {
        for v in freed {
            let touches = |n: &wick_graph::Node| n.inputs.contains(v) || n.outputs.contains(v);
            assert!(
                touches(&nodes[op_id]),
                "OP_ID{op_id} frees {v:?} it does not touch"
            );
            if let Some(later) = nodes[op_id + 1..].iter().position(|n| n.inputs.contains(v)) {
                panic!(
                    "{v:?} freed at OP_ID{op_id} but read by OP_ID{}",
                    op_id + 1 + later
                );
            }
        }
    }
}

#[test]
fn inference_graph_from_the_same_model_code_uses_running_statistics() {
    let (graph, net, grads) = build(Mode::Eval, DType::F32, 2, 8, 3);
    assert!(grads.is_none());
    assert!(graph.nodes().iter().all(|n| n.phase == Phase::Forward));
    assert!(graph
        .nodes()
        .iter()
        .any(|n| n.op.kernel() == Kernel::BatchNormForwardInference));
    assert!(!graph
        .nodes()
        .iter()
        .any(|n| n.op.kernel() == Kernel::BatchNormForwardTraining));
    let mut exec = Executor::new(graph, &Device::Cpu);
    init(&mut exec, DType::F32, 1);
    feed(&mut exec, DType::F32, 2, 8, 3, 5);
    let before = exec.state_dict().unwrap();
    exec.run().unwrap();
    let logits_a = exec.value(net.logits).unwrap().to_vec2::<f32>().unwrap();
    // Running statistics do not move in inference, and the output does not depend on the batch.
    for (name, t) in before {
        let after = exec.get(&name).unwrap().unwrap();
        assert_eq!(
            t.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            after.flatten_all().unwrap().to_vec1::<f32>().unwrap()
        );
    }
    exec.run().unwrap();
    assert_eq!(
        logits_a,
        exec.value(net.logits).unwrap().to_vec2::<f32>().unwrap()
    );
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let net = small_net(&mut b, DType::F32, 2, 8, 3).unwrap();
    assert!(matches!(b.backward(net.loss), Err(GraphError::Usage(_))));
}

#[test]
fn bad_shapes_and_values_are_errors_naming_the_op_value_and_shapes() {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let x = b.input("x", &[1, 3, 8, 8], DType::F32).unwrap();
    let w = b.param("w", &[4, 5, 3, 3]).unwrap();
    let msg = b
        .conv2d(x, w, None, Conv2dParams::new(1, 1))
        .unwrap_err()
        .to_string();
    assert_mentions(&msg, &["conv2d", "[1, 3, 8, 8]", "[4, 5, 3, 3]"]);
    let w = b.param("w2", &[4, 3, 3, 3]).unwrap();
    let h = b.conv2d(x, w, None, Conv2dParams::new(1, 1)).unwrap();
    let h = b.global_avg_pool(h).unwrap();
    let h = b.flatten(h).unwrap();
    let fc = b.param("fc", &[10, 5]).unwrap();
    let msg = b.linear(h, fc, None).unwrap_err().to_string();
    assert_mentions(&msg, &["linear", "[1, 4]", "[10, 5]"]);
    assert!(b.param("w", &[1]).is_err(), "names are unique");

    let (graph, _, _) = build(Mode::Train, DType::F32, 2, 8, 3);
    let mut exec = Executor::new(graph, &Device::Cpu);
    let wrong = Tensor::zeros((6, 3, 5, 5), DType::F32, &Device::Cpu).unwrap();
    let msg = exec.set("stem.weight", &wrong).unwrap_err().to_string();
    assert_mentions(&msg, &["stem.weight", "[6, 3, 3, 3]", "[6, 3, 5, 5]"]);
    assert!(matches!(
        exec.set("nope", &wrong),
        Err(GraphError::UnknownValue(_))
    ));
    feed(&mut exec, DType::F32, 2, 8, 3, 1);
    let msg = exec.run().unwrap_err().to_string();
    assert_mentions(&msg, &["OP_ID0", "ConvForward", "stem.weight"]);
}

#[test]
fn a_kernel_error_at_run_time_names_the_op_id_kernel_phase_and_layer() {
    let (mut exec, _) = initialised(Some(1));
    exec.set("labels", &Tensor::new(&[0u32, 5], &Device::Cpu).unwrap())
        .unwrap();
    let msg = exec.run().unwrap_err().to_string();
    let words = [
        "SoftmaxCrossEntropyForward, Forward, layer loss)",
        "label 5",
    ];
    assert_mentions(&msg, &words);
}

/// A learnable synthetic problem: class k has a bright 3x3 patch in quadrant k.
fn synthetic_batch(batch: usize, size: usize, step: u64) -> (Tensor, Tensor) {
    let noise = uniform(1000 + step, batch * 3 * size * size);
    let mut data: Vec<f32> = noise.iter().map(|v| 0.3 * *v as f32).collect();
    let mut labels = Vec::with_capacity(batch);
    for n in 0..batch {
        let class = ((step as usize * 7 + n * 3) % 4) as u32;
        labels.push(class);
        let (oy, ox) = (
            (class as usize / 2) * size / 2 + 1,
            (class as usize % 2) * size / 2 + 1,
        );
        for c in 0..3 {
            for y in oy..oy + 3 {
                for x in ox..ox + 3 {
                    data[((n * 3 + c) * size + y) * size + x] += 1.5;
                }
            }
        }
    }
    (
        Tensor::from_vec(data, (batch, 3, size, size), &Device::Cpu).unwrap(),
        Tensor::new(labels, &Device::Cpu).unwrap(),
    )
}

#[test]
fn sgd_training_drives_the_loss_down_and_accuracy_up() {
    let (batch, size, classes) = (16, 10, 4);
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let net = small_net(&mut b, DType::F32, batch, size, classes).unwrap();
    let grads = b.backward(net.loss).unwrap();
    b.sgd(
        &grads,
        SgdParams {
            lr: 0.05,
            momentum: 0.9,
            weight_decay: 1e-4,
            ..Default::default()
        },
    )
    .unwrap();
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    init(&mut exec, DType::F32, 3);
    let accuracy = |exec: &Executor| {
        let logits = exec
            .value(net.logits)
            .unwrap()
            .argmax(1)
            .unwrap()
            .to_vec1::<u32>()
            .unwrap();
        let labels = exec.value(net.labels).unwrap().to_vec1::<u32>().unwrap();
        logits.iter().zip(&labels).filter(|(a, b)| a == b).count() as f64 / labels.len() as f64
    };
    let (mut first_loss, mut first_acc, mut last_loss, mut last_acc) = (0.0, 0.0, 0.0, 0.0);
    let steps = 300;
    for step in 0..steps {
        let (x, y) = synthetic_batch(batch, size, step);
        exec.set_id(net.images, &x).unwrap();
        exec.set_id(net.labels, &y).unwrap();
        exec.run().unwrap();
        let l = exec.value(net.loss).unwrap().to_scalar::<f32>().unwrap() as f64;
        let a = accuracy(&exec);
        if step < 20 {
            first_loss += l / 20.0;
            first_acc += a / 20.0;
        }
        if step >= steps - 20 {
            last_loss += l / 20.0;
            last_acc += a / 20.0;
        }
    }
    assert!(
        last_loss < 0.5 * first_loss,
        "loss {first_loss:.3} -> {last_loss:.3}"
    );
    assert!(
        last_acc > 0.9 && last_acc > first_acc + 0.3,
        "accuracy {first_acc:.2} -> {last_acc:.2}"
    );
}

#[test]
fn an_unset_value_is_a_missing_value_error_naming_it_and_its_reader() {
    let (mut exec, _) = initialised(None);
    // Images and labels never fed.
    match exec.run() {
        Err(GraphError::MissingValue {
            name,
            op_id,
            kernel,
        }) => {
            assert_eq!((name.as_str(), op_id, kernel), ("images", 0, "ConvForward"));
        }
        other => panic!("expected MissingValue, got {other:?}"),
    }
}

#[test]
fn set_learning_rate_changes_every_update_from_the_next_step() {
    let sgd = SgdParams {
        lr: 0.5,
        momentum: 0.9,
        ..Default::default()
    };
    let mut exec = Executor::new(small_training_graph(DType::F64, 2, 8, 3, sgd), &Device::Cpu);
    init(&mut exec, DType::F64, 1);
    feed(&mut exec, DType::F64, 2, 8, 3, 5);
    let before = exec.state_dict().unwrap();
    exec.set_learning_rate(0.0).unwrap();
    exec.run().unwrap();
    let params: Vec<String> = exec
        .graph()
        .values()
        .iter()
        .filter(|v| v.kind == ValueKind::Param)
        .map(|v| v.name.clone())
        .collect();
    for (name, t) in &before {
        if params.contains(name) {
            let after = exec.get(name).unwrap().unwrap();
            assert_eq!(
                wick_ops::max_abs_diff(after, t).unwrap(),
                0.0,
                "{name} moved at lr 0"
            );
        }
    }
    exec.set_learning_rate(0.1).unwrap();
    exec.run().unwrap();
    let moved = params.iter().any(|name| {
        let t = &before.iter().find(|(n, _)| n == name).unwrap().1;
        let after = exec.get(name).unwrap().unwrap();
        wick_ops::max_abs_diff(after, t).unwrap() > 0.0
    });
    assert!(moved, "lr 0.1 moves the parameters");
    assert!(exec.set_learning_rate(f64::NAN).is_err());
}

/// Issue #12: every node knows where it comes from. Forward nodes carry the layer that
/// recorded them (nested `in_layer` scopes join with dots), backward nodes their forward
/// node's OP_ID and layer, optimizer nodes the parameter they update and its layer.
#[test]
fn every_node_carries_its_layer_forward_node_or_parameter() {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let net = small_net(&mut b, DType::F32, 2, 6, 3).unwrap();
    let grads = b.backward(net.loss).unwrap();
    b.sgd(&grads, wick_ops::SgdParams::default()).unwrap();
    let g = b.finish();
    let nodes = g.nodes();
    let layers: Vec<Option<&str>> = nodes.iter().map(|n| n.origin.layer.as_deref()).collect();
    assert!(
        layers.contains(&Some("block.relu")),
        "nested scopes join: {layers:?}"
    );
    let mut forward_without_layer = 0;
    for (op_id, n) in nodes.iter().enumerate() {
        match n.phase {
            wick_graph::Phase::Forward => {
                assert!(n.origin.forward_op.is_none() && n.origin.parameter.is_none());
                forward_without_layer += n.origin.layer.is_none() as usize;
            }
            wick_graph::Phase::Backward => {
                let f = n
                    .origin
                    .forward_op
                    .unwrap_or_else(|| panic!("OP_ID{op_id}: no forward node"));
                assert!(f < op_id && nodes[f].phase == wick_graph::Phase::Forward);
                assert_eq!(n.origin.layer, nodes[f].origin.layer, "OP_ID{op_id}");
            }
            wick_graph::Phase::Optimizer => {
                let p = n
                    .origin
                    .parameter
                    .as_deref()
                    .expect("the updated parameter");
                assert_eq!(g.value(n.inputs[0]).name, p, "OP_ID{op_id}");
                let layer = n.origin.layer.as_deref().unwrap();
                assert!(
                    p.starts_with(layer) && p[layer.len()..].starts_with('.'),
                    "{p} in {layer}"
                );
            }
        }
    }
    // Only `flatten`, which the small net records outside any layer.
    assert_eq!(forward_without_layer, 1);
}
