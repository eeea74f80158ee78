//! Issue #40: a PyTorch profiler trace read as a wick profile. The fixture is a real
//! trace of three training steps of a four-layer CNN (conv, batch norm, ReLU, pooling,
//! linear), written by `scripts/torch_trace.py --tiny --batch-size 2 --image-size 8
//! --iterations 3 --skip 1 --threads 1` with PyTorch 2.15.

use wick_graph::ir::Phase;
use wick_ops::{Kernel, KernelVariant};
use wick_profiler::compare::torch_import::{import_torch_trace, ImportError};
use wick_profiler::{diff, DiffOptions, OpProfile, Profile};

const TRACE: &str = include_str!("fixtures/torch_tiny_trace.json");

fn imported() -> Profile {
    import_torch_trace(TRACE).expect("the fixture imports")
}

/// The raw trace's events.
fn events() -> Vec<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(TRACE).unwrap();
    v["traceEvents"].as_array().unwrap().clone()
}

fn trace_with(events: Vec<serde_json::Value>) -> String {
    serde_json::json!({ "traceEvents": events }).to_string()
}

#[test]
fn every_op_is_named_as_wicks_kernel_in_its_phase_and_module() {
    let p = imported();
    assert!(p.is_from_torch());
    assert_eq!(p.timed_iterations, 3);
    let by_phase = |ph: Phase| -> Vec<(&str, Option<&str>)> {
        p.ops
            .iter()
            .filter(|o| o.phase == ph)
            .map(|o| (o.name.as_str(), o.origin.layer.as_deref()))
            .collect()
    };
    assert_eq!(
        by_phase(Phase::Forward),
        [
            ("ConvForward", Some("0")),
            ("aten::add_", Some("1")), // num_batches_tracked += 1
            ("BatchNormForwardTraining", Some("1")),
            ("ReLU", Some("2")),
            ("GlobalAvgPoolForward", Some("3")),
            ("Reshape", Some("4")),
            ("LinearForward", Some("5")),
            ("SoftmaxCrossEntropyForward", None),
        ]
    );
    // Backward ops find their module through their forward op's sequence number.
    let backward = by_phase(Phase::Backward);
    for (name, layer) in [
        ("ConvBackward", "0"),
        ("BatchNormBackward", "1"),
        ("ReLUBackward", "2"),
        ("GlobalAvgPoolBackward", "3"),
        ("LinearBackward", "5"),
    ] {
        assert!(
            backward.contains(&(name, Some(layer))),
            "{name} in {layer}: {backward:?}"
        );
    }
    assert_eq!(by_phase(Phase::Optimizer), [("SgdUpdate", None)]);
    assert_eq!(p.run.model, "tiny");
    assert_eq!((p.run.batch, p.run.threads), (2, 1));
}

#[test]
fn times_add_up_as_wicks_do() {
    let p = imported();
    let s = &p.samples;
    assert_eq!((s.iterations.len(), s.phases.len(), s.ops.len()), (3, 3, 3));
    for (k, ops) in s.ops.iter().enumerate() {
        assert_eq!(ops.len(), p.ops.len());
        // A phase spans its ops, and the iteration spans its phases.
        let inside: f64 = ops.iter().sum();
        let phases: f64 = s.phases[k].iter().sum();
        assert!(inside <= phases + 1e-12 && phases <= s.iterations[k] + 1e-12);
        assert!(inside > 0.0);
    }
    for (j, op) in p.ops.iter().enumerate() {
        let mean = s.ops.iter().map(|it| it[j]).sum::<f64>() / 3.0;
        assert!((op.mean_sec - mean).abs() < 1e-12, "{}", op.name);
        assert!(op.min_sec <= op.mean_sec && op.mean_sec <= op.max_sec);
    }
    let forward: f64 = p
        .phases
        .iter()
        .find(|x| x.phase == Phase::Forward)
        .unwrap()
        .ops_sec;
    let ops: f64 = p
        .ops
        .iter()
        .filter(|o| o.phase == Phase::Forward)
        .map(|o| o.mean_sec)
        .sum();
    assert!((forward - ops).abs() < 1e-12);
    // The JSON a user writes reads back as a valid profile.
    let back = Profile::from_json(&p.to_json()).expect("valid profile");
    assert_eq!(back.ops.len(), p.ops.len());
}

