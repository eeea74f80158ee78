//! Data for the examples and for a user's own training loop:
//! - images: an [`ImageFolder`] of JPEGs and PNGs ([`decode`]) through torchvision's
//!   [`transforms`] as [`ImageBatches`], CIFAR-10's binary files, exact batch files and a
//!   learnable synthetic dataset;
//! - [`text`]: a text file as tokens (bytes or characters) with a held-out part;
//! - a [`Prefetcher`] that prepares batches on loader threads while the step runs, in the
//!   same order whatever their number, each batch's stages timed for the profiler.

mod batch_file;
mod cifar;
pub mod decode;
mod image_batches;
mod image_folder;
mod prefetch;
mod synthetic;
pub mod text;
pub mod transforms;

pub use batch_file::BatchFile;
pub use cifar::Cifar10;
pub use image_batches::ImageBatches;
pub use image_folder::ImageFolder;
pub use prefetch::{Prefetcher, SourceFactory};
pub use synthetic::SyntheticImages;

use candle_core::Tensor;

use crate::error::{ModelError, Result};

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
    /// What the source's stages (read, decode, augment, collate) took since it was last
    /// asked, for the profiler; `None` for a source without stages (synthetic images).
    fn take_stages(&mut self) -> Option<StageReport> {
        None
    }
}

/// What a source's input stages took since it last reported.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StageReport {
    /// Seconds in each stage.
    pub stages: wick_graph::InputStages,
    /// Images prepared.
    pub images: usize,
    /// Unreadable images skipped.
    pub skipped: usize,
}

/// A seed for batch or epoch `index` of a stream seeded with `seed` (SplitMix64 of both):
/// every batch's randomness is a function of the stream's seed and its index alone, so a
/// run can resume anywhere.
pub(crate) fn seed_for(seed: u64, index: u64) -> u64 {
    let mix = |mut z: u64| {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    mix(seed ^ mix(index))
}
