//! Graph passes on the ResNet family: the subgraph counts of the pass log, the graph they
//! leave, and fused graphs giving the unfused graph's outputs (issue #14's 1e-4 relative
//! bound; here they agree far closer), also after the weights change.

mod common;

use candle_core::{Device, Tensor};
use wick_graph::{PassName, PassSet};
use wick_models::data::{BatchSource, SyntheticImages};
use wick_models::init::formula;
use wick_models::{Depth, ResNetConfig, Session, Stem, TrainOptions, WeightInit};
use wick_ops::max_rel_diff;
use wick_ops::Kernel;

fn eval(config: ResNetConfig, batch: usize, size: usize, passes: PassSet) -> Session {
    Session::inference_with_passes(config, batch, size, passes, &Device::Cpu).unwrap()
}

fn counts(s: &Session) -> Vec<(&'static str, usize)> {
    let g = s.executor().graph();
    g.passes()
        .iter()
        .map(|r| (r.pass.as_str(), r.subgraphs))
        .collect()
}

#[test]
fn the_pass_log_names_resnet18_and_resnet50_subgraph_counts() {
    let cases = [
        // 20 batch norms; ReLU after the stem and each block's first conv (9), and add +
        // ReLU ending each of the 8 blocks.
        (Depth::R18, 20, 17, 8),
        // 53 batch norms; ReLU after the stem and the first two convs of each of the 16
        // bottlenecks (33), and 16 add + ReLU.
        (Depth::R50, 53, 49, 16),
    ];
    for (depth, folds, epilogues, residuals) in cases {
        let config = ResNetConfig::new(depth, Stem::ImageNet, 10).unwrap();
        let plain = eval(config, 1, 64, PassSet::NONE);
        let fused = eval(config, 1, 64, PassSet::default());
        assert_eq!(
            counts(&fused),
            [
                ("fold_batch_norm", folds),
                ("conv_epilogue", epilogues),
                ("max_pool_values", 1),
                ("batch_norm_relu", 0),
                ("add_relu", 0),
                ("bias_activation", 0)
            ],
            "{depth:?}"
        );
        let log: Vec<String> = fused
            .executor()
            .graph()
            .passes()
            .iter()
            .map(|r| r.to_string())
            .collect();
        assert_eq!(
            log[0],
            format!("--- Running IR pass [fold_batch_norm] --- detected {folds} subgraphs")
        );
        // Each fold removes a node, each epilogue one (ReLU) or two (add and ReLU).
        let (before, after) = (
            plain.executor().graph().nodes().len(),
            fused.executor().graph().nodes().len(),
        );
        assert_eq!(before - after, folds + epilogues + residuals, "{depth:?}");
        let kernels = common::kernels(&fused);
        assert!(
            !kernels.contains(&Kernel::BatchNormForwardInference)
                && !kernels.contains(&Kernel::Add)
        );
        // The stem's max pool keeps its node, without the argmax indices output.
        let pools: Vec<_> = fused
            .executor()
            .graph()
            .nodes()
            .iter()
            .filter(|n| n.op.kernel() == wick_ops::Kernel::PoolingForward)
            .map(|n| n.outputs.len())
            .collect();
        assert_eq!(pools, [1], "{depth:?}");
        assert_eq!(
            kernels
                .iter()
                .filter(|k| **k == Kernel::ConvBiasActivationForward)
                .count(),
            folds
        );
        // A training graph: batch norm + ReLU where a ReLU follows (the ones the
        // epilogue took, less the residual ends), add + ReLU at each residual end.
        let training = |passes| {
            let options = TrainOptions {
                passes,
                ..wick_ops::SgdParams::default().into()
            };
            Session::training(config, 2, 64, options, &Device::Cpu).unwrap()
        };
        let (plain, train) = (training(PassSet::NONE), training(PassSet::default()));
        let bn_relu = epilogues - residuals;
        assert_eq!(
            counts(&train),
            [
                ("fold_batch_norm", 0),
                ("conv_epilogue", 0),
                ("max_pool_values", 0),
                ("batch_norm_relu", bn_relu),
                ("add_relu", residuals),
                ("bias_activation", 0)
            ],
            "{depth:?}"
        );
        // Each batch norm + ReLU removes ReLU forward and backward; each add + ReLU one.
        let (before, after) = (
            plain.executor().graph().nodes().len(),
            train.executor().graph().nodes().len(),
        );
        assert_eq!(before - after, 2 * bn_relu + residuals, "{depth:?}");
    }
}

fn logits(s: &mut Session, images: &Tensor) -> Tensor {
    s.forward(images).unwrap()
}

