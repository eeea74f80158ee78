//! Images of any size the model accepts, square or not, and a clear error below that.
//! The limits are PyTorch's own (checked with torchvision 0.29.2): every size runs in
//! inference, and training refuses a last batch norm with one value per channel
//! (`Expected more than 1 value per channel when training`) at batch 1 below 33x33 with
//! the ImageNet stem and below 9x9 with the CIFAR stem.

mod common;

use candle_core::Device;
use common::assert_mentions;
use wick_graph::Mode;
use wick_models::data::{BatchSource, SyntheticImages};
use wick_models::{Depth, ImageSize, ResNetConfig, Session, Stem, WeightInit};
use wick_ops::SgdParams;

fn r18(stem: Stem) -> ResNetConfig {
    ResNetConfig::new(Depth::R18, stem, 10).unwrap()
}

#[test]
fn the_smallest_sizes_are_pytorchs() {
    for (stem, train_min) in [(Stem::ImageNet, 33), (Stem::Cifar, 9)] {
        let c = r18(stem);
        assert_eq!(
            c.smallest_image_size(Mode::Eval, 1),
            Some(ImageSize::square(1))
        );
        assert_eq!(
            c.smallest_image_size(Mode::Train, 1),
            Some(ImageSize::square(train_min)),
            "{stem:?}"
        );
        assert_eq!(
            c.smallest_image_size(Mode::Train, 2),
            Some(ImageSize::square(1))
        );
    }
}

#[test]
fn too_small_images_name_the_layer_and_the_smallest_size() {
    let sgd = SgdParams::default();
    for (stem, size, min) in [(Stem::ImageNet, 32, "33x33"), (Stem::Cifar, 8, "9x9")] {
        let e = Session::training(r18(stem), 1, size, sgd.into(), &Device::Cpu)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("images of {size}x{size}"))
                && e.contains(&format!("smallest square size it accepts is {min}"))
                && e.contains("layer `layer4.0.bn1`")
                && e.contains("more than one value per channel"),
            "{stem:?}: {e}"
        );
    }
    // A non-square size with one side large enough is accepted, as in PyTorch.
    let tall = ImageSize::new(1, 33);
    Session::training(r18(Stem::ImageNet), 1, tall, sgd.into(), &Device::Cpu).unwrap();
}

#[test]
fn non_square_batches_train_and_infer_and_wrong_shapes_are_refused() {
    let size = ImageSize::new(50, 37);
    let config = r18(Stem::ImageNet);
    let mut train =
        Session::training(config, 2, size, SgdParams::default().into(), &Device::Cpu).unwrap();
    train.init_weights(WeightInit::Torchvision(0)).unwrap();
    let (images, labels) = SyntheticImages::new(10, 2, size, 1)
        .unwrap()
        .next_batch()
        .unwrap();
    assert_eq!(images.dims(), [2, 3, 37, 50]);
    let loss = train.step(&images, &labels).unwrap();
    assert!(loss.is_finite() && loss > 0.0, "{loss}");
    let mut infer = Session::inference(config, 2, size, &Device::Cpu).unwrap();
    infer.copy_weights_from(&train).unwrap();
    assert_eq!(infer.forward(&images).unwrap().dims(), [2, 10]);
    assert_eq!(infer.image_size().to_string(), "50x37");
    // The transposed batch is not what the session was built for.
    let e = infer
        .forward(&images.transpose(2, 3).unwrap().contiguous().unwrap())
        .unwrap_err()
        .to_string();
    assert_mentions(&e, &["images", "37, 50", "50, 37"]);
}

/// Every zoo model at the smallest size it accepts (and a non-square one just above):
/// a training step with a finite loss, and an inference run; one pixel less is an error
/// naming the smallest size. Planes shrink below the kernels there (a 5x5 depthwise
/// convolution on 1x1 planes), where only padding is read.
#[test]
fn every_zoo_model_runs_at_its_smallest_size_and_refuses_below() {
    use wick_models::{registry, ModelConfig};
    // A ViT is built for one size (its own test below).
    for arch in registry::MODELS
        .iter()
        .filter(|a| !a.has_stem && a.patch.is_none())
    {
        let config = ModelConfig::new(arch, 10).unwrap();
        let min = config
            .smallest_image_size(Mode::Train, 2)
            .expect("some size trains");
        let size = ImageSize {
            width: min.width + 3,
            height: min.height,
        };
        let mut s = Session::training(config, 2, size, SgdParams::default().into(), &Device::Cpu)
            .unwrap_or_else(|e| panic!("{}: {e}", arch.name));
        s.init_weights(WeightInit::Torchvision(1)).unwrap();
        let (x, y) = wick_models::init::formula::batch(2, size, 10).unwrap();
        let loss = s.step(&x, &y).unwrap();
        assert!(loss.is_finite(), "{}: loss {loss}", arch.name);
        let mut eval = Session::inference(config, 2, size, &Device::Cpu).unwrap();
        eval.init_weights(WeightInit::Torchvision(1)).unwrap();
        assert_eq!(eval.forward(&x).unwrap().dims(), &[2, 10]);
        if min.height > 1 {
            let below = ImageSize::square(min.height - 1);
            let err =
                Session::training(config, 2, below, SgdParams::default().into(), &Device::Cpu)
                    .unwrap_err()
                    .to_string();
            assert!(err.contains(&min.to_string()), "{}: {err}", arch.name);
        }
    }
}
