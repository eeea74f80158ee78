//! Numeric health: where a tensor stops being finite.

use candle_core::{DType, Tensor};
use rayon::prelude::*;

use crate::cpu::{self, Float};
use crate::error::{CandleContext, Result};
use crate::kernel::{route, Route};

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
}
