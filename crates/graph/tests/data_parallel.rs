//! Data-parallel graphs (`Graph::apply_data_parallel`): two replicas, each on half of a
//! batch, end a step with the single-process whole-batch weights; buckets and their
//! placement; world size 1 changes nothing; a failing all-reduce is an error naming the
//! bucket and the rank.
//!
//! The replicas run in threads here, summing through shared memory: a test double for the
//! engines (MPI, NCCL), which implement the same `Communicator` trait.

mod common;

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use common::assert_mentions;
use common::ranks::on_two_ranks;
use common::uniform;
use wick_graph::collective::{Communicator, SingleProcess};
use wick_graph::nodes::optim::{Optimizer, OptimizerConfig, ParamSelector};
use wick_graph::passes::data_parallel::{Bucket, DataParallelOptions};
use wick_graph::{Executor, Graph, GraphBuilder, Mode, ValueKind};
use wick_ops::{AdamParams, Conv2dParams, SgdParams};
use wick_profiler::DistProfile;

/// A communicator whose all-reduce fails, as a rank whose peer died would.
#[derive(Debug)]
struct Broken;

impl Communicator for Broken {
    fn rank(&self) -> usize {
        1
    }
    fn size(&self) -> usize {
        2
    }
    fn engine(&self) -> &'static str {
        "broken"
    }
    fn all_reduce_sum(&self, _: &mut [f32]) -> Result<(), String> {
        Err("peer rank 0 is gone".into())
    }
}

const SIZE: usize = 8;
const CLASSES: usize = 3;

/// conv-relu, a residual conv, relu, global average pool, linear, cross-entropy, SGD
/// with momentum: no batch norm, whose per-replica statistics would differ from the
/// whole batch's.
fn training_graph(batch: usize) -> Graph {
    training_graph_with(batch, &sgd())
}

/// SGD with momentum and weight decay, for every parameter.
fn sgd() -> OptimizerConfig {
    let p = SgdParams {
        lr: 0.5,
        momentum: 0.9,
        weight_decay: 1e-3,
        ..Default::default()
    };
    Optimizer::Sgd(p).into()
}

/// The small net with the given optimizer phase.
fn training_graph_with(batch: usize, optimizer: &OptimizerConfig) -> Graph {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let images = b
        .input("images", &[batch, 3, SIZE, SIZE], DType::F32)
        .unwrap();
    let labels = b.input("labels", &[batch], DType::U32).unwrap();
    let w1 = b.param("conv1.weight", &[4, 3, 3, 3]).unwrap();
    let w2 = b.param("conv2.weight", &[4, 4, 3, 3]).unwrap();
    let fw = b.param("fc.weight", &[CLASSES, 4]).unwrap();
    let fb = b.param("fc.bias", &[CLASSES]).unwrap();
    let h = b.conv2d(images, w1, None, Conv2dParams::new(1, 1)).unwrap();
    let h = b.relu(h).unwrap();
    let r = b.conv2d(h, w2, None, Conv2dParams::new(1, 1)).unwrap();
    let h = b.add(r, h).unwrap();
    let h = b.relu(h).unwrap();
    let h = b.global_avg_pool(h).unwrap();
    let h = b.flatten(h).unwrap();
    let logits = b.linear(h, fw, Some(fb)).unwrap();
    let loss = b.cross_entropy(logits, labels).unwrap();
    b.output(loss);
    let grads = b.backward(loss).unwrap();
    b.optimize(&grads, optimizer).unwrap();
    b.finish()
}

const PARAMS: [&str; 4] = ["conv1.weight", "conv2.weight", "fc.weight", "fc.bias"];

fn executor(graph: Graph) -> Executor {
    let mut exec = Executor::new(graph, &Device::Cpu);
    let values: Vec<_> = exec.graph().values().to_vec();
    for (i, v) in values.iter().enumerate() {
        if v.kind == ValueKind::Param {
            let n: usize = v.shape.iter().product();
            let data: Vec<f32> = uniform(7 + i as u64, n).iter().map(|x| *x as f32).collect();
            let t = Tensor::from_vec(data, v.shape.as_slice(), &Device::Cpu).unwrap();
            exec.set(&v.name, &t).unwrap();
        }
    }
    exec
}

