//! Any broadcast as rows, for the CPU kernels: the output's trailing dimensions are
//! merged into rows along which every operand either runs contiguously or holds one
//! value, and each row's start in every operand comes from the leading dimensions. A
//! bias `[C]` over `[N, T, C]` gives rows of `C` that all start at 0 in the bias; a mask
//! `[T, T]` over `[N, H, T, T]` rows of `T·T`; a reduction's `[N, T, 1]` over `[N, T, C]`
//! rows of `C` with one value each.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::cpu::{vectorized, CHUNK};

/// The rows of a broadcast of `K` operands to one output shape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rows<const K: usize> {
    /// Elements per row.
    pub inner: usize,
    /// Per operand: whether it runs along a row (else it holds one value per row).
    pub along: [bool; K],
    /// The output's leading dimensions (those outside a row).
    outer: Vec<usize>,
    /// Per leading dimension, each operand's stride (0 where it is broadcast).
    strides: Vec<[usize; K]>,
}

impl<const K: usize> Rows<K> {
    /// The rows of `operands` (each broadcastable to `out` by PyTorch's rules, which the
    /// caller has checked) over `out`.
    pub fn plan(out: &[usize], operands: [&[usize]; K]) -> Self {
        let rank = out.len();
        // Row-major strides of each operand over the output's dimensions, 0 where broadcast.
        let mut strides = vec![[0usize; K]; rank];
        for (k, shape) in operands.iter().enumerate() {
            let pad = rank - shape.len();
            let mut s = 1;
            for d in (pad..rank).rev() {
                let n = shape[d - pad];
                strides[d][k] = if n == 1 { 0 } else { s };
                s *= n;
            }
        }
        let mut inner = 1;
        let mut along: Option<[bool; K]> = None;
        let mut split = rank;
        while split > 0 {
            let d = split - 1;
            if out[d] != 1 {
                let kinds = strides[d].map(|s| s != 0);
                match along {
                    None => along = Some(kinds),
                    Some(a) if a == kinds => {}
                    Some(_) => break,
                }
                inner *= out[d];
            }
            split -= 1;
        }
        Rows {
            inner,
            along: along.unwrap_or([true; K]),
            outer: out[..split].to_vec(),
            strides: strides[..split].to_vec(),
        }
    }

    /// Rows in the output.
    pub fn count(&self) -> usize {
        self.outer.iter().product()
    }

    /// Where row `row` starts in each operand.
    #[inline]
    pub fn starts(&self, mut row: usize) -> [usize; K] {
        let mut at = [0; K];
        for (n, s) in self.outer.iter().zip(&self.strides).rev() {
            let i = row % n;
            row /= n;
            for k in 0..K {
                at[k] += i * s[k];
            }
        }
        at
    }

    /// Calls `f(row, starts)` for every row of `out` (`count · inner` slots), rows in
    /// parallel tasks of about [`CHUNK`] elements.
    pub fn for_each_row<T: Send>(
        &self,
        out: &mut [MaybeUninit<T>],
        f: impl Fn(&mut [MaybeUninit<T>], [usize; K]) + Sync,
    ) {
        if self.inner == 0 || out.is_empty() {
            return;
        }
        let per_task = (CHUNK / self.inner).max(1);
        out.par_chunks_mut(per_task * self.inner)
            .enumerate()
            .for_each(|(task, rows)| vectorized(|| self.run_task(task * per_task, rows, &f)));
    }

    /// The rows of one task, the first being row `first`. Always inlined, so that the
    /// loop (and `f`, where small) compiles inside [`vectorized`]'s wide-vector wrapper.
    #[inline(always)]
    fn run_task<T>(
        &self,
        first: usize,
        rows: &mut [MaybeUninit<T>],
        f: &impl Fn(&mut [MaybeUninit<T>], [usize; K]),
    ) {
        for (j, row) in rows.chunks_mut(self.inner).enumerate() {
            f(row, self.starts(first + j));
        }
    }
}

/// One operand's part of a row: a run of `inner` values, or one value for all of them.
#[derive(Clone, Copy)]
pub(crate) enum Src<'a, T> {
    /// The row's values.
    Run(&'a [T]),
    /// One value over the row.
    One(T),
}

impl<'a, T: Copy> Src<'a, T> {
    /// Operand `data`'s part of a row of `inner` starting at `start`.
    #[inline(always)]
    pub fn of(data: &'a [T], start: usize, along: bool, inner: usize) -> Self {
        match along {
            true => Src::Run(&data[start..start + inner]),
            false => Src::One(data[start]),
        }
    }

    /// Element `j` of the row.
    #[inline(always)]
    pub fn at(&self, j: usize) -> T {
        match self {
            Src::Run(r) => r[j],
            Src::One(v) => *v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bias_over_tokens_gives_rows_of_channels_that_restart() {
        let r = Rows::plan(&[2, 3, 4], [&[2, 3, 4][..], &[4][..]]);
        assert_eq!((r.inner, r.along, r.count()), (4, [true, true], 6));
        assert_eq!(r.starts(5), [20, 0]);
    }

    #[test]
    fn a_kept_reduction_gives_one_value_per_row() {
        let r = Rows::plan(&[2, 3, 4], [&[2, 3, 1][..]]);
        assert_eq!((r.inner, r.along), (4, [false]));
        assert_eq!(r.starts(4), [4]);
    }

    #[test]
    fn a_mask_over_heads_merges_its_two_dimensions() {
        let r = Rows::plan(&[2, 3, 5, 5], [&[2, 3, 5, 5][..], &[5, 5][..]]);
        assert_eq!((r.inner, r.count()), (25, 6));
        assert_eq!(r.starts(4), [100, 0]);
    }

    #[test]
    fn broadcasts_inside_a_row_split_it() {
        // [3, 1] against [1, 4]: rows of 4, along which the first holds one value.
        let r = Rows::plan(&[3, 4], [&[3, 1][..], &[1, 4][..]]);
        assert_eq!((r.inner, r.along), (4, [false, true]));
        assert_eq!(r.starts(2), [2, 0]);
        let scalar = Rows::plan(&[], [&[][..]]);
        assert_eq!((scalar.inner, scalar.count()), (1, 1));
    }

    #[test]
    fn every_row_is_visited_once_with_its_starts() {
        let r = Rows::plan(&[3, 2, 5], [&[3, 1, 5][..]]);
        let mut out = vec![MaybeUninit::<usize>::uninit(); 30];
        r.for_each_row(&mut out, |row, [s]| {
            for (j, o) in row.iter_mut().enumerate() {
                o.write(s + j);
            }
        });
        let got: Vec<usize> = out.iter().map(|v| unsafe { v.assume_init() }).collect();
        let expected: Vec<usize> = (0..3)
            .flat_map(|i| (0..2).flat_map(move |_| (0..5).map(move |k| i * 5 + k)))
            .collect();
        assert_eq!(got, expected);
    }
}
