//! CIFAR-10's binary files.

use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::{seed_for, Batch, BatchSource};
use crate::error::{ModelError, Result};

/// CIFAR-10 from its binary files (`data_batch_1.bin` ... `data_batch_5.bin`, or
/// `test_batch.bin`): 10 classes of 32x32 images, normalised with the dataset's mean and
/// standard deviation, reshuffled every epoch.
#[derive(Debug, Clone)]
pub struct Cifar10 {
    /// Shared between clones (one per loader thread), never copied.
    images: std::sync::Arc<[u8]>,
    labels: std::sync::Arc<[u8]>,
    order: Vec<usize>,
    batch: usize,
    seed: u64,
    /// The next batch's number, from 0 (epochs of `len / batch` batches).
    next: u64,
    /// The epoch `order` is shuffled for.
    order_epoch: Option<u64>,
    augment: bool,
    /// With `augment`: whether the crop and the flip are on (both, by default).
    crop: bool,
    flip: bool,
}

const CIFAR_RECORD: usize = 1 + 3 * 32 * 32;
const CIFAR_MEAN: [f32; 3] = [0.4914, 0.4822, 0.4465];
const CIFAR_STD: [f32; 3] = [0.2470, 0.2435, 0.2616];

impl Cifar10 {
    /// Reads the training files (`train`) or the test file from `dir`.
    pub fn open(dir: &Path, train: bool, batch: usize, seed: u64) -> Result<Self> {
        let files: Vec<PathBuf> = if train {
            (1..=5)
                .map(|i| dir.join(format!("data_batch_{i}.bin")))
                .collect()
        } else {
            vec![dir.join("test_batch.bin")]
        };
        let (mut images, mut labels) = (Vec::new(), Vec::new());
        for f in &files {
            // Only regular files: a FIFO or a device would block or never end.
            match std::fs::metadata(f) {
                Ok(meta) if !meta.is_file() => return Err(ModelError::Data {
                    path: f.clone(),
                    message:
                        "not a regular file (a folder, FIFO or device): give CIFAR-10's binary file"
                            .into(),
                }),
                _ => {}
            }
            let bytes = std::fs::read(f).map_err(ModelError::io(f))?;
            if bytes.is_empty() || bytes.len() % CIFAR_RECORD != 0 {
                return Err(ModelError::Data {
                    path: f.clone(),
                    message: format!(
                        "{} bytes is not a whole number of {CIFAR_RECORD}-byte CIFAR-10 records",
                        bytes.len()
                    ),
                });
            }
            for rec in bytes.chunks_exact(CIFAR_RECORD) {
                if rec[0] > 9 {
                    return Err(ModelError::Data {
                        path: f.clone(),
                        message: format!("label {} is not a CIFAR-10 class", rec[0]),
                    });
                }
                labels.push(rec[0]);
                images.extend_from_slice(&rec[1..]);
            }
        }
        // Training draws whole batches; evaluation pads the last one.
        if (train && labels.len() < batch) || labels.is_empty() {
            let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
            return Err(ModelError::Config(format!(
                "{}: {} images are fewer than one {} batch of {batch}",
                names.join(", "),
                labels.len(),
                if train { "training" } else { "evaluation" }
            )));
        }
        let order = (0..labels.len()).collect();
        Ok(Cifar10 {
            images: images.into(),
            labels: labels.into(),
            order,
            batch,
            seed,
            next: 0,
            order_epoch: None,
            augment: false,
            crop: true,
            flip: true,
        })
    }

    /// Number of images.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are no images.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The standard CIFAR augmentation for training batches: a random 32x32 crop of the
    /// image zero-padded by 4 pixels on each side, and a horizontal flip half of the time
    /// (torchvision's `RandomCrop(32, padding=4)` and `RandomHorizontalFlip()`). It runs
    /// where `next_batch` runs: in the [`Prefetcher`](super::Prefetcher)'s thread.
    pub fn with_augmentation(mut self, on: bool) -> Self {
        self.augment = on;
        self.flip = on;
        self
    }

    /// The same source with the random crop (4-pixel padding) and the horizontal flip
    /// chosen apart: flips are wrong for digits and text. The random draws are the same
    /// whichever are on, so a run's order and crops do not depend on the flip.
    pub fn with_augmentation_parts(mut self, crop: bool, flip: bool) -> Self {
        self.augment = crop || flip;
        self.crop = crop;
        self.flip = flip;
        self
    }

