//! train_resnet's data: the training batches (a source per loader thread), the test data,
//! and scoring on it.

use anyhow::Result;
use wick::models::data::transforms::{
    ImageTransform, Normalize, RandomHorizontalFlip, RandomResizedCrop,
};
use wick::models::data::{
    BatchFile, BatchSource, Cifar10, ImageBatches, ImageFolder, SourceFactory, SyntheticImages,
};
use wick::models::evaluate::{evaluate, Scores};
use wick::models::{ImageSize, Session};

use crate::Args;

/// The sum of two sets of scores.
pub fn add(mut total: Scores, s: Scores) -> Scores {
    total.images += s.images;
    total.loss_sum += s.loss_sum;
    total.top1 += s.top1;
    total.top5 += s.top5;
    total.non_finite += s.non_finite;
    total
}

/// What an epoch is evaluated on.
pub enum Test {
    /// CIFAR's whole test set, every image once.
    Cifar(Box<Cifar10>),
    /// An ImageFolder's validation images, every one once (Resize + CenterCrop).
    Folder(Box<ImageBatches>),
    /// Fixed held-out batches (synthetic data, a batch file).
    Batches(Vec<(wick::candle_core::Tensor, wick::candle_core::Tensor)>),
}

/// The training batches (a source per loader thread), the test data, the batch shape,
/// a dataset's steps per epoch and an ImageFolder's class names.
pub struct Data {
    pub train: SourceFactory,
    pub test: Test,
    pub batch: usize,
    pub size: ImageSize,
    pub steps_per_epoch: Option<usize>,
    pub classes: Option<Vec<String>>,
}

/// Whether --data-dir holds CIFAR-10's binaries rather than an ImageFolder.
pub fn is_cifar(dir: &std::path::Path) -> bool {
    dir.join("data_batch_1.bin").exists() || dir.join("test_batch.bin").exists()
}

/// An ImageFolder --data-dir's training and validation parts (None for CIFAR or no
/// --data-dir).
pub fn image_folder(a: &Args) -> Result<Option<(ImageFolder, ImageFolder)>> {
    match &a.data_dir {
        Some(dir) if !is_cifar(dir) => {
            Ok(Some(ImageFolder::open_train_val(dir, a.val_split, a.seed)?))
        }
        _ => Ok(None),
    }
}

/// torchvision's ImageNet transforms at --image-size, as --augmentation asks: training
/// with RandomResizedCrop (crop) and RandomHorizontalFlip (flip); without the crop,
/// evaluation's Resize + CenterCrop.
fn folder_transforms(a: &Args) -> Result<(ImageTransform, ImageTransform)> {
    let eval = ImageTransform::eval(a.image_size);
    let train = match a.augmentation()? {
        (true, flip) => ImageTransform::Train {
            crop: RandomResizedCrop::new(a.image_size),
            flip: flip.then_some(RandomHorizontalFlip { p: 0.5 }),
            normalize: Normalize::IMAGENET,
        },
        (false, true) => anyhow::bail!(
            "--augmentation flip on an ImageFolder: the flip comes with RandomResizedCrop; give crop,flip, crop or none"
        ),
        (false, false) => eval,
    };
    Ok((train, eval))
}

/// Opens the data the flags name: a batch file, CIFAR-10 binaries, or synthetic images.
pub fn open_data(
    a: &Args,
    num_classes: usize,
    folder: Option<(ImageFolder, ImageFolder)>,
) -> Result<Data> {
    Ok(if let Some(path) = &a.data {
        let file = BatchFile::open(path)?;
        let (batch, size) = (
            file.images.dim(0)?,
            ImageSize::new(file.images.dim(3)?, file.images.dim(2)?),
        );
        let mut held_out = file.clone();
        Data {
            test: Test::Batches(vec![held_out.next_batch()?]),
            train: Box::new(move || Ok(Box::new(file.clone()) as Box<dyn BatchSource>)),
            batch,
            size,
            steps_per_epoch: None,
            classes: None,
        }
    } else if let Some((train, val)) = folder {
        let (train_t, eval_t) = folder_transforms(a)?;
        let classes = train.classes().to_vec();
        let train = ImageBatches::new(train, train_t, a.batch_size, a.seed)?
            .skip_bad_images(a.skip_bad_images);
        let test =
            ImageBatches::new(val.clone(), eval_t, 1, a.seed)?.skip_bad_images(a.skip_bad_images);
        Data {
            steps_per_epoch: Some(train.batches_per_epoch()),
            train: Box::new(move || Ok(Box::new(train.clone()) as Box<dyn BatchSource>)),
            test: Test::Folder(Box::new(test)),
            batch: a.batch_size,
            size: a.image_size,
            classes: Some(classes),
        }
    } else if let Some(dir) = &a.data_dir {
        let (crop, flip) = a.augmentation()?;
        let train =
            Cifar10::open(dir, true, a.batch_size, a.seed)?.with_augmentation_parts(crop, flip);
        let test = Cifar10::open(dir, false, a.batch_size, a.seed + 1)?;
        Data {
            steps_per_epoch: Some(train.len() / a.batch_size),
            train: Box::new(move || Ok(Box::new(train.clone()) as Box<dyn BatchSource>)),
            test: Test::Cifar(Box::new(test)),
            batch: a.batch_size,
            size: ImageSize::square(32),
            classes: None,
        }
    } else {
        let k = a.synthetic_classes(num_classes)?;
        let train = SyntheticImages::new(k, a.batch_size, a.image_size, a.seed + 1)?;
        let mut eval = SyntheticImages::new(k, a.batch_size, a.image_size, a.seed + 1_000_003)?;
        let held_out = (0..4)
            .map(|_| eval.next_batch())
            .collect::<Result<_, _>>()?;
        Data {
            train: Box::new(move || Ok(Box::new(train.clone()) as Box<dyn BatchSource>)),
            test: Test::Batches(held_out),
            batch: a.batch_size,
            size: a.image_size,
            steps_per_epoch: None,
            classes: None,
        }
    })
}

/// Scores on the test data: CIFAR's whole test set, or the held-out batches.
pub fn evaluate_on(evaluator: &mut Session, test: &Test, batch: usize) -> Result<Scores> {
    Ok(match test {
        Test::Cifar(c) => {
            let n = c.batches_in_order(batch);
            evaluate(evaluator, (0..n).map(|i| c.batch_in_order(i, batch)))?
        }
        Test::Folder(f) => {
            let mut f = (**f).clone();
            let n = f.batches_in_order(batch);
            evaluate(evaluator, (0..n).map(|i| f.batch_in_order(i, batch)))?
        }
        Test::Batches(held_out) => evaluate(
            evaluator,
            held_out
                .iter()
                .map(|(x, y)| Ok((x.clone(), y.clone(), batch))),
        )?,
    })
}
