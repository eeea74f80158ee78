//! wick's CPU kernels for the tensor language's selections (f32 and f64; `expand` any
//! dtype), by rows ([`Rows`]): `expand`, `where` and `masked_fill` with their gradients,
//! each one pass that reads its inputs once and writes its output once, where candle's
//! generic path broadcasts, copies and selects in several. The element-wise functions'
//! kernels are in [`unary`](super::unary), the reductions' in `reduce_rows`.

use candle_core::{Tensor, WithDType};

use crate::broadcast::row_kernels::zip_rows;
use crate::broadcast::rows::{Rows, Src};
use crate::cpu::{self, Float};
use crate::error::Result;

/// `x` broadcast to `shape` and copied (any dtype candle stores).
pub(crate) fn expand<T: WithDType>(
    op: &'static str,
    x: &Tensor,
    shape: &[usize],
) -> Result<Tensor> {
    let rows = Rows::plan(shape, [x.dims()]);
    let n: usize = shape.iter().product();
    let mut out = Vec::<T>::with_capacity(n);
    cpu::with_slice::<T, _>(op, x, |xs| {
        rows.for_each_row(
            &mut out.spare_capacity_mut()[..n],
            |row, [s]| match Src::of(xs, s, rows.along[0], rows.inner) {
                Src::Run(r) => row.iter_mut().zip(r).for_each(|(o, v)| {
                    o.write(*v);
                }),
                Src::One(v) => row.iter_mut().for_each(|o| {
                    o.write(v);
                }),
            },
        );
        Ok(())
    })?;
    // SAFETY: the rows cover the `n` elements of `shape`, and each row's slots were written.
    unsafe { out.set_len(n) };
    cpu::tensor(op, out, shape)
}

/// `torch.where(cond, a, b)` over `shape`, the three broadcast by rows.
pub(crate) fn where_<T: Float>(
    cond: &Tensor,
    a: &Tensor,
    b: &Tensor,
    shape: &[usize],
) -> Result<Tensor> {
    const OP: &str = "where";
    let rows = Rows::plan(shape, [cond.dims(), a.dims(), b.dims()]);
    let (n, inner, along) = (shape.iter().product::<usize>(), rows.inner, rows.along);
    let mut out = Vec::<T>::with_capacity(n);
    cpu::with_slice::<u8, _>(OP, cond, |cd| {
        cpu::with_slices::<T, _>(OP, a, b, |ad, bd| {
            let slots = &mut out.spare_capacity_mut()[..n];
            rows.for_each_row(slots, |row, [sc, sa, sb]| {
                let c = Src::of(cd, sc, along[0], inner);
                let x = Src::of(ad, sa, along[1], inner);
                let y = Src::of(bd, sb, along[2], inner);
                for (j, o) in row.iter_mut().enumerate() {
                    o.write(if c.at(j) != 0 { x.at(j) } else { y.at(j) });
                }
            });
            Ok(())
        })
    })?;
    // SAFETY: the rows cover the `n` elements of `shape`, and each row's slots were written.
    unsafe { out.set_len(n) };
    cpu::tensor(OP, out, shape)
}

/// `x.masked_fill(mask, value)`; with `value` 0 also its gradient (`x` the output
/// gradient).
pub(crate) fn masked_fill<T: Float>(x: &Tensor, mask: &Tensor, value: f64) -> Result<Tensor> {
    let fill = T::from_f64(value);
    zip_rows::<T, u8>("masked_fill", x.dims(), x, mask, |v, m| {
        if m != 0 {
            fill
        } else {
            v
        }
    })
}

/// `where`'s gradient before the sum to the operand's shape: `gy` where the operand
/// (`a` when `to_a`) was chosen, else 0.
pub(crate) fn where_chosen<T: Float>(gy: &Tensor, cond: &Tensor, to_a: bool) -> Result<Tensor> {
    zip_rows::<T, u8>("where", gy.dims(), gy, cond, |g, c| {
        if (c != 0) == to_a {
            g
        } else {
            T::ZERO
        }
    })
}