#[test]
fn fused_graphs_give_the_unfused_logits_and_follow_new_weights() {
    // The formula fixture's ResNet-18 (CIFAR stem) and batch, and ResNet-50 (ImageNet stem).
    let r18 = common::config();
    let (images, _) = formula::batch(8, 32, 10).unwrap();
    let r50 = ResNetConfig::new(Depth::R50, Stem::ImageNet, 10).unwrap();
    let (images50, _) = SyntheticImages::new(10, 2, 64, 3)
        .unwrap()
        .next_batch()
        .unwrap();
    let only_fold: PassSet = PassName::FoldBatchNorm.as_str().parse().unwrap();
    for (config, images, size) in [(r18, &images, 32), (r50, &images50, 64)] {
        let n = images.dim(0).unwrap();
        let mut plain = eval(config, n, size, PassSet::NONE);
        for passes in [only_fold, PassSet::default()] {
            let mut fused = eval(config, n, size, passes);
            for init in [WeightInit::Formula, WeightInit::Torchvision(7)] {
                // New weights replace the tensors the folded ones came from: the fused
                // graph must fold again, not reuse the old fold.
                plain.init_weights(init).unwrap();
                fused.init_weights(init).unwrap();
                let (a, b) = (logits(&mut fused, images), logits(&mut plain, images));
                let e = max_rel_diff(&a, &b).unwrap();
                println!(
                    "{} passes {passes}, {init:?}: logits within {e:.1e} of the unfused graph's",
                    config.depth.name()
                );
                assert!(e <= 1e-5, "{passes} {init:?}: {e:.2e}");
            }
        }
    }
}

#[test]
fn fused_training_steps_equal_the_unfused_ones_bit_for_bit() {
    // The fused kernels do the unfused graph's arithmetic in the same order: the losses,
    // every gradient and every updated weight and statistic are identical, not close.
    let (images, labels) = formula::batch(8, 32, 10).unwrap();
    let session = |passes| {
        let mut s = common::training_session_with(&Device::Cpu, passes);
        s.init_weights(WeightInit::Formula).unwrap();
        s
    };
    // Every pass, the merged SGD update (one node for the 62 parameters) included.
    let (mut plain, mut fused) = (session(PassSet::NONE), session(PassSet::all()));
    let kernels = common::kernels(&fused);
    for k in [
        Kernel::BatchNormReLUForwardTraining,
        Kernel::BatchNormReLUBackward,
        Kernel::AddReLU,
        Kernel::SgdUpdateMultiTensor,
    ] {
        assert!(kernels.contains(&k), "no {k:?} in the fused graph");
    }
    let count = |k: Kernel| kernels.iter().filter(|&&n| n == k).count();
    assert_eq!(
        (
            count(Kernel::SgdUpdate),
            count(Kernel::SgdUpdateMultiTensor)
        ),
        (0, 1)
    );
    for step in 1..=3 {
        let (a, b) = (
            plain.step(&images, &labels).unwrap(),
            fused.step(&images, &labels).unwrap(),
        );
        assert_eq!(a.to_bits(), b.to_bits(), "step {step}: loss {a} vs {b}");
    }
    let (a, b) = (plain.state_dict().unwrap(), fused.state_dict().unwrap());
    let bits = |t: &Tensor| -> Vec<u32> {
        t.to_dtype(candle_core::DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
            .into_iter()
            .map(f32::to_bits)
            .collect()
    };
    let mut compared = 0;
    for (name, t) in &a {
        if name.ends_with("num_batches_tracked") {
            continue;
        }
        assert_eq!(bits(t), bits(&b[name]), "{name} differs after 3 steps");
        if let (Some(ga), Some(gb)) = (plain.gradient(name), fused.gradient(name)) {
            assert_eq!(bits(ga), bits(gb), "gradient of {name}");
            compared += 1;
        }
    }
    assert_eq!(compared, 62, "every parameter's gradient compared");
}

#[test]
fn a_data_parallel_session_over_one_process_trains_like_the_plain_one() {
    // The averaging over one rank is the identity: the same losses and weights, bit for
    // bit, with a DistAllReduce node per bucket in the backward phase.
    let (images, labels) = formula::batch(8, 32, 10).unwrap();
    let sgd = wick_ops::SgdParams {
        lr: 0.1,
        momentum: 0.9,
        ..Default::default()
    };
    let mut plain = Session::training(common::config(), 8, 32, sgd.into(), &Device::Cpu).unwrap();
    let comm = std::sync::Arc::new(wick_graph::collective::SingleProcess);
    // The data-parallel graph with every pass: its all-reduces feed one merged update.
    let every_pass = TrainOptions {
        passes: PassSet::all(),
        ..sgd.into()
    };
    let mut dp = Session::training_data_parallel(
        common::config(),
        8,
        32,
        every_pass,
        comm,
        &Default::default(),
        &Device::Cpu,
    )
    .unwrap();
    let all_reduce = dp
        .executor()
        .graph()
        .nodes()
        .iter()
        .filter(|n| n.op.kernel().name(wick_ops::DeviceKind::Cpu) == "DistAllReduce")
        .count();
    assert!(all_reduce >= 1, "no DistAllReduce node");
    for s in [&mut plain, &mut dp] {
        s.init_weights(WeightInit::Formula).unwrap();
    }
    for _ in 0..2 {
        let (a, b) = (
            plain.step(&images, &labels).unwrap(),
            dp.step(&images, &labels).unwrap(),
        );
        assert_eq!(a.to_bits(), b.to_bits());
    }
    let (a, b) = (plain.state_dict().unwrap(), dp.state_dict().unwrap());
    for (name, t) in &a {
        let diff = max_rel_diff(t, &b[name]).unwrap();
        assert_eq!(diff, 0.0, "{name}");
    }
}