/// Images and labels `from..to` of the step's whole batch of 8.
fn feed(exec: &mut Executor, step: u64, from: usize, to: usize) {
    let per = 3 * SIZE * SIZE;
    let all: Vec<f32> = uniform(100 + step, 8 * per)
        .iter()
        .map(|x| *x as f32)
        .collect();
    let images = Tensor::from_vec(
        all[from * per..to * per].to_vec(),
        (to - from, 3, SIZE, SIZE),
        &Device::Cpu,
    )
    .unwrap();
    let labels: Vec<u32> = (from..to).map(|i| (i * 7 % CLASSES) as u32).collect();
    exec.set("images", &images).unwrap();
    exec.set("labels", &Tensor::new(labels, &Device::Cpu).unwrap())
        .unwrap();
}

fn weights(exec: &Executor) -> Vec<Vec<f32>> {
    PARAMS
        .iter()
        .map(|p| {
            exec.get(p)
                .unwrap()
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap()
        })
        .collect()
}

/// Weights after 3 steps trained by `optimizer`: (the two replicas on half batches, the
/// whole batch in one process, one replica alone on its half without averaging).
type Runs = (Vec<Vec<Vec<f32>>>, Vec<Vec<f32>>, Vec<Vec<f32>>);

fn three_steps(optimizer: &OptimizerConfig) -> Runs {
    let run = |exec: &mut Executor, from: usize, to: usize| {
        for step in 0..3 {
            feed(exec, step, from, to);
            if exec.graph().find("step").is_some() {
                exec.set("step", &Tensor::new(step as i64, &Device::Cpu).unwrap())
                    .unwrap();
            }
            exec.run().unwrap();
        }
        weights(exec)
    };
    let whole = run(&mut executor(training_graph_with(8, optimizer)), 0, 8);
    let replicas = on_two_ranks(|comm| {
        let rank = comm.rank;
        let mut graph = training_graph_with(4, optimizer);
        graph.apply_data_parallel(Arc::new(comm), 1024).unwrap();
        run(&mut executor(graph), rank * 4, rank * 4 + 4)
    });
    let alone = run(&mut executor(training_graph_with(4, optimizer)), 0, 4);
    (replicas, whole, alone)
}

/// Both replicas applied the same averaged gradients, within `tol` of the whole batch's
/// weights, and a replica that did not average differs (the check can fail).
fn assert_replicas_match_the_whole_batch((replicas, expected, alone): Runs, tol: f64) {
    assert_eq!(replicas[0], replicas[1], "the replicas diverged");
    for (name, (got, want)) in PARAMS.iter().zip(replicas[0].iter().zip(&expected)) {
        let f64s = |v: &[f32]| v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>();
        let err = wick_ops::max_rel_diff_values(&f64s(got), &f64s(want));
        assert!(
            err < tol,
            "{name}: replicas {err:.2e} from the whole batch after 3 steps"
        );
    }
    assert_ne!(alone, expected);
}

#[test]
fn two_replicas_on_half_batches_end_with_the_whole_batch_weights() {
    // The mean of the two half-batch mean gradients is the whole batch's, to rounding.
    assert_replicas_match_the_whole_batch(three_steps(&sgd()), 1e-5);
}

#[test]
fn adamw_with_clipping_on_two_replicas_ends_with_the_whole_batch_weights() {
    // The all-reduce must average the backward pass's gradients before the clipping node
    // reads them (clipping each rank's half would change the result).
    let adamw = AdamParams::adamw(0.05);
    let config = OptimizerConfig::from(Optimizer::Adam(adamw))
        .no_weight_decay_on(ParamSelector::OneDimensional)
        .clip_grad_norm(0.05);
    assert_replicas_match_the_whole_batch(three_steps(&config), 1e-5);
}

