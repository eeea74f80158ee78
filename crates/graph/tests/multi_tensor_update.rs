//! The `multi_tensor_update` pass: the SGD updates with equal settings as one node, with
//! the same weights bit for bit, a learning rate that still reaches every parameter, and
//! each parameter's own finiteness check.

mod common;

use candle_core::{DType, Device, Tensor};
use common::*;
use wick_graph::nodes::optim::UpdateCheck;
use wick_graph::nodes::optim::{Optimizer, OptimizerConfig, ParamGroup, ParamSelector};
use wick_graph::{Executor, GraphBuilder, Mode, PassName, PassSet};
use wick_ops::{AdamParams, Kernel, SgdParams};
use wick_profiler::TimeProfiler;

const SGD: SgdParams = SgdParams {
    lr: 0.05,
    momentum: 0.9,
    weight_decay: 1e-3,
    dampening: 0.0,
    nesterov: true,
};

fn executor(merged: bool) -> Executor {
    let mut graph = small_training_graph(DType::F64, 2, 8, 3, SGD);
    if merged {
        let records = graph.apply_passes(PassSet::NONE.with(PassName::MultiTensorUpdate));
        assert_eq!(
            records[0].subgraphs, 1,
            "one group: every update has SGD's settings"
        );
    }
    ready(graph, 3, 9, [0, 2])
}

/// The small net with AdamW, and plain Adam for the 1-D parameters: two settings, so
/// two merged nodes.
fn adam_executor(merged: bool) -> Executor {
    let mut b = GraphBuilder::new(Mode::Train, DType::F64);
    let net = small_net(&mut b, DType::F64, 2, 8, 3).unwrap();
    let grads = b.backward(net.loss).unwrap();
    let config = OptimizerConfig {
        default: Optimizer::Adam(AdamParams::adamw(0.01)),
        groups: vec![ParamGroup {
            select: ParamSelector::OneDimensional,
            optimizer: Optimizer::Adam(AdamParams::adam(0.02)),
        }],
        clip_grad_norm: None,
        accumulate: 1,
    };
    b.optimize(&grads, &config).unwrap();
    let mut graph = b.finish();
    if merged {
        let records = graph.apply_passes(PassSet::NONE.with(PassName::MultiTensorUpdate));
        assert_eq!(records[0].subgraphs, 2, "AdamW and Adam");
    }
    ready(graph, 4, 5, [1, 2])
}

/// An executor of `graph`, initialised with `init_seed`, fed images from `image_seed`
/// and `labels`.
fn ready(graph: wick_graph::Graph, init_seed: u64, image_seed: u64, labels: [u32; 2]) -> Executor {
    let mut exec = Executor::new(graph, &Device::Cpu);
    init(&mut exec, DType::F64, init_seed);
    let images = Tensor::from_vec(
        uniform(image_seed, 2 * 3 * 8 * 8),
        (2, 3, 8, 8),
        &Device::Cpu,
    )
    .unwrap()
    .to_dtype(DType::F64)
    .unwrap();
    exec.set("images", &images).unwrap();
    exec.set("labels", &Tensor::new(&labels, &Device::Cpu).unwrap())
        .unwrap();
    exec
}

fn bits(t: &Tensor) -> Vec<u64> {
    let v = t.flatten_all().unwrap().to_vec1::<f64>().unwrap();
    v.into_iter().map(f64::to_bits).collect()
}

#[test]
fn merged_updates_give_the_same_weights_bit_for_bit_in_one_node() {
    let (mut separate, mut merged) = (executor(false), executor(true));
    let kernels =
        |e: &Executor| -> Vec<Kernel> { e.graph().nodes().iter().map(|n| n.kernel()).collect() };
    let updates = kernels(&separate)
        .iter()
        .filter(|&&k| k == Kernel::SgdUpdate)
        .count();
    assert!(updates >= 4, "{updates} update nodes");
    let merged_kernels = kernels(&merged);
    assert!(!merged_kernels.contains(&Kernel::SgdUpdate));
    assert_eq!(
        merged_kernels
            .iter()
            .filter(|&&k| k == Kernel::SgdUpdateMultiTensor)
            .count(),
        1
    );
    assert_eq!(merged_kernels.len() + updates - 1, kernels(&separate).len());
    // Three steps: the first writes the momentum buffers, the next two read them.
    for _ in 0..3 {
        separate.run().unwrap();
        merged.run().unwrap();
    }
    let (a, b) = (separate.state_dict().unwrap(), merged.state_dict().unwrap());
    assert_eq!(a.len(), b.len());
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        assert_eq!(bits(x), bits(y), "{name} differs after 3 steps");
    }
    // The profiler counts every member's parameters for the merged node, as it counts
    // each update's for the separate ones.
    let params = |e: &mut Executor| {
        e.add_hook(TimeProfiler::new(2, 0)).unwrap();
        e.run().unwrap();
        let p = e.hook::<TimeProfiler>().unwrap().profile();
        let optimizer = p
            .ops
            .iter()
            .filter(|o| o.phase == wick_graph::Phase::Optimizer);
        optimizer.map(|o| o.parameter_elements).sum::<u64>()
    };
    let (total, merged_total) = (params(&mut separate), params(&mut merged));
    assert!(total > 0);
    assert_eq!(merged_total, total);
}

