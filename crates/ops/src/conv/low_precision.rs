//! Convolutions with 16-bit products, as autocast runs them: any operand may be bfloat16
//! or float16 (autocast casts the weight), the products are those of 16-bit values and
//! the sums float32, and the output and both gradients are float32. 16-bit values are
//! exact in float32, so the operands are made float32 and the float32 kernels run
//! (every algorithm: Winograd, im2col per image or over the batch, the fused epilogue),
//! in one of two forms ([`CpuForm`]): with their GEMMs in the product mode ([`Products`]),
//! each GEMM rounding its operands as it reads them (a no-op for values already 16-bit;
//! the float32 activations and Winograd's transformed tiles are rounded there), bfloat16
//! on `vdpbf16ps` where the CPU has it; or, for bfloat16 on a CPU without it, every
//! operand rounded once and float32 products, which multiply bfloat16 values exactly.

use candle_core::{DType, Tensor};

use super::params::{Epilogue, Geom, OP};
use crate::bf16::{Bf16Path, Products};
use crate::error::Result;

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
                return Err(crate::invalid!(
                    OP,
                    "the {other} is {d:?} and the {name} {:?}: one 16-bit dtype per product",
                    t.dtype()
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
    crate::bf16::check_operands(OP, "convolution", low, operands)?;
    for (name, t) in [("bias", epilogue.bias), ("residual", epilogue.residual)] {
        if let Some(t) = t.filter(|t| t.dtype() != DType::F32) {
            return Err(crate::invalid!(
                OP,
                "a {low:?}-product convolution's {name} must be F32, got {:?}",
                t.dtype()
            ));
        }
    }
    Ok(())
}

/// How the CPU kernels run 16-bit products: both forms give float32 sums of the exact
/// products of the operands' 16-bit values.
#[derive(Debug, Clone, Copy)]
pub(super) enum CpuForm {
    /// The operands widened to float32 (16-bit ones exactly) and each GEMM in the
    /// products' mode, rounding its float32 operands as it reads them: bfloat16 on the
    /// bfloat16 GEMM ([`Bf16Path::Native`]), and float16 (whose rounded Winograd tiles
    /// are kept out: see `cpu::winograd_shape`).
    PerGemm(Products),
    /// bfloat16 products on a CPU without AVX512-BF16 ([`Bf16Path::Widening`]): each
    /// operand rounded once to bfloat16 values, kept as float32, and the float32 kernels
    /// run, with their own algorithm choices. A product of two bfloat16 values is exact in
    /// float32, so the float32 GEMMs give the bfloat16 products' float32 sums without
    /// rounding an operand again for every image. Winograd's transformed tiles stay
    /// float32 here: closer to the exact convolution of the bfloat16 values than the
    /// bfloat16 GEMM's rounded tiles.
    RoundedOnce,
}

impl CpuForm {
    /// The form of `products` (16-bit) on this thread's [`Bf16Path::current`].
    pub(super) fn of(products: Products) -> CpuForm {
        match products {
            Products::Bf16 if Bf16Path::current() == Bf16Path::Widening => CpuForm::RoundedOnce,
            _ => CpuForm::PerGemm(products),
        }
    }

    /// An operand as the CPU kernels take it: float32.
    pub(super) fn operand(self, t: &Tensor) -> Result<Tensor> {
        match self {
            CpuForm::PerGemm(_) => crate::bf16::cast(t, DType::F32),
            CpuForm::RoundedOnce => crate::bf16::rounded_f32(OP, t, DType::BF16),
        }
    }

    /// `g` with the products its GEMMs run.
    pub(super) fn geom(self, g: &Geom) -> Geom {
        let products = match self {
            CpuForm::PerGemm(products) => products,
            CpuForm::RoundedOnce => Products::Native,
        };
        Geom { products, ..*g }
    }
}

/// The generic path's operands: a float32 operand rounded to the products' 16-bit
/// values, a 16-bit one widened, both float32 (the same products, in float32 arithmetic).
pub(super) fn rounded_f32(t: &Tensor, products: Products) -> Result<Tensor> {
    let low = products.low_dtype().unwrap_or(DType::F32);
    crate::bf16::rounded_f32(OP, t, low)
}
