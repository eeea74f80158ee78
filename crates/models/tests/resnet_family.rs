//! The ResNet family's structure: torchvision's op order (SINGA's documented listing),
//! state-dict names and shapes, parameter counts, stems and class counts.

mod common;

use candle_core::DType;
use common::assert_mentions;
use wick_graph::{GraphBuilder, Mode};
use wick_models::{Depth, ResNetConfig, Stem};
use wick_ops::Kernel;

fn forward_kernels(config: ResNetConfig, size: usize) -> Vec<Kernel> {
    let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    let x = b.input("images", &[1, 3, size, size], DType::F32).unwrap();
    config.forward(&mut b, x).unwrap();
    b.finish().nodes().iter().map(|n| n.op.kernel()).collect()
}

#[test]
fn resnet50_forward_follows_torchvision_and_singa_op_order() {
    use Kernel::*;
    let config = ResNetConfig::new(Depth::R50, Stem::ImageNet, 1000).unwrap();
    let mut expected = vec![ConvForward, BatchNormForwardTraining, ReLU, PoolingForward];
    for blocks in [3, 4, 6, 3] {
        for block in 0..blocks {
            expected.extend([ConvForward, BatchNormForwardTraining, ReLU]);
            expected.extend([ConvForward, BatchNormForwardTraining, ReLU]);
            expected.extend([ConvForward, BatchNormForwardTraining]);
            if block == 0 {
                // Every stage's first block has a downsample shortcut (stage 1: 64 -> 256 channels).
                expected.extend([ConvForward, BatchNormForwardTraining]);
            }
            expected.extend([Add, ReLU]);
        }
    }
    expected.extend([GlobalAvgPoolForward, Reshape, LinearForward]);
    assert_eq!(forward_kernels(config, 224), expected);
}

#[test]
fn every_depth_and_stem_records_with_torchvision_parameter_counts() {
    // torchvision's parameter counts (weights and biases, no running statistics).
    for (depth, params) in [
        (Depth::R18, 11_689_512usize),
        (Depth::R34, 21_797_672),
        (Depth::R50, 25_557_032),
        (Depth::R101, 44_549_160),
        (Depth::R152, 60_192_808),
    ] {
        let config = ResNetConfig::new(depth, Stem::ImageNet, 1000).unwrap();
        let spec = config.state_spec().unwrap();
        let count: usize = spec
            .iter()
            .filter(|s| !s.name.contains("running_"))
            .map(|s| s.shape.iter().product::<usize>())
            .sum();
        assert_eq!(count, params, "{}", depth.name());
        assert_eq!(spec.first().unwrap().name, "conv1.weight");
        assert_eq!(spec.last().unwrap().name, "fc.bias");
    }
    let cifar = ResNetConfig::new(Depth::R18, Stem::Cifar, 10).unwrap();
    let spec = cifar.state_spec().unwrap();
    assert_eq!(spec[0].shape, vec![64, 3, 3, 3]);
    assert!(spec
        .iter()
        .any(|s| s.name == "layer2.0.downsample.0.weight" && s.shape == vec![128, 64, 1, 1]));
    assert!(
        !forward_kernels(cifar, 32).contains(&Kernel::PoolingForward),
        "the CIFAR stem has no max pool"
    );
}

#[test]
fn any_input_that_survives_the_downsampling_builds_and_an_empty_one_fails_clearly() {
    let config = ResNetConfig::new(Depth::R18, Stem::ImageNet, 7).unwrap();
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let x = b.input("images", &[2, 3, 33, 40], DType::F32).unwrap();
    let logits = config.forward(&mut b, x).unwrap();
    assert_eq!(b.shape(logits), &[2, 7]);
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let x = b.input("images", &[1, 3, 0, 0], DType::F32).unwrap();
    let msg = config.forward(&mut b, x).unwrap_err().to_string();
    assert_mentions(&msg, &["conv2d", "[1, 3, 0, 0]", "at least 1"]);
    assert!(ResNetConfig::new(Depth::R18, Stem::Cifar, 0).is_err());
    assert!("resnet19"
        .parse::<Depth>()
        .unwrap_err()
        .to_string()
        .contains("resnet19"));
}

/// Issue #12: in a ResNet's training graph every node maps to a layer named as
/// torchvision's modules (`layer1.0.conv2`, `layer1.0.downsample.1`, `fc`, `loss`), every
/// backward node to its forward node, every optimizer node to the parameter it updates.
#[test]
fn every_node_of_a_training_step_maps_to_a_torchvision_layer() {
    for depth in [Depth::R18, Depth::R50] {
        let config = ResNetConfig::new(depth, Stem::ImageNet, 10).unwrap();
        let s = wick_models::Session::training(
            config,
            2,
            32,
            wick_ops::SgdParams::default().into(),
            &candle_core::Device::Cpu,
        )
        .unwrap();
        let g = s.executor().graph();
        let names: std::collections::HashSet<String> = config
            .state_spec()
            .unwrap()
            .into_iter()
            .filter_map(|t| t.name.rsplit_once('.').map(|(l, _)| l.to_string()))
            .collect();
        for (op_id, n) in g.nodes().iter().enumerate() {
            let layer = n
                .origin
                .layer
                .as_deref()
                .unwrap_or_else(|| panic!("{depth:?} OP_ID{op_id} has no layer"));
            // A module with parameters, or one of the parameter-free modules.
            let known = names.contains(layer)
                || ["relu", "maxpool", "avgpool", "flatten", "loss"].contains(&layer)
                || layer.ends_with(".relu")
                || names
                    .iter()
                    .any(|m| m.starts_with(&format!("{layer}.conv1")));
            assert!(known, "{depth:?} OP_ID{op_id}: unknown layer {layer}");
            match n.phase {
                wick_graph::Phase::Backward => {
                    let f = n
                        .origin
                        .forward_op
                        .expect("backward nodes know their forward node");
                    assert_eq!(g.nodes()[f].origin.layer.as_deref(), Some(layer));
                }
                wick_graph::Phase::Optimizer => {
                    let p = n.origin.parameter.as_deref().expect("the parameter");
                    assert_eq!(p.rsplit_once('.').map(|(l, _)| l), Some(layer));
                }
                wick_graph::Phase::Forward => {}
            }
        }
    }
}