#[test]
fn the_learning_rate_and_the_finiteness_checks_reach_every_merged_parameter() {
    let mut exec = executor(true);
    exec.run().unwrap();
    let checks = exec.graph().take_update_checks();
    let names: Vec<String> = checks.iter().map(|c| c.0.to_string()).collect();
    assert!(
        names.len() >= 4
            && names
                .iter()
                .all(|n| n.ends_with("weight") || n.ends_with("bias")),
        "{names:?}"
    );
    assert!(
        checks.iter().all(|c| c.1 == UpdateCheck::Finite),
        "{checks:?}"
    );
    assert!(exec
        .graph()
        .take_update_checks()
        .iter()
        .all(|c| c.1 == UpdateCheck::NotRun));

    // lr 0: nothing moves.
    let before = exec.state_dict().unwrap();
    exec.set_learning_rate(0.0).unwrap();
    exec.run().unwrap();
    for (name, t) in &before {
        if names.contains(name) {
            assert_eq!(
                bits(exec.get(name).unwrap().unwrap()),
                bits(t),
                "{name} moved at lr 0"
            );
        }
    }

    // An infinity in one momentum buffer reaches only its parameter (a poisoned
    // parameter would reach every gradient through the forward pass): it alone is named.
    let victim = names[1].to_string();
    let buffer = format!("{victim}.momentum_buffer");
    let t = exec.get(&buffer).unwrap().unwrap();
    let mut v = t.flatten_all().unwrap().to_vec1::<f64>().unwrap();
    v[0] = f64::INFINITY;
    let poisoned = Tensor::from_vec(v, t.dims(), &Device::Cpu).unwrap();
    exec.set(&buffer, &poisoned).unwrap();
    exec.set_learning_rate(0.05).unwrap();
    exec.run().unwrap();
    let checks = exec.graph().take_update_checks();
    for (name, check) in checks {
        let expected = if name == victim {
            UpdateCheck::NonFinite
        } else {
            UpdateCheck::Finite
        };
        assert_eq!(check, expected, "{name}");
    }
}

#[test]
fn merged_adam_and_adamw_updates_give_the_same_weights_bit_for_bit() {
    let (mut separate, mut merged) = (adam_executor(false), adam_executor(true));
    let count =
        |e: &Executor, k: Kernel| e.graph().nodes().iter().filter(|n| n.kernel() == k).count();
    let updates = count(&separate, Kernel::AdamUpdate);
    assert!(updates >= 4, "{updates} update nodes");
    assert_eq!(
        (
            count(&merged, Kernel::AdamUpdate),
            count(&merged, Kernel::AdamUpdateMultiTensor)
        ),
        (0, 2)
    );
    for step in 0..3i64 {
        for e in [&mut separate, &mut merged] {
            e.set("step", &Tensor::new(step, &Device::Cpu).unwrap())
                .unwrap();
            e.run().unwrap();
        }
    }
    let (a, b) = (separate.state_dict().unwrap(), merged.state_dict().unwrap());
    assert_eq!(a.len(), b.len());
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        assert_eq!(bits(x), bits(y), "{name} differs after 3 steps");
    }
    // Every parameter is named by the checks (Adam leaves the looking to the caller).
    let checks: Vec<(String, UpdateCheck)> = merged
        .graph()
        .take_update_checks()
        .into_iter()
        .map(|(n, c)| (n.to_string(), c))
        .collect();
    assert_eq!(checks.len(), updates);
    assert!(
        checks.iter().all(|c| c.1 == UpdateCheck::Unchecked),
        "{checks:?}"
    );
    // The learning rate reaches both merged nodes: at 0 nothing moves.
    merged.set_learning_rate(0.0).unwrap();
    merged
        .set("step", &Tensor::new(3i64, &Device::Cpu).unwrap())
        .unwrap();
    let before = merged.state_dict().unwrap();
    merged.run().unwrap();
    for (name, _) in &checks {
        let old = &before.iter().find(|(n, _)| n == name).unwrap().1;
        assert_eq!(
            bits(merged.get(name).unwrap().unwrap()),
            bits(old),
            "{name} moved at lr 0"
        );
    }
}
