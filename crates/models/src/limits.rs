//! Size checks before allocation: a size whose arithmetic overflows, or a buffer larger
//! than the memory this machine has available, is an error naming what and how large,
//! never a wrap-around or an allocation abort.

use crate::error::{ModelError, Result};
use crate::image::ImageSize;

/// The memory available for new allocations, from `/proc/meminfo`'s `MemAvailable`
/// (Linux); `None` where that is unknown.
pub fn available_memory() -> Option<u128> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u128 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `bytes` (or an overflow, `None`) as a clear error when it cannot be allocated on this
/// machine: more than [`available_memory`], or more than a Rust allocation can hold.
pub fn check_allocation(what: &str, bytes: Option<u128>) -> Result<()> {
    let gib = |b: u128| b as f64 / (1u128 << 30) as f64;
    let Some(bytes) = bytes else {
        return Err(ModelError::Config(format!(
            "{what}: its size overflows; the shape is absurd"
        )));
    };
    if bytes > isize::MAX as u128 {
        return Err(ModelError::Config(format!(
            "{what} would need {:.3e} GiB, more than any allocation can hold",
            gib(bytes)
        )));
    }
    if let Some(available) = available_memory() {
        if bytes > available {
            return Err(ModelError::Config(format!(
                "{what} needs about {:.1} GiB, but this machine has {:.1} GiB available",
                gib(bytes),
                gib(available)
            )));
        }
    }
    Ok(())
}

/// [`check_allocation`] for one batch of `batch` float32 RGB images of `size`, the data
/// source's own buffer (`source` names it in the error: "a batch", "a synthetic batch").
pub fn check_image_batch(source: &str, batch: usize, size: ImageSize) -> Result<()> {
    check_allocation(
        &format!("{source} of {batch} images of {size}"),
        bytes_of(4, &[batch, 3, size.height, size.width]),
    )
}

/// The byte size of a tensor of shape `dims` with `elem_bytes`-byte elements, or `None`
/// when that overflows.
pub fn bytes_of(elem_bytes: usize, dims: &[usize]) -> Option<u128> {
    dims.iter()
        .try_fold(elem_bytes as u128, |acc, d| acc.checked_mul(*d as u128))
}