#[test]
fn buckets_follow_backward_order_and_each_all_reduce_runs_after_its_last_gradient() {
    for (bucket_bytes, count) in [(1u64, 4usize), (u64::MAX, 1), (200, 2)] {
        let mut graph = training_graph(4);
        let buckets = graph
            .apply_data_parallel(Arc::new(SingleProcess), bucket_bytes)
            .unwrap()
            .buckets;
        // Gradient bytes: conv1 432, conv2 576, fc.weight 48, fc.bias 12. In backward order
        // (fc first), 200-byte buckets close after conv2: [fc.*, conv2], [conv1].
        assert_eq!(buckets.len(), count, "bucket_bytes {bucket_bytes}");
        let total: u64 = buckets.iter().map(|b: &Bucket| b.bytes).sum();
        assert_eq!(total, 4 * (108 + 144 + 12 + 3));
        for b in &buckets {
            let node = &graph.nodes()[b.op_id];
            assert_eq!(
                node.op.kernel().name(wick_ops::DeviceKind::Cpu),
                "DistAllReduce"
            );
            assert_eq!(node.inputs, b.gradients);
            // Its wait reads the same gradients and comes at the end of backward, in
            // bucket order, right before the optimizer.
            let wait = &graph.nodes()[b.wait_op_id];
            assert_eq!(wait.op.kernel().name(wick_ops::DeviceKind::Cpu), "DistWait");
            assert_eq!(wait.inputs, b.gradients);
            let first_optimizer = graph
                .nodes()
                .iter()
                .position(|n| n.phase == wick_graph::Phase::Optimizer)
                .unwrap();
            let bucket = buckets.iter().position(|x| x == b).unwrap();
            assert_eq!(b.wait_op_id, first_optimizer - buckets.len() + bucket);
            // Right after the node that makes its last gradient (or after another
            // all-reduce placed there first).
            let producers: Vec<usize> = b
                .gradients
                .iter()
                .map(|g| {
                    graph
                        .nodes()
                        .iter()
                        .rposition(|n| n.outputs.contains(g))
                        .unwrap()
                })
                .collect();
            let last = *producers.iter().max().unwrap();
            assert!(
                (last + 1..=b.op_id).all(|i| graph.nodes()[i]
                    .op
                    .kernel()
                    .name(wick_ops::DeviceKind::Cpu)
                    == "DistAllReduce"),
                "bucket at OP_ID{} is not right after OP_ID{last}",
                b.op_id
            );
        }
        // Every optimizer node reads an averaged gradient.
        for n in graph
            .nodes()
            .iter()
            .filter(|n| n.phase == wick_graph::Phase::Optimizer)
        {
            assert!(graph.value(n.inputs[1]).name.ends_with(".mean"));
        }
        // fc's gradients come first out of backward, conv1's last.
        let first = &graph.value(buckets[0].gradients[0]).shape;
        assert!(first == &[CLASSES, 4] || first == &[CLASSES], "{first:?}");
        let last = buckets.last().unwrap().gradients.last().unwrap();
        assert_eq!(graph.value(*last).shape, [4, 3, 3, 3]);
    }
}

#[test]
fn world_size_one_changes_nothing_and_misuse_is_an_error() {
    let mut plain = executor(training_graph(4));
    let mut graph = training_graph(4);
    graph
        .apply_data_parallel(Arc::new(SingleProcess), 1 << 20)
        .unwrap();
    let e = graph
        .apply_data_parallel(Arc::new(SingleProcess), 1 << 20)
        .unwrap_err()
        .to_string();
    assert!(e.contains("data-parallel already"), "{e}");
    let mut single = executor(graph);
    for step in 0..2 {
        feed(&mut plain, step, 0, 4);
        feed(&mut single, step, 0, 4);
        plain.run().unwrap();
        single.run().unwrap();
    }
    assert_eq!(weights(&plain), weights(&single), "mean over one rank");
    // An inference graph has no optimizer to feed.
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let x = b.input("x", &[1, 3], DType::F32).unwrap();
    let y = b.relu(x).unwrap();
    b.output(y);
    let e = b
        .finish()
        .apply_data_parallel(Arc::new(SingleProcess), 1 << 20)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no optimizer node"), "{e}");
}

#[test]
fn a_failed_all_reduce_is_an_error_naming_the_bucket_and_the_rank() {
    let mut graph = training_graph(4);
    graph
        .apply_data_parallel(Arc::new(Broken), 1 << 20)
        .unwrap();
    let mut exec = executor(graph);
    feed(&mut exec, 0, 0, 4);
    let e = exec.run().unwrap_err().to_string();
    assert_mentions(
        &e,
        &[
            "DistAllReduce",
            "DistWait",
            "bucket 0",
            "rank 1 of 2",
            "peer rank 0 is gone",
        ],
    );
}

