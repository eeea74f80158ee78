//! The packed operands' buffer: a growable run of `u32` pairs that starts on a 64-byte
//! cache line. An AMX tile row is 64 bytes: a tile load whose rows straddle two lines
//! runs several times slower than an aligned one, and panel and tile offsets are whole
//! lines, so aligning the buffer aligns every tile row in it.

use std::ops::{Deref, DerefMut};

/// `u32`s per cache line.
const LINE: usize = 16;

/// A reusable buffer whose contents start on a cache line.
#[derive(Debug, Default, Clone)]
pub(crate) struct Panels {
    buf: Vec<u32>,
    start: usize,
    len: usize,
}

impl Panels {
    /// The buffer resized to `len` elements, starting on a cache line. Its contents are
    /// unspecified (another product's panels): the caller writes every element.
    pub(crate) fn prefix(&mut self, len: usize) -> &mut [u32] {
        if self.buf.len() < len + LINE {
            self.buf = vec![0; len + LINE];
        }
        self.start = self.buf.as_ptr().align_offset(64);
        debug_assert!(self.start < LINE);
        self.len = len;
        &mut self.buf[self.start..self.start + len]
    }
}

impl Deref for Panels {
    type Target = [u32];

    fn deref(&self) -> &[u32] {
        &self.buf[self.start..self.start + self.len]
    }
}

impl DerefMut for Panels {
    fn deref_mut(&mut self) -> &mut [u32] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::Panels;

    #[test]
    fn every_prefix_starts_on_a_cache_line() {
        let mut p = Panels::default();
        for len in [1, 17, 1000, 3, 100_000, 5] {
            let s = p.prefix(len);
            assert_eq!(s.len(), len);
            assert_eq!(s.as_ptr() as usize % 64, 0, "length {len}");
            assert_eq!(p.len(), len);
        }
    }
}