#[test]
fn a_diff_against_wick_merges_the_convolution_gradients_and_lists_the_one_sided_ops() {
    let torch = imported();
    // A wick run of the same layers: the convolution's gradient in two nodes.
    let op = |kernel: Kernel, phase: Phase, layer: &str, sec: f64| {
        let mut o = OpProfile::new(kernel, sec);
        o.phase = phase;
        o.origin.layer = Some(layer.into());
        o
    };
    let mut wick = torch.clone();
    wick.method = Some("host clock".into());
    wick.graph_hash = "0123456789abcdef".into();
    wick.ops = vec![
        op(Kernel::ConvForward, Phase::Forward, "0", 1e-4),
        op(Kernel::ReLU, Phase::Forward, "2", 1e-5),
        op(Kernel::ConvBackwardData, Phase::Backward, "0", 2e-4),
        op(Kernel::ConvBackwardFilter, Phase::Backward, "0", 3e-4),
    ];
    for (i, o) in wick.ops.iter_mut().enumerate() {
        o.op_id = i;
    }
    wick.samples.ops = vec![wick.ops.iter().map(|o| o.mean_sec).collect(); 3];
    let d = diff(&torch, &wick, &DiffOptions::default()).expect("matched by name");
    assert!(!d.same_graph);
    let row = |kind: &str, name: &str| d.rows.iter().find(|r| r.kind == kind && r.name == name);
    let conv = row("op type", "ConvBackward").expect("the merged gradient row");
    assert!((conv.b_sec - 5e-4).abs() < 1e-12);
    assert!(row("op type", "ConvBackwardData").is_none());
    assert!(row("layer", "0").is_some());
    let only_torch: Vec<&str> = d
        .one_sided
        .iter()
        .filter(|r| r.side == "A" && r.kind == "op type")
        .map(|r| r.name.as_str())
        .collect();
    assert!(
        only_torch.contains(&"BatchNormForwardTraining"),
        "{only_torch:?}"
    );
    assert!(d.text().contains("only in A (not compared)"));
}

#[test]
fn a_depthwise_convolution_keeps_its_kind_forward_and_backward() {
    // The fixture's convolution, made depthwise: 3 input channels, weight [3, 1, 3, 3].
    let depthwise: Vec<serde_json::Value> = events()
        .into_iter()
        .map(|mut e| {
            if e["args"]["Input Dims"]
                == serde_json::json!([[2, 3, 8, 8], [8, 3, 3, 3], [], [], [], [], []])
            {
                e["args"]["Input Dims"] =
                    serde_json::json!([[2, 3, 8, 8], [3, 1, 3, 3], [], [], [], [], []]);
            }
            e
        })
        .collect();
    let p = import_torch_trace(&trace_with(depthwise)).unwrap();
    let kinds: Vec<(&str, Option<KernelVariant>)> = p
        .ops
        .iter()
        .filter(|o| o.name.starts_with("Conv"))
        .map(|o| (o.name.as_str(), o.variant))
        .collect();
    let dw = Some(KernelVariant::DepthwiseConv);
    assert_eq!(kinds, [("ConvForward", dw), ("ConvBackward", dw)]);
}

#[test]
fn traces_it_cannot_read_are_refused_by_name() {
    assert!(matches!(
        import_torch_trace("{"),
        Err(ImportError::NotATrace(_))
    ));
    let no_steps: Vec<_> = events()
        .into_iter()
        .filter(|e| {
            !e["name"]
                .as_str()
                .unwrap_or("")
                .starts_with("ProfilerStep#")
        })
        .collect();
    let e = import_torch_trace(&trace_with(no_steps)).unwrap_err();
    assert!(matches!(e, ImportError::NoSteps), "{e}");
    assert!(e.to_string().contains("prof.step()"));
    // One step without its ReLU: the steps ran different ops, named in the error.
    let mut dropped = false;
    let uneven: Vec<_> = events()
        .into_iter()
        .filter(|e| {
            let relu = e["name"] == "aten::relu_";
            let drop = relu && !dropped && e["args"]["Sequence number"].as_i64() > Some(20);
            dropped |= drop;
            !drop
        })
        .collect();
    assert!(dropped);
    let e = import_torch_trace(&trace_with(uneven))
        .unwrap_err()
        .to_string();
    assert!(e.contains("ReLU in 2"), "{e}");
    assert!(e.contains("ProfilerStep#"), "{e}");
    // A GPU trace: its ops' durations would be launches, not work.
    let mut gpu = events();
    gpu.push(
        serde_json::json!({"ph": "X", "cat": "kernel", "name": "sgemm", "ts": 1.0, "dur": 5.0}),
    );
    let e = import_torch_trace(&trace_with(gpu)).unwrap_err();
    assert!(matches!(e, ImportError::DeviceTrace(1)), "{e}");
}