#[test]
fn verbosity_3_prints_only_the_communication_ops() {
    let mut graph = training_graph(4);
    let buckets = graph
        .apply_data_parallel(Arc::new(SingleProcess), 1)
        .unwrap()
        .buckets;
    let mut printed = Vec::new();
    for verbosity in [2, 3] {
        let mut exec = executor(graph.clone());
        exec.add_hook(wick_profiler::TimeProfiler::new(verbosity, 0))
            .unwrap();
        feed(&mut exec, 0, 0, 4);
        exec.run().unwrap();
        let text = exec
            .hook::<wick_profiler::TimeProfiler>()
            .unwrap()
            .profile()
            .singa_lines();
        let lines: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with("OP_ID"))
            .map(str::to_string)
            .collect();
        printed.push(lines);
    }
    let count = |lines: &[String], kernel: &str| {
        lines
            .iter()
            .filter(|l| l.contains(&format!(". {kernel} : ")))
            .count()
    };
    // Verbosity 2: every op, the 4 all-reduces and their 4 waits among them; verbosity 3:
    // those 8 only.
    for kernel in ["DistAllReduce", "DistWait"] {
        assert_eq!(count(&printed[0], kernel), buckets.len());
        assert_eq!(count(&printed[1], kernel), buckets.len());
    }
    assert!(printed[0].len() > 2 * buckets.len());
    assert_eq!(printed[1].len(), 2 * buckets.len(), "{:?}", printed[1]);
}

/// The small conv net with batch norm (common::small_net) with SGD, optionally with the
/// training fusions (batch norm + ReLU, add + ReLU).
fn bn_training_graph(batch: usize, fused: bool) -> Graph {
    let sgd = SgdParams {
        lr: 0.5,
        momentum: 0.9,
        ..Default::default()
    };
    let mut graph = common::small_training_graph(DType::F32, batch, SIZE, CLASSES, sgd);
    if fused {
        graph.apply_passes(wick_graph::PassSet::all());
    }
    graph
}

/// Every parameter and batch-norm statistic, by name.
fn parameters_and_statistics(exec: &Executor) -> Vec<(String, Vec<f32>)> {
    exec.graph()
        .values()
        .iter()
        .filter(|v| matches!(v.kind, ValueKind::Param | ValueKind::State))
        .map(|v| {
            let t = exec.get(&v.name).unwrap().unwrap();
            (v.name.clone(), t.flatten_all().unwrap().to_vec1().unwrap())
        })
        .collect()
}

/// The largest error of `got` against `want`, relative to each tensor's largest value.
fn worst(got: &[(String, Vec<f32>)], want: &[(String, Vec<f32>)]) -> (f32, String) {
    let mut out = (0f32, String::new());
    for ((name, g), (wname, w)) in got.iter().zip(want) {
        assert_eq!(name, wname);
        let scale = w.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
        let e = g.iter().zip(w).fold(0f32, |m, (a, b)| m.max((a - b).abs())) / scale;
        if e > out.0 {
            out = (e, name.clone());
        }
    }
    out
}

/// Two replicas of the batch-norm net on half batches, `sync` or not, for 2 steps.
fn bn_replicas(fused: bool, sync: bool) -> Vec<Vec<(String, Vec<f32>)>> {
    on_two_ranks(|comm| {
        let rank = comm.rank;
        let mut graph = bn_training_graph(4, fused);
        let options = DataParallelOptions {
            bucket_bytes: 256,
            sync_batch_norm: sync,
        };
        let made = graph
            .apply_data_parallel_with(Arc::new(comm), &options)
            .unwrap();
        assert_eq!(made.sync_batch_norms, if sync { 3 } else { 0 });
        let synced = graph
            .nodes()
            .iter()
            .filter(|n| {
                n.op.kernel()
                    .name(wick_ops::DeviceKind::Cpu)
                    .starts_with("DistSyncBatchNorm")
            })
            .count();
        assert_eq!(
            synced,
            if sync { 6 } else { 0 },
            "forward and backward nodes"
        );
        let mut exec = Executor::new(graph, &Device::Cpu);
        common::init(&mut exec, DType::F32, 11);
        for step in 0..2 {
            feed(&mut exec, step, rank * 4, rank * 4 + 4);
            exec.run().unwrap();
        }
        parameters_and_statistics(&exec)
    })
}

