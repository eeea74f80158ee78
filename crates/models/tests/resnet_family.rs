//! The ResNet family's structure: torchvision's op order (SINGA's documented listing),
//! state-dict names and shapes, parameter counts, stems and class counts.

use candle_core::DType;
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
    assert!(
        msg.contains("conv2d") && msg.contains("[1, 3, 0, 0]") && msg.contains("at least 1"),
        "{msg}"
    );
    assert!(ResNetConfig::new(Depth::R18, Stem::Cifar, 0).is_err());
    assert!("resnet19"
        .parse::<Depth>()
        .unwrap_err()
        .to_string()
        .contains("resnet19"));
}