    /// The number of batches of `batch` that visit every image once, the last one
    /// partial.
    pub fn batches_in_order(&self, batch: usize) -> usize {
        self.len().div_ceil(batch.max(1))
    }

    /// Batch `index` of the images in file order, for evaluation: `batch` images
    /// (normalised, never augmented), the last batch padded with zero images; the labels
    /// of the real images only; and how many are real.
    pub fn batch_in_order(&self, index: usize, batch: usize) -> Result<(Tensor, Tensor, usize)> {
        let start = index * batch;
        if batch == 0 || start >= self.len() {
            return Err(ModelError::Config(format!(
                "evaluation batch {index} of {batch} images is past the {} images",
                self.len()
            )));
        }
        let real = batch.min(self.len() - start);
        let mut data = vec![0f32; batch * 3 * 32 * 32];
        let mut labels = Vec::with_capacity(real);
        for (slot, i) in (start..start + real).enumerate() {
            self.write_image(i, &mut data[slot * 3 * 1024..(slot + 1) * 3 * 1024], None);
            labels.push(self.labels[i] as i64);
        }
        Ok((
            Tensor::from_vec(data, (batch, 3, 32, 32), &Device::Cpu)?,
            Tensor::new(labels, &Device::Cpu)?,
            real,
        ))
    }

    /// Writes image `i`, normalised, into `out` (3x32x32), shifted by `crop` = (dy, dx,
    /// flip) within its 4-pixel zero padding when given.
    fn write_image(&self, i: usize, out: &mut [f32], crop: Option<(usize, usize, bool)>) {
        let px = 32 * 32;
        let img = &self.images[i * 3 * px..(i + 1) * 3 * px];
        let (dy, dx, flip) = crop.unwrap_or((4, 4, false));
        for c in 0..3 {
            for y in 0..32 {
                for x in 0..32 {
                    // The source pixel in the padded image's coordinates, then in the image's.
                    let sx = if flip { 31 - x } else { x };
                    let (py, px_) = (y + dy, sx + dx);
                    let v = if (4..36).contains(&py) && (4..36).contains(&px_) {
                        let v = img[c * px + (py - 4) * 32 + (px_ - 4)];
                        (v as f32 / 255.0 - CIFAR_MEAN[c]) / CIFAR_STD[c]
                    } else {
                        0.0
                    };
                    out[c * px + y * 32 + x] = v;
                }
            }
        }
    }

    /// Shuffles the order for `epoch` (a function of the seed and the epoch alone).
    fn shuffle_for(&mut self, epoch: u64) {
        if self.order_epoch != Some(epoch) {
            self.order = (0..self.labels.len()).collect();
            self.order
                .shuffle(&mut StdRng::seed_from_u64(seed_for(self.seed, epoch)));
            self.order_epoch = Some(epoch);
        }
    }
}

impl BatchSource for Cifar10 {
    fn next_batch(&mut self) -> Result<Batch> {
        let per_epoch = (self.labels.len() / self.batch) as u64;
        let (epoch, within) = (self.next / per_epoch, (self.next % per_epoch) as usize);
        self.shuffle_for(epoch);
        // The augmentation's randomness, per batch (a stream apart from the order's).
        let mut rng = StdRng::seed_from_u64(seed_for(!self.seed, self.next));
        self.next += 1;
        let pos = within * self.batch;
        let size = 3 * 32 * 32;
        let mut data = vec![0f32; self.batch * size];
        let mut labels = Vec::with_capacity(self.batch);
        for slot in 0..self.batch {
            let i = self.order[pos + slot];
            let crop = self.augment.then(|| {
                let (dy, dx, flip) = (
                    rng.random_range(0..=8usize),
                    rng.random_range(0..=8usize),
                    rng.random_bool(0.5),
                );
                // Offset 4 of the padded image is the image itself.
                if self.crop {
                    (dy, dx, flip && self.flip)
                } else {
                    (4, 4, flip && self.flip)
                }
            });
            self.write_image(i, &mut data[slot * size..(slot + 1) * size], crop);
            labels.push(self.labels[i] as i64);
        }
        Ok((
            Tensor::from_vec(data, (self.batch, 3, 32, 32), &Device::Cpu)?,
            Tensor::new(labels, &Device::Cpu)?,
        ))
    }

    fn seek(&mut self, index: u64) -> Result<()> {
        self.next = index;
        Ok(())
    }
}
