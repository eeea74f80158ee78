//! Convolutions with bfloat16 products, as autocast runs them: any operand may be
//! bfloat16 (autocast casts the weight), the products are those of bfloat16 values and
//! the sums float32, and the output and both gradients are float32. bfloat16 values are
//! exact in float32, so the bfloat16 operands are widened and the float32 kernels run
//! (every algorithm: Winograd, im2col per image or over the batch, the fused epilogue)
//! with their GEMMs in bfloat16-product mode ([`Products::Bf16`]): each GEMM rounds its
//! operands to bfloat16 as it packs them (a no-op for values already bfloat16; the
//! float32 activations and Winograd's transformed tiles are rounded there) and runs on
//! `vdpbf16ps` where the CPU has it.

use candle_core::{DType, Tensor};

use super::params::{Epilogue, Geom, OP};
use crate::bf16::Products;
use crate::error::{OpError, Result};

/// Whether a convolution with these operands runs with bfloat16 products.
pub(super) fn applies(operands: &[&Tensor]) -> bool {
    operands.iter().any(|t| t.dtype() == DType::BF16)
}

/// Checks that every operand is float32 or bfloat16 and the bias and residual float32.
pub(super) fn check(operands: &[(&str, &Tensor)], epilogue: &Epilogue<'_>) -> Result<()> {
    for (name, t) in operands {
        if !matches!(t.dtype(), DType::F32 | DType::BF16) {
            return Err(OpError::invalid(
                OP,
                format!(
                    "a bf16 convolution's {name} must be f32 or bf16, got {:?}",
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
                    "a bf16 convolution's {name} must be f32, got {:?}",
                    t.dtype()
                ),
            ));
        }
    }
    Ok(())
}

/// `t` as float32 (exact for bfloat16).
pub(super) fn widened(t: &Tensor) -> Result<Tensor> {
    crate::bf16::cast(t, DType::F32)
}

/// `g` with its GEMMs in bfloat16-product mode.
pub(super) fn bf16_products(g: &Geom) -> Geom {
    Geom {
        products: Products::Bf16,
        ..*g
    }
}

/// The generic path's operands: a float32 operand rounded to bfloat16 values, a
/// bfloat16 one widened, both float32 (the same products, in float32 arithmetic).
pub(super) fn rounded_f32(t: &Tensor) -> Result<Tensor> {
    crate::bf16::rounded_f32(OP, t)
}
