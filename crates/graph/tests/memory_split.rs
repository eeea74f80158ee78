//! The memory plan's split names the optimizer's state as the state dict does: Adam's two
//! moments and the accumulated gradients are optimizer state, whatever their names, and
//! only batch norm's running statistics count as statistics.

mod common;

use candle_core::DType;
use common::*;
use wick_graph::nodes::optim::{Optimizer, OptimizerConfig};
use wick_graph::{GraphBuilder, Mode, ValueKind};
use wick_ops::AdamParams;

#[test]
fn adam_moments_and_accumulators_are_optimizer_state_not_statistics() {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let net = small_net(&mut b, DType::F32, 2, 8, 3).unwrap();
    let grads = b.backward(net.loss).unwrap();
    let config = OptimizerConfig::from(Optimizer::Adam(AdamParams::adamw(0.01))).accumulate(2);
    b.optimize(&grads, &config).unwrap();
    let graph = b.finish();
    let plan = graph.memory_plan();
    let bytes = |keep: &dyn Fn(&str, ValueKind) -> bool| -> u64 {
        graph
            .values()
            .iter()
            .filter(|v| keep(&v.name, v.kind))
            .map(|v| (v.shape.iter().product::<usize>() * 4) as u64)
            .sum()
    };
    let params = bytes(&|_, k| k == ValueKind::Param);
    let stats = bytes(&|n, k| {
        k == ValueKind::State && (n.ends_with(".running_mean") || n.ends_with(".running_var"))
    });
    assert!(params > 0 && stats > 0);
    // exp_avg, exp_avg_sq and grad_accum: three parameter-sized buffers.
    assert_eq!(plan.split.optimizer_state, 3 * params, "{:?}", plan.split);
    assert_eq!(plan.split.statistics, stats, "{:?}", plan.split);
}

/// Every optimizer's state against what it keeps per parameter (SGD with momentum one
/// buffer, Adam and AdamW two moments), on a model with batch norm and one without: the
/// running statistics are statistics, never optimizer state, and a model without batch
/// norm has none.
#[test]
fn each_optimizers_state_is_counted_with_and_without_batch_norm() {
    use wick_ops::SgdParams;
    let optimizers = [
        (
            Optimizer::Sgd(SgdParams {
                lr: 0.1,
                momentum: 0.9,
                ..Default::default()
            }),
            1,
        ),
        (Optimizer::Adam(AdamParams::adam(0.01)), 2),
        (Optimizer::Adam(AdamParams::adamw(0.01)), 2),
    ];
    for (optimizer, buffers) in optimizers {
        for batch_norm in [true, false] {
            let mut b = GraphBuilder::new(Mode::Train, DType::F32);
            let loss = if batch_norm {
                small_net(&mut b, DType::F32, 2, 8, 3).unwrap().loss
            } else {
                let x = b.input("x", &[4, 5], DType::F32).unwrap();
                let labels = b.input("labels", &[4], DType::U32).unwrap();
                let w = b.param("fc.weight", &[3, 5]).unwrap();
                let bias = b.param("fc.bias", &[3]).unwrap();
                let logits = b.linear(x, w, Some(bias)).unwrap();
                b.cross_entropy(logits, labels).unwrap()
            };
            b.output(loss);
            let grads = b.backward(loss).unwrap();
            b.optimize(&grads, &OptimizerConfig::from(optimizer))
                .unwrap();
            let graph = b.finish();
            let split = graph.memory_plan().split;
            let params: u64 = graph
                .values()
                .iter()
                .filter(|v| v.kind == ValueKind::Param)
                .map(|v| (v.shape.iter().product::<usize>() * 4) as u64)
                .sum();
            let case = format!("{optimizer:?}, batch norm {batch_norm}: {split:?}");
            assert_eq!(split.optimizer_state, buffers * params, "{case}");
            assert_eq!(split.statistics > 0, batch_norm, "{case}");
        }
    }
}
