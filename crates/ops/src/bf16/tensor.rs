//! bfloat16 tensors: the cast between float32 and bfloat16 (PyTorch's `x.to(dtype)`), and
//! the kernels' view of a float32 or bfloat16 CPU tensor as GEMM values.

use candle_core::{DType, Device, Shape, Storage, Tensor};
use half::slice::HalfFloatSliceExt;
use half::vec::HalfBitsVecExt;

use super::convert::{round_slice, widen_slice};
use super::operand::Values;
use crate::error::{CandleContext, OpError, Result};
use crate::route::{route, Route};

const OP: &str = "to";

/// `x.to(dtype)`: `x` converted to `dtype`. float32 to bfloat16 or float16 rounds to
/// nearest (ties to even) and bfloat16 to float32 is exact, by wick's own kernels (and
/// the `half` crate's slice conversion) on the CPU; any other pair, or another device,
/// goes through candle's conversion. A tensor already of
/// `dtype` is returned as it is (shared storage, as PyTorch's `to` does).
pub fn cast(x: &Tensor, dtype: DType) -> Result<Tensor> {
    if x.dtype() == dtype {
        return Ok(x.clone());
    }
    if route(x.device()) != Route::Cpu {
        return x.to_dtype(dtype).ctx(OP);
    }
    match (x.dtype(), dtype) {
        (DType::F32, DType::BF16) => {
            let bits = crate::cpu::with_slice::<f32, _>(OP, x, |xs| {
                let mut bits = vec![0u16; xs.len()];
                round_slice(xs, &mut bits);
                Ok(bits)
            })?;
            bits_tensor(OP, bits, x.dims())
        }
        (DType::BF16, DType::F32) => with_values(OP, x, |v| {
            let Values::Bf16(bits) = v else {
                unreachable!("a bf16 tensor's values are bf16")
            };
            let mut out = vec![0f32; bits.len()];
            widen_slice(bits, &mut out);
            crate::cpu::tensor(OP, out, x.dims())
        }),
        (DType::F32, DType::F16) => {
            let halves = crate::cpu::with_slice::<f32, _>(OP, x, |xs| {
                let mut halves = vec![half::f16::ZERO; xs.len()];
                halves.convert_from_f32_slice(xs);
                Ok(halves)
            })?;
            Tensor::from_vec(halves, x.dims(), &Device::Cpu).ctx(OP)
        }
        _ => x.to_dtype(dtype).ctx(OP),
    }
}

/// Runs `f` on the contiguous values of a float32 or bfloat16 CPU tensor.
pub(crate) fn with_values<R>(
    op: &'static str,
    t: &Tensor,
    f: impl FnOnce(Values<'_>) -> Result<R>,
) -> Result<R> {
    match t.dtype() {
        DType::F32 => crate::cpu::with_slice::<f32, _>(op, t, |s| f(Values::F32(s))),
        DType::BF16 => {
            let t = t.contiguous().ctx(op)?;
            let (storage, layout) = t.storage_and_layout();
            let Storage::Cpu(cpu) = &*storage else {
                return Err(OpError::Unsupported {
                    op,
                    what: format!(
                        "a bf16 CPU kernel was asked to read a tensor on {:?}",
                        t.device().location()
                    ),
                });
            };
            let data = cpu.as_slice::<half::bf16>().ctx(op)?;
            let start = layout.start_offset();
            let bits: &[u16] = data[start..start + layout.shape().elem_count()].reinterpret_cast();
            f(Values::Bf16(bits))
        }
        other => Err(OpError::Unsupported {
            op,
            what: format!("dtype {other:?} in a bf16 product (f32 and bf16 are supported)"),
        }),
    }
}

/// A bfloat16 CPU tensor from its bits.
pub(crate) fn bits_tensor(
    op: &'static str,
    bits: Vec<u16>,
    shape: impl Into<Shape>,
) -> Result<Tensor> {
    let values: Vec<half::bf16> = bits.reinterpret_into();
    Tensor::from_vec(values, shape, &Device::Cpu).ctx(op)
}

/// Checks that each of a `what`'s (a "convolution", a "linear layer") `operands` is
/// float32 or the products' 16-bit dtype `low`.
pub(crate) fn check_operands(
    op: &'static str,
    what: &str,
    low: DType,
    operands: &[(&str, &Tensor)],
) -> Result<()> {
    match operands
        .iter()
        .find(|(_, t)| t.dtype() != DType::F32 && t.dtype() != low)
    {
        Some((name, t)) => Err(crate::invalid!(
            op,
            "a {low:?}-product {what}'s {name} must be F32 or {low:?}, got {:?}",
            t.dtype()
        )),
        None => Ok(()),
    }
}

/// `t` rounded to `low`'s values (a 16-bit float), kept as float32 (exact): the operands
/// of a 16-bit product on the paths that multiply in float32. bfloat16 on the CPU takes
/// one vectorised pass (float32 rounded to nearest, ties to even; bfloat16 widened);
/// anything else goes through candle's conversions.
pub(crate) fn rounded_f32(op: &'static str, t: &Tensor, low: DType) -> Result<Tensor> {
    match (low, t.dtype()) {
        (DType::BF16, DType::BF16) => cast(t, DType::F32),
        (DType::BF16, DType::F32) if route(t.device()) == Route::Cpu => {
            let out = crate::cpu::with_slice::<f32, _>(op, t, |xs| {
                let mut out = vec![0f32; xs.len()];
                super::convert::round_as_f32(xs, &mut out);
                Ok(out)
            })?;
            crate::cpu::tensor(op, out, t.dims())
        }
        _ => t.to_dtype(low).and_then(|t| t.to_dtype(DType::F32)).ctx(op),
    }
}
