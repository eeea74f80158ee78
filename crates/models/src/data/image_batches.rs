//! Batches from an [`ImageFolder`]: read, decoded, transformed and collated, each stage
//! timed for the profiler's input pipeline view.

use std::sync::Arc;
use std::time::Instant;

use candle_core::{Device, Tensor};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use wick_graph::InputStage;

use super::decode::RgbImage;
use super::image_folder::ImageFolder;
use super::transforms::ImageTransform;
use super::{seed_for, Batch, BatchSource, StageReport};
use crate::error::{ModelError, Result};

/// An [`ImageFolder`]'s images as batches: reshuffled every epoch (epochs of
/// `len / batch` batches, the last partial batch dropped as `drop_last=True` does), each
/// image transformed with its own random draws. Every batch is a function of the seed and
/// its index alone, so loader threads and resumed runs see the same images and crops.
#[derive(Debug, Clone)]
pub struct ImageBatches {
    folder: ImageFolder,
    transform: ImageTransform,
    batch: usize,
    seed: u64,
    next: u64,
    order: Arc<[usize]>,
    order_epoch: Option<u64>,
    skip_bad: bool,
    stages: StageReport,
    scratch: Vec<f32>,
}

impl ImageBatches {
    /// Batches of `batch` images of `folder` through `transform`, from `seed`.
    pub fn new(
        folder: ImageFolder,
        transform: ImageTransform,
        batch: usize,
        seed: u64,
    ) -> Result<Self> {
        if batch == 0 || folder.len() < batch {
            return Err(ModelError::Data {
                path: folder.root().to_path_buf(),
                message: format!(
                    "{} images are fewer than one batch of {batch}",
                    folder.len()
                ),
            });
        }
        let size = transform.size();
        crate::limits::check_image_batch("a batch", batch, size)?;
        Ok(ImageBatches {
            folder,
            transform,
            batch,
            seed,
            next: 0,
            order: Arc::from([]),
            order_epoch: None,
            skip_bad: false,
            stages: StageReport::default(),
            scratch: Vec::new(),
        })
    }

    /// Skips images that cannot be read or decoded (taking the next one in the epoch's
    /// order instead) and counts them, rather than stopping at the first.
    pub fn skip_bad_images(mut self, on: bool) -> Self {
        self.skip_bad = on;
        self
    }

    /// The folder.
    pub fn folder(&self) -> &ImageFolder {
        &self.folder
    }

    /// Batches per epoch.
    pub fn batches_per_epoch(&self) -> usize {
        self.folder.len() / self.batch
    }

    /// The number of batches of `batch` that visit every image once, the last partial.
    pub fn batches_in_order(&self, batch: usize) -> usize {
        self.folder.len().div_ceil(batch.max(1))
    }

    /// Batch `index` of the images in file order, for evaluation: `batch` images (the
    /// last batch padded with zero images), the labels of the real ones, and how many are
    /// real. The transform's random draws are seeded by the image's place.
    pub fn batch_in_order(
        &mut self,
        index: usize,
        batch: usize,
    ) -> Result<(Tensor, Tensor, usize)> {
        let start = index * batch;
        if batch == 0 || start >= self.folder.len() {
            return Err(ModelError::Config(format!(
                "evaluation batch {index} of {batch} images is past the {} images",
                self.folder.len()
            )));
        }
        let real = batch.min(self.folder.len() - start);
        let picks: Vec<usize> = (start..start + real).collect();
        let (images, labels, _) = self.collate(&picks, batch, index as u64)?;
        Ok((images, labels, real))
    }

    fn shuffle_for(&mut self, epoch: u64) {
        if self.order_epoch != Some(epoch) {
            let mut order: Vec<usize> = (0..self.folder.len()).collect();
            order.shuffle(&mut StdRng::seed_from_u64(seed_for(self.seed, epoch)));
            self.order = order.into();
            self.order_epoch = Some(epoch);
        }
    }

    /// Reads, decodes and transforms the images at `picks` (indices into the folder) into
    /// a batch of `slots` images (zero-padded), the transform seeded by `key` and each
    /// image's slot. With `skip_bad`, an unreadable image is replaced by the next in
    /// `picks`' continuation order.
    fn collate(
        &mut self,
        picks: &[usize],
        slots: usize,
        key: u64,
    ) -> Result<(Tensor, Tensor, usize)> {
        let size = self.transform.size();
        let per = 3 * size.pixels();
        let mut data = vec![0f32; slots * per];
        let mut labels = Vec::with_capacity(picks.len());
        let mut skipped = 0;
        let n = self.folder.len();
        for (slot, &first) in picks.iter().enumerate() {
            let mut pick = first;
            let image = loop {
                match self.load(pick) {
                    Ok(img) => break img,
                    Err(e) if self.skip_bad && skipped < n => {
                        skipped += 1;
                        eprintln!("wick: skipped an unreadable image: {e}");
                        pick = (pick + picks.len()) % n;
                    }
                    Err(e) => return Err(e),
                }
            };
            let started = Instant::now();
            let mut rng = StdRng::seed_from_u64(seed_for(seed_for(!self.seed, key), slot as u64));
            self.transform.apply(
                &image,
                &mut rng,
                &mut data[slot * per..(slot + 1) * per],
                &mut self.scratch,
            );
            self.stages
                .stages
                .add(InputStage::Augment, started.elapsed().as_secs_f64());
            labels.push(self.folder.samples()[pick].1 as i64);
        }
        let started = Instant::now();
        let images = Tensor::from_vec(data, (slots, 3, size.height, size.width), &Device::Cpu)?;
        let labels = Tensor::new(labels, &Device::Cpu)?;
        self.stages
            .stages
            .add(InputStage::Collate, started.elapsed().as_secs_f64());
        self.stages.images += picks.len();
        self.stages.skipped += skipped;
        Ok((images, labels, skipped))
    }

    /// Reads and decodes image `i`, timing both.
    fn load(&mut self, i: usize) -> Result<RgbImage> {
        let path = &self.folder.samples()[i].0;
        let started = Instant::now();
        let bytes = std::fs::read(path).map_err(ModelError::io(path))?;
        let read = started.elapsed().as_secs_f64();
        self.stages.stages.add(InputStage::Read, read);
        let image = RgbImage::decode(&bytes, path);
        self.stages
            .stages
            .add(InputStage::Decode, started.elapsed().as_secs_f64() - read);
        image
    }
}

impl BatchSource for ImageBatches {
    fn next_batch(&mut self) -> Result<Batch> {
        let per_epoch = self.batches_per_epoch() as u64;
        let (epoch, within) = (self.next / per_epoch, (self.next % per_epoch) as usize);
        self.shuffle_for(epoch);
        let key = self.next;
        self.next += 1;
        let order = self.order.clone();
        let picks = &order[within * self.batch..(within + 1) * self.batch];
        let (images, labels, _) = self.collate(picks, self.batch, key)?;
        Ok((images, labels))
    }

    fn seek(&mut self, index: u64) -> Result<()> {
        self.next = index;
        Ok(())
    }

    fn take_stages(&mut self) -> Option<StageReport> {
        Some(std::mem::take(&mut self.stages))
    }
}
