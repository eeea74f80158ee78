//! Image batches for the examples: a learnable synthetic dataset, CIFAR-10's binary files,
//! and exact batch files, with a [`Prefetcher`] that prepares the next batch on a
//! background thread while the current step runs.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;

use candle_core::{DType, Device, Tensor};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};

use crate::checkpoint::read_safetensors;
use crate::error::{ModelError, Result};
use crate::image::ImageSize;

/// A batch: images `[N, 3, H, W]` f32 and labels `[N]` i64.
pub type Batch = (Tensor, Tensor);

/// Something that yields batches.
pub trait BatchSource: Send {
    /// The next batch.
    fn next_batch(&mut self) -> Result<Batch>;
    /// Makes batch number `index` (from 0) the next one, exactly as an uninterrupted run
    /// would have produced it: data order and augmentation included. Resuming a training
    /// run needs it; a source that cannot says so.
    fn seek(&mut self, index: u64) -> Result<()> {
        Err(ModelError::Config(format!(
            "this data source cannot resume at batch {index}"
        )))
    }
}

/// A seed for batch or epoch `index` of a stream seeded with `seed` (SplitMix64 of both):
/// every batch's randomness is a function of the stream's seed and its index alone, so a
/// run can resume anywhere.
fn seed_for(seed: u64, index: u64) -> u64 {
    let mix = |mut z: u64| {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    mix(seed ^ mix(index))
}

/// A learnable synthetic dataset: each class has its own colour tint and a bright square
/// at a class-specific place, under Gaussian noise. A ResNet learns it in a few hundred
/// steps, so loss and accuracy visibly improve on a CPU.
#[derive(Debug, Clone)]
pub struct SyntheticImages {
    classes: usize,
    batch: usize,
    size: ImageSize,
    seed: u64,
    next: u64,
}

impl SyntheticImages {
    /// Batches of `batch` images of `size` (a side, or an [`ImageSize`]) from `classes`
    /// classes, from `seed`.
    pub fn new(
        classes: usize,
        batch: usize,
        size: impl Into<ImageSize>,
        seed: u64,
    ) -> Result<Self> {
        let size = size.into();
        if classes == 0 || size.height < 4 || size.width < 4 || batch == 0 {
            return Err(ModelError::Config(format!(
                "synthetic data needs at least 1 class, a batch of 1 and 4x4 images; got {classes} classes, batch {batch}, {size}"
            )));
        }
        crate::limits::check_allocation(
            &format!("a synthetic batch of {batch} images of {size}"),
            crate::limits::bytes_of(4, &[batch, 3, size.height, size.width]),
        )?;
        Ok(SyntheticImages {
            classes,
            batch,
            size,
            seed,
            next: 0,
        })
    }
}

impl BatchSource for SyntheticImages {
    fn next_batch(&mut self) -> Result<Batch> {
        let (n, k) = (self.batch, self.classes);
        let (h, w) = (self.size.height, self.size.width);
        let mut rng = StdRng::seed_from_u64(seed_for(self.seed, self.next));
        self.next += 1;
        let noise = Normal::new(0.0f32, 0.6).map_err(|e| ModelError::Config(e.to_string()))?;
        let mut data = vec![0f32; n * 3 * h * w];
        let mut labels = Vec::with_capacity(n);
        let grid = (k as f64).sqrt().ceil() as usize;
        let patch = (h.min(w) / (grid + 1)).max(2);
        for i in 0..n {
            let class = rng.random_range(0..k);
            labels.push(class as i64);
            let (gy, gx) = (class / grid, class % grid);
            let (y0, x0) = (gy * h / grid, gx * w / grid);
            for c in 0..3 {
                let tint = ((class * 3 + c) % 5) as f32 * 0.2 - 0.4;
                for y in 0..h {
                    for x in 0..w {
                        let inside = y >= y0 && y < y0 + patch && x >= x0 && x < x0 + patch;
                        let v = tint + noise.sample(&mut rng) + if inside { 2.0 } else { 0.0 };
                        data[((i * 3 + c) * h + y) * w + x] = v;
                    }
                }
            }
        }
        Ok((
            Tensor::from_vec(data, (n, 3, h, w), &Device::Cpu)?,
            Tensor::new(labels, &Device::Cpu)?,
        ))
    }

    fn seek(&mut self, index: u64) -> Result<()> {
        self.next = index;
        Ok(())
    }
}

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
            let bytes = std::fs::read(f).map_err(|source| ModelError::Io {
                path: f.clone(),
                source,
            })?;
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
        if labels.len() < batch {
            return Err(ModelError::Config(format!(
                "{} images are fewer than one batch of {batch}",
                labels.len()
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
    /// where `next_batch` runs: in the [`Prefetcher`]'s thread.
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

/// One exact batch from a safetensors file: `images` (f32 [N, 3, H, W]) and, when the
/// file has them, `labels` (integers `[N]`). Yields the same batch every time.
#[derive(Debug, Clone)]
pub struct BatchFile {
    /// The images.
    pub images: Tensor,
    /// The labels, if the file has them.
    pub labels: Option<Tensor>,
}

impl BatchFile {
    /// Reads and checks `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let mut t = read_safetensors(path)?;
        let bad = |message: String| ModelError::Data {
            path: path.to_path_buf(),
            message,
        };
        let images = t
            .remove("images")
            .ok_or_else(|| bad("has no tensor `images`".into()))?;
        let &[n, 3, _, _] = images.dims() else {
            return Err(bad(format!(
                "`images` must be [N, 3, H, W], got {:?}",
                images.dims()
            )));
        };
        // Images are read as written: floats are converted (f16, bf16, f64 to f32); 8-bit
        // or integer images would silently become 0-255 values where the model expects
        // normalised ones, so they are refused with what to do.
        let images = match images.dtype() {
            DType::F32 | DType::F16 | DType::BF16 | DType::F64 => images.to_dtype(DType::F32)?,
            other => {
                return Err(bad(format!(
                    "`images` are stored as {other:?}; wick reads float images (f32, f16, bf16 or f64), normalised as the model was trained: convert them (for 8-bit pixels, divide by 255 and normalise) before saving"
                )))
            }
        };
        let labels = match t.remove("labels") {
            None => None,
            Some(l) if l.dims() != [n] => {
                return Err(bad(format!(
                    "`labels` must have shape [{n}] (one per image), got {:?}",
                    l.dims()
                )))
            }
            Some(l) if l.dtype().is_int() => Some(l.to_dtype(DType::I64)?),
            Some(l) => {
                return Err(bad(format!(
                    "`labels` must be integer class indices (u8, u32, i16, i32 or i64), got {:?}",
                    l.dtype()
                )))
            }
        };
        Ok(BatchFile { images, labels })
    }
}

impl BatchSource for BatchFile {
    fn next_batch(&mut self) -> Result<Batch> {
        let labels = self
            .labels
            .clone()
            .ok_or_else(|| ModelError::Config("the batch file has no `labels`".into()))?;
        Ok((self.images.clone(), labels))
    }

    /// Every batch is the same one.
    fn seek(&mut self, _index: u64) -> Result<()> {
        Ok(())
    }
}

/// Makes a fresh data source (one per loader thread).
pub type SourceFactory = Box<dyn Fn() -> Result<Box<dyn BatchSource>> + Send + Sync>;

/// Prepares batches on background threads, a few ahead of the training loop. With
/// several threads each prepares every n-th batch of its own copy of the source (seeked
/// there), and the batches come out in order: the same stream as one thread gives.
pub struct Prefetcher {
    channels: Vec<mpsc::Receiver<Result<Batch>>>,
    next: std::cell::Cell<usize>,
    _workers: Vec<thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Prefetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prefetcher")
            .field("threads", &self.channels.len())
            .finish()
    }
}

/// Starts a loader thread named `wick-loader-{index}`, the name `top -H`, `perf` and
/// `renice` users find it by.
fn loader_thread(index: usize, body: impl FnOnce() + Send + 'static) -> thread::JoinHandle<()> {
    thread::Builder::new()
        .name(format!("wick-loader-{index}"))
        .spawn(body)
        .expect("the OS refused to start a data loader thread")
}

impl Prefetcher {
    /// Starts one thread that keeps up to `depth` batches of `source` ready.
    pub fn new(mut source: Box<dyn BatchSource>, depth: usize) -> Self {
        let (tx, rx) = mpsc::sync_channel(depth.max(1));
        let worker = loader_thread(0, move || loop {
            let batch = source.next_batch();
            let failed = batch.is_err();
            if tx.send(batch).is_err() || failed {
                break;
            }
        });
        Prefetcher {
            channels: vec![rx],
            next: std::cell::Cell::new(0),
            _workers: vec![worker],
        }
    }

    /// Starts `threads` threads, each with its own source from `make`, that together
    /// yield batches `start`, `start + 1`, ... in order, each keeping up to `depth` ready.
    pub fn ordered(make: SourceFactory, threads: usize, depth: usize, start: u64) -> Self {
        let threads = threads.max(1);
        let make = std::sync::Arc::new(make);
        let (mut channels, mut workers) = (Vec::new(), Vec::new());
        for w in 0..threads {
            let (tx, rx) = mpsc::sync_channel(depth.max(1));
            let make = make.clone();
            workers.push(loader_thread(w, move || {
                let mut source = match make() {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                for k in 0.. {
                    let index = start + w as u64 + k * threads as u64;
                    let batch = source.seek(index).and_then(|_| source.next_batch());
                    let failed = batch.is_err();
                    if tx.send(batch).is_err() || failed {
                        break;
                    }
                }
            }));
            channels.push(rx);
        }
        Prefetcher {
            channels,
            next: std::cell::Cell::new(0),
            _workers: workers,
        }
    }

    /// The next batch (waits if its thread is behind).
    pub fn next_batch(&self) -> Result<Batch> {
        let i = self.next.get();
        self.next.set(i + 1);
        self.channels[i % self.channels.len()]
            .recv()
            .map_err(|_| ModelError::State("the batch-preparing thread stopped".into()))?
    }
}
