//! Numeric health: where a tensor stops being finite.

use candle_core::{DType, Tensor};
use rayon::prelude::*;

use crate::cpu::{self, Float};
use crate::error::{CandleContext, Result};
use crate::route::{route, Route};

const OP: &str = "finite_check";

/// The first element of `t` (flat, row-major) that is NaN or infinite, with its value, or
/// `None` when every element is finite. Integer tensors are always finite.
///
/// On the CPU it reads f32/f64 data in place, in parallel chunks. On a device it reduces
/// `sum(t * 0)` there (NaN exactly when some element is not finite) and copies the tensor
/// to the host only to locate that element.
pub fn first_non_finite(t: &Tensor) -> Result<Option<(usize, f64)>> {
    if !matches!(
        t.dtype(),
        DType::F16 | DType::BF16 | DType::F32 | DType::F64
    ) {
        return Ok(None);
    }
    match (route(t.device()), t.dtype()) {
        (Route::Cpu, DType::F32) => cpu::with_slice::<f32, _>(OP, t, |s| Ok(scan(s))),
        (Route::Cpu, DType::F64) => cpu::with_slice::<f64, _>(OP, t, |s| Ok(scan(s))),
        _ => {
            let poisoned = (t.to_dtype(DType::F32).ctx(OP)? * 0.0)
                .ctx(OP)?
                .sum_all()
                .ctx(OP)?
                .to_scalar::<f32>()
                .ctx(OP)?;
            if poisoned.is_finite() {
                return Ok(None);
            }
            let host = t.to_dtype(DType::F64).ctx(OP)?.flatten_all().ctx(OP)?;
            Ok(scan(&host.to_vec1::<f64>().ctx(OP)?))
        }
    }
}

/// The first non-finite element over `tensors`, in order: the tensor's index, the
/// element's flat index and its value. The CPU f32 tensors are scanned in one parallel
/// pass over all of them (one fork-join for a whole model's parameters, and a bit test
/// that vectorises: a float is not finite exactly when its exponent bits are all ones);
/// the others go through [`first_non_finite`].
pub fn first_non_finite_of(tensors: &[&Tensor]) -> Result<Option<(usize, usize, f64)>> {
    let fast = |t: &Tensor| {
        route(t.device()) == Route::Cpu && t.dtype() == DType::F32 && t.is_contiguous()
    };
    let guards: Vec<_> = tensors
        .iter()
        .map(|t| fast(t).then(|| t.storage_and_layout()))
        .collect();
    let mut slices: Vec<&[f32]> = Vec::with_capacity(tensors.len());
    for g in &guards {
        slices.push(match g {
            Some((storage, layout)) => match &**storage {
                candle_core::Storage::Cpu(cpu) => {
                    let data = cpu.as_slice::<f32>().ctx(OP)?;
                    let start = layout.start_offset();
                    &data[start..start + layout.shape().elem_count()]
                }
                _ => &[],
            },
            None => &[],
        });
    }
    let work: Vec<(usize, usize)> = slices
        .iter()
        .enumerate()
        .flat_map(|(i, s)| (0..s.len()).step_by(CHUNK).map(move |start| (i, start)))
        .collect();
    let bad_chunk = |&(i, start): &(usize, usize)| {
        let s = &slices[i][start..(start + CHUNK).min(slices[i].len())];
        s.iter()
            .map(|v| v.to_bits() & 0x7fff_ffff)
            .max()
            .unwrap_or(0)
            >= 0x7f80_0000
    };
    // A few small tensors (running statistics) are read faster than threads start.
    let total: usize = slices.iter().map(|s| s.len()).sum();
    let bad = if total < 4 * CHUNK {
        work.iter().find(|w| bad_chunk(w))
    } else {
        work.par_iter().find_first(|w| bad_chunk(w))
    };
    let first_fast = bad.map(|&(i, start)| {
        let s = slices[i];
        let at = start + s[start..].iter().position(|v| !v.is_finite()).unwrap_or(0);
        (i, at, f64::from(s[at]))
    });
    for (i, t) in tensors.iter().enumerate() {
        if first_fast.is_some_and(|(f, _, _)| f < i) {
            break;
        }
        if guards[i].is_some() {
            if first_fast.is_some_and(|(f, _, _)| f == i) {
                return Ok(first_fast);
            }
            continue;
        }
        if let Some((at, v)) = first_non_finite(t)? {
            return Ok(Some((i, at, v)));
        }
    }
    Ok(first_fast)
}

/// Chunks scanned per task: large enough that the check vectorises, small enough that a
/// 44 MB parameter set spreads over every core.
const CHUNK: usize = 1 << 16;

fn scan<T: Float>(values: &[T]) -> Option<(usize, f64)> {
    let bad_chunk = values
        .par_chunks(CHUNK)
        .position_first(|c| !c.iter().fold(true, |ok, v| ok & v.to_f64().is_finite()))?;
    let start = bad_chunk * CHUNK;
    values[start..]
        .iter()
        .position(|v| !v.to_f64().is_finite())
        .map(|i| (start + i, values[start + i].to_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn finds_the_first_nan_or_infinity_and_passes_finite_tensors() {
        let mut v = vec![1.0f32; 200_000];
        let t = Tensor::from_vec(v.clone(), v.len(), &Device::Cpu).unwrap();
        assert_eq!(first_non_finite(&t).unwrap(), None);
        v[150_001] = f32::INFINITY;
        v[170_000] = f32::NAN;
        let t = Tensor::from_vec(v.clone(), v.len(), &Device::Cpu).unwrap();
        assert_eq!(
            first_non_finite(&t).unwrap(),
            Some((150_001, f64::INFINITY))
        );
        let nan = Tensor::new(&[0.0f64, f64::NAN], &Device::Cpu).unwrap();
        let (i, value) = first_non_finite(&nan).unwrap().unwrap();
        assert!(i == 1 && value.is_nan());
        let half = nan.to_dtype(DType::F16).unwrap();
        assert_eq!(first_non_finite(&half).unwrap().map(|f| f.0), Some(1));
        let ints = Tensor::new(&[1i64, 2], &Device::Cpu).unwrap();
        assert_eq!(first_non_finite(&ints).unwrap(), None);
    }

    #[test]
    fn the_first_non_finite_over_many_tensors_is_found_in_order() {
        let mut big = vec![0.5f32; 300_000];
        big[299_999] = f32::NEG_INFINITY;
        let big = Tensor::from_vec(big, 300_000, &Device::Cpu).unwrap();
        let fine = Tensor::ones(70_000, DType::F32, &Device::Cpu).unwrap();
        let nan64 = Tensor::new(&[1.0f64, f64::NAN], &Device::Cpu).unwrap();
        let huge = Tensor::new(&[f32::MAX, -f32::MAX, f32::MIN_POSITIVE], &Device::Cpu).unwrap();
        assert_eq!(first_non_finite_of(&[&fine, &huge]).unwrap(), None);
        assert_eq!(
            first_non_finite_of(&[&fine, &big, &nan64]).unwrap(),
            Some((1, 299_999, f64::NEG_INFINITY))
        );
        let (i, at, v) = first_non_finite_of(&[&fine, &nan64, &big])
            .unwrap()
            .unwrap();
        assert!(i == 1 && at == 1 && v.is_nan());
        let strided = big.reshape((1000, 300)).unwrap().t().unwrap();
        // Not contiguous: the general path, in the transposed tensor's own order.
        assert_eq!(
            first_non_finite_of(&[&strided]).unwrap(),
            Some((0, 299 * 1000 + 999, f64::NEG_INFINITY))
        );
    }
}
