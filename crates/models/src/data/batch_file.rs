//! One exact batch from a safetensors file.

use std::path::Path;

use candle_core::DType;
use candle_core::Tensor;

use super::{Batch, BatchSource};
use crate::checkpoint::read_safetensors;
use crate::error::{ModelError, Result};

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
        let bad = ModelError::data(path);
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
        // A NaN or infinite pixel is the file's fault, said here, not a training step's.
        if let Some((i, v)) = wick_ops::first_non_finite(&images)? {
            let per = images.elem_count() / n.max(1);
            return Err(bad(format!(
                "`images` holds {v} at element {i} (image {}): a batch of images must be finite",
                i / per.max(1)
            )));
        }
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
