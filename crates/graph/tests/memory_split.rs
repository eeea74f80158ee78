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
