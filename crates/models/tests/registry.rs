//! The model registry: every name builds, is listed where a name is unknown, and the
//! settings a model lacks are refused by name.

mod common;

use candle_core::DType;
use common::assert_mentions;
use wick_graph::{GraphBuilder, Mode};
use wick_models::{registry, Depth, ModelConfig, ResNetConfig, Stem};

#[test]
fn every_registered_name_builds_and_is_listed_when_a_name_is_unknown() {
    let names = registry::names();
    assert_eq!(names.len(), 17, "{names:?}");
    let err = ModelConfig::by_name("resnet19", Stem::ImageNet, None)
        .unwrap_err()
        .to_string();
    for name in &names {
        assert!(err.contains(name), "`{name}` missing from: {err}");
        // A ViT is built for one image size: 64 (4x4 patches of 16, 2x2 of 32).
        let config = ModelConfig::by_name(name, Stem::ImageNet, Some(7))
            .unwrap()
            .with_image_size(64)
            .unwrap();
        assert_eq!(config.name(), *name);
        // The classifier's bias is the state dict's last tensor, with 7 classes.
        let spec = config.state_spec().unwrap();
        assert_eq!(spec.last().unwrap().shape, [7], "{name}");
        let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
        let x = b.input("images", &[1, 3, 64, 64], DType::F32).unwrap();
        let logits = config.forward(&mut b, x).unwrap();
        assert_eq!(b.shape(logits), &[1, 7], "{name}");
    }
    let mut unique = names.clone();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "a name registered twice");
}

#[test]
fn a_vit_takes_square_images_of_its_size_and_its_position_embedding_follows_it() {
    let vit = ModelConfig::by_name("vit_b_16", Stem::ImageNet, Some(10)).unwrap();
    let pos = |c: ModelConfig| {
        let spec = c.state_spec().unwrap();
        spec.into_iter()
            .find(|s| s.name == "encoder.pos_embedding")
            .unwrap()
            .shape
    };
    // torchvision's default 224: 14x14 patches and the class token.
    assert_eq!(pos(vit), [1, 197, 768]);
    assert_eq!(pos(vit.with_image_size(64).unwrap()), [1, 17, 768]);
    let e = vit.with_image_size(50).unwrap_err().to_string();
    assert_mentions(&e, &["vit_b_16", "multiple of its patch 16", "50"]);
    let e = vit
        .for_images(wick_models::ImageSize::new(64, 48))
        .unwrap_err()
        .to_string();
    assert_mentions(&e, &["square", "64x48"]);
    // A graph of other images than the model's size names both.
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let x = b.input("images", &[1, 3, 32, 32], DType::F32).unwrap();
    let e = vit.forward(&mut b, x).unwrap_err().to_string();
    assert_mentions(&e, &["224x224", "32x32"]);
}

#[test]
fn a_resnet_config_is_the_registrys_resnet() {
    let typed: ModelConfig = ResNetConfig::new(Depth::R50, Stem::Cifar, 10)
        .unwrap()
        .into();
    let named = ModelConfig::by_name("resnet50", Stem::Cifar, None).unwrap();
    assert_eq!(typed, named);
    assert_eq!(named.describe(), "resnet50 (Cifar stem, 10 classes)");
    assert_eq!(
        typed.state_spec().unwrap().len(),
        ModelConfig::by_name("resnet50", Stem::ImageNet, None)
            .unwrap()
            .state_spec()
            .unwrap()
            .len()
    );
}

#[test]
fn settings_a_model_lacks_are_refused_by_name() {
    let mobilenet = ModelConfig::by_name("mobilenet_v2", Stem::Cifar, None).unwrap_err();
    assert!(
        mobilenet.to_string().contains("mobilenet_v2 has no stem"),
        "{mobilenet}"
    );
    let resnet = ModelConfig::by_name("resnet18", Stem::ImageNet, None).unwrap();
    let err = resnet.with_dropout(0.1).unwrap_err().to_string();
    assert!(err.contains("resnet18 has no dropout"), "{err}");
    let vgg = ModelConfig::by_name("vgg11_bn", Stem::ImageNet, None).unwrap();
    assert_eq!(vgg.dropout, 0.5, "torchvision's default");
    assert!(vgg.with_stochastic_depth(0.1).is_err());
    let err = vgg.with_dropout(1.0).unwrap_err().to_string();
    assert!(err.contains("probability in [0, 1)"), "{err}");
    assert_eq!(vgg.with_dropout(0.0).unwrap().dropout, 0.0);
    let convnext = ModelConfig::by_name("convnext_tiny", Stem::ImageNet, None).unwrap();
    assert_eq!(convnext.stochastic_depth, 0.1);
}

/// Every node carries torchvision's module path: a `Conv2dNormActivation`'s activation is
/// `<path>.2`, a squeeze-excitation's gates `activation` and `scale_activation`.
#[test]
fn activations_carry_torchvisions_module_names() {
    use wick_ops::{Activation, Kernel};
    let layers_of = |name: &str, kernel: Kernel| -> Vec<String> {
        let config = ModelConfig::by_name(name, Stem::ImageNet, Some(5)).unwrap();
        let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
        let x = b.input("images", &[1, 3, 64, 64], DType::F32).unwrap();
        let logits = config.forward(&mut b, x).unwrap();
        b.output(logits);
        let graph = b.finish();
        graph
            .nodes()
            .iter()
            .filter(|n| n.kernel() == kernel)
            .filter_map(|n| n.origin.layer.clone())
            .collect()
    };
    let relu6 = layers_of("mobilenet_v2", Kernel::Activation(Activation::Relu6));
    assert_eq!(
        relu6.first().map(String::as_str),
        Some("features.0.2"),
        "{relu6:?}"
    );
    assert!(
        relu6.contains(&"features.1.conv.0.2".to_string()),
        "{relu6:?}"
    );
    let hardsigmoid = layers_of(
        "mobilenet_v3_small",
        Kernel::Activation(Activation::Hardsigmoid),
    );
    assert_eq!(
        hardsigmoid.first().map(String::as_str),
        Some("features.1.block.1.scale_activation"),
        "{hardsigmoid:?}"
    );
}
