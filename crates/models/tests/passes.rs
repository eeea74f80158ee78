//! Graph passes on the ResNet family: the subgraph counts of the pass log, the graph they
//! leave, and fused graphs giving the unfused graph's outputs (issue #14's 1e-4 relative
//! bound; here they agree far closer), also after the weights change.

mod common;

use candle_core::{Device, Tensor};
use wick_graph::{PassName, PassSet};
use wick_models::data::{BatchSource, SyntheticImages};
use wick_models::init::formula;
use wick_models::{Depth, ResNetConfig, Session, Stem, WeightInit};
use wick_ops::max_rel_diff;

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
            [("fold_batch_norm", folds), ("conv_epilogue", epilogues)],
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
        let kernels: Vec<&str> = fused
            .executor()
            .graph()
            .nodes()
            .iter()
            .map(|n| n.op.kernel().name(wick_ops::DeviceKind::Cpu))
            .collect();
        assert!(!kernels.contains(&"BatchNormForwardInference") && !kernels.contains(&"Add"));
        assert_eq!(
            kernels
                .iter()
                .filter(|k| **k == "ConvBiasActivationForward")
                .count(),
            folds
        );
        // A training graph has no inference batch norm: nothing matches.
        let train = Session::training(
            config,
            2,
            64,
            wick_ops::SgdParams::default().into(),
            &Device::Cpu,
        )
        .unwrap();
        assert_eq!(
            counts(&train),
            [("fold_batch_norm", 0), ("conv_epilogue", 0)]
        );
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
