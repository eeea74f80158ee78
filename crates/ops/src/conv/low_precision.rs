//! Convolutions with 16-bit products, as autocast runs them: any operand may be bfloat16
//! or float16 (autocast casts the weight), the products are those of 16-bit values and
//! the sums float32, and the output and both gradients are float32. 16-bit values are
//! exact in float32, so the 16-bit operands are widened and the float32 kernels run
//! (every algorithm: Winograd, im2col per image or over the batch, the fused epilogue)
//! with their GEMMs in that product mode ([`Products`]): each GEMM rounds its operands
//! as it reads them (a no-op for values already 16-bit; the float32 activations and
//! Winograd's transformed tiles are rounded there), bfloat16 on `vdpbf16ps` where the
//! CPU has it.

use candle_core::{DType, Tensor};

use super::params::{Epilogue, Geom, OP};
use crate::bf16::Products;
use crate::error::{OpError, Result};

/// The products a convolution with these operands runs: those of its 16-bit operands'
/// dtype, or native; an error naming both when bfloat16 and float16 meet.
pub(super) fn products_of(operands: &[(&str, &Tensor)]) -> Result<Products> {
    let mut found: Option<(&str, DType)> = None;
    for &(name, t) in operands {
        if Products::of(t.dtype()) == Products::Native {
            continue;
        }
        match found {
            Some((other, d)) if d != t.dtype() => {
                return Err(OpError::invalid(
                    OP,
                    format!(
                        "the {other} is {d:?} and the {name} {:?}: one 16-bit dtype per product",
                        t.dtype()
                    ),
                ))
            }
            _ => found = Some((name, t.dtype())),
        }
    }
    Ok(found.map_or(Products::Native, |(_, d)| Products::of(d)))
}

/// Checks that every operand is float32 or the products' 16-bit dtype, and the bias and
/// residual float32.
pub(super) fn check(
    products: Products,
    operands: &[(&str, &Tensor)],
    epilogue: &Epilogue<'_>,
) -> Result<()> {
    let low = products.low_dtype().unwrap_or(DType::F32);
    for (name, t) in operands {
        if t.dtype() != DType::F32 && t.dtype() != low {
            return Err(OpError::invalid(
                OP,
                format!(
                    "a {low:?}-product convolution's {name} must be F32 or {low:?}, got {:?}",
                    t.dtype()
                ),
            ));
        }
    }
    for (name, t) in [("bias", epilogue.bias), ("residual", epilogue.residual)] {
        if let Some(t) = t.filter(|t| t.dtype() != DType::F32) {
            return Err(OpError::invalid(
                OP,
                format!(
                    "a {low:?}-product convolution's {name} must be F32, got {:?}",
                    t.dtype()
                ),
            ));
        }
    }
    Ok(())
}

/// `t` as float32 (exact for 16-bit floats).
pub(super) fn widened(t: &Tensor) -> Result<Tensor> {
    crate::bf16::cast(t, DType::F32)
}

/// `g` with its GEMMs in `products` mode.
pub(super) fn with_products(g: &Geom, products: Products) -> Geom {
    Geom { products, ..*g }
}

/// The generic path's operands: a float32 operand rounded to the products' 16-bit
/// values, a 16-bit one widened, both float32 (the same products, in float32 arithmetic).
pub(super) fn rounded_f32(t: &Tensor, products: Products) -> Result<Tensor> {
    let low = products.low_dtype().unwrap_or(DType::F32);
    crate::bf16::rounded_f32(OP, t, low)
}