#[test]
fn synchronised_batch_norm_replicas_match_the_whole_batch_statistics_included() {
    for fused in [false, true] {
        let mut whole = Executor::new(bn_training_graph(8, fused), &Device::Cpu);
        common::init(&mut whole, DType::F32, 11);
        for step in 0..2 {
            feed(&mut whole, step, 0, 8);
            whole.run().unwrap();
        }
        let expected = parameters_and_statistics(&whole);
        let synced = bn_replicas(fused, true);
        assert_eq!(synced[0], synced[1], "the replicas diverged");
        let (err, name) = worst(&synced[0], &expected);
        println!(
            "fused {fused}: synchronised batch norm within {err:.1e} of the whole batch ({name})"
        );
        assert!(err < 2e-5, "fused {fused}: {name} {err:.2e}");
        // Per-replica statistics (DDP's default) do not match: the test can fail.
        let own = bn_replicas(fused, false);
        let (err, name) = worst(&own[0], &expected);
        println!("fused {fused}: per-replica batch norm {err:.1e} from the whole batch ({name})");
        assert!(err > 1e-3, "fused {fused}: {name} {err:.2e}");
    }
}

#[test]
fn the_distributed_profile_gathers_every_rank_to_every_rank() {
    let gathered: Vec<_> = on_two_ranks(|comm| {
        let rank = comm.rank;
        let mut graph = training_graph(4);
        let dp = graph.apply_data_parallel(Arc::new(comm), 200).unwrap();
        let mut exec = executor(graph);
        exec.add_hook(wick_profiler::TimeProfiler::new(2, 1))
            .unwrap();
        for step in 0..4 {
            feed(&mut exec, step, rank * 4, rank * 4 + 4);
            exec.run().unwrap();
        }
        let profile = exec
            .hook::<wick_profiler::TimeProfiler>()
            .unwrap()
            .profile();
        let dist = DistProfile::gather(&profile, &dp).unwrap();
        (profile, dist, dp.buckets)
    });
    let (p0, d0, buckets) = &gathered[0];
    let (p1, d1, _) = &gathered[1];
    assert_eq!(d0, d1, "every rank gathers the same figures");
    assert_eq!((d0.world_size, d0.ranks.len()), (2, 2));
    // Each rank's own figures arrive intact (f64 through the f32 all-reduce: ~48 bits).
    for (r, p) in [(0, p0), (1, p1)] {
        let got = d0.ranks[r].iteration_median_sec;
        assert!((got - p.iteration_median_sec).abs() <= 1e-12 * p.iteration_median_sec);
        assert_eq!(d0.rank_ops[r].len(), p.ops.len());
        let last = p.timeline.last().unwrap();
        assert_eq!(d0.rank_ops[r][3].1, last.ops[3].1);
    }
    let slowest = if p0.iteration_median_sec >= p1.iteration_median_sec {
        0
    } else {
        1
    };
    assert_eq!(d0.slowest_rank, slowest);
    // Buckets as the pass made them, with their timings; busbw = algbw * 2(n-1)/n.
    assert_eq!(d0.buckets.len(), buckets.len());
    assert!(buckets.len() >= 2);
    for (b, made) in d0.buckets.iter().zip(buckets) {
        assert_eq!(
            (b.op_id, b.wait_op_id, b.bytes),
            (made.op_id, made.wait_op_id, made.bytes)
        );
        assert!(b.comm_sec > 0.0 && b.exposed_sec >= 0.0);
        assert!((b.busbw_gbs(2) - b.algbw_gbs()).abs() <= 1e-12 * b.algbw_gbs());
        assert!((b.busbw_gbs(8) - b.algbw_gbs() * 1.75).abs() <= 1e-9 * b.algbw_gbs());
    }
    let r0 = &d0.ranks[0];
    let comm: f64 = d0.buckets.iter().map(|b| b.comm_sec).sum();
    assert!((r0.comm_sec - comm).abs() <= 1e-9 * comm);
    assert!((0.0..=1.0).contains(&d0.overlap()));
    let text = d0.report();
    assert!(
        text.contains("Data parallel: 2 ranks (threads (test double))"),
        "{text}"
    );
    assert_mentions(&text, &["<- slowest", "busbw"]);
    // One process track per rank in the trace, each with every op.
    let mut with = p0.clone();
    with.distributed = Some(d0.clone());
    let trace: serde_json::Value = serde_json::from_str(&with.chrome_trace().unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    for rank in 0..2u64 {
        let pid = 1 + rank;
        let ops = events
            .iter()
            .filter(|e| e["pid"] == pid && e["ph"] == "X")
            .count();
        assert_eq!(ops, p0.ops.len(), "rank {rank}'s track");
    }
    // And in the JSON.
    let json: serde_json::Value = serde_json::from_str(&with.to_json()).unwrap();
    assert_eq!(json["distributed"]["world_size"], 2);
}
