//! Shape helpers shared by the op families.

use crate::error::Result;

/// Checks that `dims` has rank 4 (NCHW) with no empty dimension, and returns it as an array.
pub fn nchw(op: &'static str, what: &str, dims: &[usize]) -> Result<[usize; 4]> {
    match dims {
        [n, c, h, w] if dims.contains(&0) => Err(crate::invalid!(
            op,
            "{what} has shape {:?}: every dimension must be at least 1",
            [n, c, h, w]
        )),
        &[n, c, h, w] => Ok([n, c, h, w]),
        _ => Err(crate::invalid!(
            op,
            "{what} must be 4-D (N, C, H, W), got shape {dims:?}"
        )),
    }
}

/// `factor` times the product of `dims`, saturating at `u64::MAX` instead of overflowing
/// (FLOP and byte counts of absurd shapes stay defined: never a panic or a wrap-around).
pub fn flop_count(factor: u64, dims: &[usize]) -> u64 {
    dims.iter()
        .fold(factor, |acc, d| acc.saturating_mul(*d as u64))
}

/// Checks that two shapes are equal.
pub fn same(op: &'static str, a_name: &str, a: &[usize], b_name: &str, b: &[usize]) -> Result<()> {
    if a == b {
        Ok(())
    } else {
        Err(crate::invalid!(
            op,
            "{a_name} has shape {a:?} but {b_name} has shape {b:?}; they must be equal"
        ))
    }
}

/// PyTorch's output-size rule for a sliding window: `(size + 2*pad - dil*(k-1) - 1) / stride + 1`,
/// or an error when the (dilated) kernel does not fit the padded input.
pub fn window_out(
    op: &'static str,
    axis: &str,
    size: usize,
    kernel: usize,
    stride: usize,
    pad: usize,
    dilation: usize,
) -> Result<usize> {
    if stride == 0 {
        return Err(crate::invalid!(
            op,
            "stride along {axis} must be at least 1, got 0"
        ));
    }
    if kernel == 0 || dilation == 0 {
        return Err(crate::invalid!(op, "kernel size and dilation along {axis} must be at least 1, got kernel {kernel}, dilation {dilation}"));
    }
    let too_large = || {
        crate::invalid!(op, "size {size}, kernel {kernel}, padding {pad} or dilation {dilation} along {axis} is too large")
    };
    let effective = dilation
        .checked_mul(kernel - 1)
        .and_then(|e| e.checked_add(1))
        .ok_or_else(too_large)?;
    let padded = pad
        .checked_mul(2)
        .and_then(|p| p.checked_add(size))
        .ok_or_else(too_large)?;
    if effective > padded {
        return Err(crate::invalid!(op, "kernel of extent {effective} along {axis} is larger than the padded input ({size} + 2*{pad} = {padded})"));
    }
    Ok((padded - effective) / stride + 1)
}

/// The outputs `o` in `0..outs` of a sliding window whose input position
/// `o * stride + offset - pad` lies inside `0..len` (`offset`: the kernel tap's offset,
/// dilation included). Empty (`lo..lo`) when none does.
pub(crate) fn outputs_in_bounds(
    outs: usize,
    stride: usize,
    offset: usize,
    pad: usize,
    len: usize,
) -> std::ops::Range<usize> {
    // o * stride + offset >= pad  <=>  o >= ceil((pad - offset) / stride)
    let lo = pad.saturating_sub(offset).div_ceil(stride).min(outs);
    // o * stride + offset - pad < len  <=>  o * stride < len + pad - offset
    let hi = if len + pad > offset {
        (len + pad - offset).div_ceil(stride).min(outs)
    } else {
        0
    };
    lo..hi.max(lo)
}

/// Copies `row` into `dst` split into its `stride` phases: value `j * stride + r` at
/// `r * phase + j`, with `phase = dst.len() / stride` (at least `ceil(row.len() /
/// stride)`). A strided window then reads consecutive values for consecutive outputs.
pub(crate) fn split_phases<T: Copy>(row: &[T], stride: usize, dst: &mut [T]) {
    let phase = dst.len() / stride;
    if stride == 2 {
        let (even, odd) = dst.split_at_mut(phase);
        for ((e, o), pair) in even.iter_mut().zip(odd.iter_mut()).zip(row.chunks_exact(2)) {
            *e = pair[0];
            *o = pair[1];
        }
        if row.len() % 2 == 1 {
            even[row.len() / 2] = row[row.len() - 1];
        }
    } else {
        for (j, values) in row.chunks(stride).enumerate() {
            for (r, v) in values.iter().enumerate() {
                dst[r * phase + j] = *v;
            }
        }
    }
}
