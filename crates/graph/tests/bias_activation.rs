//! The `bias_activation` pass: a bias add + GELU (exact or tanh) or SiLU, forward and
//! backward, as two fused nodes that give the unfused graph's loss, output and gradients
//! bit for bit (f32 and f64); a sum that something else reads stays unfused.

mod common;

use candle_core::{DType, Device, Tensor};
use common::uniform;
use wick_graph::{Executor, GraphBuilder, Mode, PassName, PassSet, ValueId};
use wick_ops::activation::Activation;
use wick_ops::Kernel;

const KINDS: [Activation; 3] = [Activation::Gelu, Activation::GeluTanh, Activation::Silu];

/// `mse(act(x·W + b), target)` over `[2, 5, 8] -> 12`, trained or evaluated; `leak`
/// adds the sum `x·W + b` to the loss too (a second reader of the sum). Its values:
/// the loss, the activation, and in training the gradients of W, b and x.
fn net(
    kind: Activation,
    dtype: DType,
    mode: Mode,
    leak: bool,
) -> (wick_graph::Graph, Vec<ValueId>) {
    let mut b = GraphBuilder::new(mode, dtype);
    let x = b.param("x", &[2, 5, 8]).unwrap();
    let w = b.param("w", &[8, 12]).unwrap();
    let bias = b.param("b", &[12]).unwrap();
    let target = b.input("target", &[2, 5, 12], dtype).unwrap();
    let h = b.matmul(x, w).unwrap();
    let s = b.broadcast_add(h, bias).unwrap();
    let z = b.activation(kind, s).unwrap();
    let z2 = if leak { b.add(z, s).unwrap() } else { z };
    let loss = b.mse_loss(z2, target).unwrap();
    let mut keep = vec![loss, z];
    if mode == Mode::Train {
        let grads = b.backward(loss).unwrap();
        keep.extend([w, bias, x].map(|p| grads.get(p).unwrap()));
    }
    keep.iter().for_each(|&v| b.output(v));
    (b.finish(), keep)
}

/// Runs `graph` on seeded values; returns the kept values' bits (as f64).
fn run(graph: wick_graph::Graph, keep: &[ValueId], dtype: DType) -> Vec<Vec<f64>> {
    let mut exec = Executor::new(graph, &Device::Cpu);
    for (seed, (name, dims)) in [
        ("x", vec![2, 5, 8]),
        ("w", vec![8, 12]),
        ("b", vec![12]),
        ("target", vec![2, 5, 12]),
    ]
    .into_iter()
    .enumerate()
    {
        let n: usize = dims.iter().product();
        // Spread over [-3, 3): both tails of GELU's kink.
        let v: Vec<f64> = uniform(seed as u64 + 1, n)
            .iter()
            .map(|u| 3.0 * u)
            .collect();
        let t = Tensor::from_vec(v, dims, &Device::Cpu)
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        exec.set(name, &t).unwrap();
    }
    exec.run().unwrap();
    keep.iter()
        .map(|&v| {
            let t = exec.value(v).unwrap();
            t.flatten_all()
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap()
                .to_vec1()
                .unwrap()
        })
        .collect()
}

fn kernels(graph: &wick_graph::Graph) -> Vec<Kernel> {
    graph.nodes().iter().map(|n| n.kernel()).collect()
}

#[test]
fn fused_bias_activation_gives_the_unfused_values_bit_for_bit() {
    let pass = PassSet::NONE.with(PassName::BiasActivation);
    for kind in KINDS {
        for dtype in [DType::F32, DType::F64] {
            for mode in [Mode::Train, Mode::Eval] {
                let (plain, keep) = net(kind, dtype, mode, false);
                let (mut fused, _) = net(kind, dtype, mode, false);
                let records = fused.apply_passes(pass);
                let case = format!("{kind:?} {dtype:?} {mode:?}");
                assert_eq!(records[0].subgraphs, 1, "{case}");
                let k = kernels(&fused);
                assert!(k.contains(&Kernel::BiasActivation(kind)), "{case}: {k:?}");
                assert!(!k.contains(&Kernel::Activation(kind)), "{case}: {k:?}");
                let backward = k.contains(&Kernel::BiasActivationBackward(kind));
                assert_eq!(backward, mode == Mode::Train, "{case}: {k:?}");
                if mode == Mode::Train {
                    assert!(
                        !k.iter().any(|k| matches!(k, Kernel::BinaryBackward(_))),
                        "{case}"
                    );
                }
                assert_eq!(
                    plain.nodes().len() - fused.nodes().len(),
                    if backward { 3 } else { 1 }
                );
                let (want, got) = (run(plain, &keep, dtype), run(fused, &keep, dtype));
                for (i, (w, g)) in want.iter().zip(&got).enumerate() {
                    let same = w.iter().zip(g).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{case}: kept value {i} differs");
                }
            }
        }
    }
}

#[test]
fn a_sum_that_another_op_reads_stays_unfused() {
    let (mut graph, _) = net(Activation::GeluTanh, DType::F32, Mode::Train, true);
    let before = kernels(&graph);
    let records = graph.apply_passes(PassSet::NONE.with(PassName::BiasActivation));
    assert_eq!(records[0].subgraphs, 0);
    assert_eq!(kernels(&graph), before);
}
