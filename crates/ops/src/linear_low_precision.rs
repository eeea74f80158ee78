//! Linear layers with 16-bit products, as autocast runs them: a bfloat16 or float16
//! weight (and input, or a float32 input rounded as the product reads it), float32 output
//! and gradients, float32 sums. bfloat16 products run on the bfloat16 GEMM
//! (`crate::bf16`); float16 ones, and both on devices other than the CPU, run the float32
//! product on the operands rounded to 16-bit values, which is exact (16-bit values'
//! products fit in float32's significand).

use candle_core::{DType, Tensor};

use crate::bf16::tensor_product;
use crate::error::{CandleContext, Result};
use crate::route::{route, Route};

const OP: &str = "linear";

/// Whether a linear layer with this input and weight runs with 16-bit products.
pub(crate) fn applies(x: &Tensor, weight: &Tensor) -> bool {
    [x, weight]
        .iter()
        .any(|t| matches!(t.dtype(), DType::BF16 | DType::F16))
}

/// The products' 16-bit dtype, after checking that each operand is float32 or it.
fn low_dtype(x: &Tensor, weight: &Tensor) -> Result<DType> {
    let low = if matches!(x.dtype(), DType::BF16 | DType::F16) {
        x.dtype()
    } else {
        weight.dtype()
    };
    let operands = [("input", x), ("weight", weight)];
    crate::bf16::check_operands(OP, "linear layer", low, &operands)?;
    Ok(low)
}

/// `t` rounded to `low`'s values, as float32.
fn rounded(t: &Tensor, low: DType) -> Result<Tensor> {
    crate::bf16::rounded_f32(OP, t, low)
}

/// `y [m, n] = x [m, k] · weightᵀ (+ bias)` in float32 from 16-bit `x` and `weight`.
pub(crate) fn forward(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let low = low_dtype(x, weight)?;
    let on_cpu = route(x.device()) == Route::Cpu;
    if low == DType::F16 && on_cpu {
        let (x, w) = (rounded(x, low)?, rounded(weight, low)?);
        return crate::linear_cpu::forward::<f32>(&x, &w, bias);
    }
    let (m, k, n) = (x.dims()[0], x.dims()[1], weight.dims()[0]);
    let y = if on_cpu {
        tensor_product(OP, (m, n, k), (x, (k, 1)), (weight, (1, k)))?
    } else {
        let (x, w) = (rounded(x, low)?, rounded(weight, low)?);
        x.matmul(&w.t().ctx(OP)?).ctx(OP)?
    };
    match bias {
        Some(b) => crate::broadcast::forward(crate::broadcast::BinaryOp::Add, &y, b),
        None => Ok(y),
    }
}

/// `(grad_x [m, k], grad_weight [n, k])` in float32 for a float32 `grad_y [m, n]` (its
/// products rounded as the GEMM reads it) and 16-bit `x` and `weight`.
pub(crate) fn backward(grad_y: &Tensor, x: &Tensor, weight: &Tensor) -> Result<(Tensor, Tensor)> {
    let low = low_dtype(x, weight)?;
    let on_cpu = route(x.device()) == Route::Cpu;
    if low == DType::F16 && on_cpu {
        let (gy, x, w) = (
            rounded(grad_y, low)?,
            rounded(x, low)?,
            rounded(weight, low)?,
        );
        return crate::linear_cpu::backward::<f32>(&gy, &x, &w);
    }
    let (m, k, n) = (x.dims()[0], x.dims()[1], weight.dims()[0]);
    if !on_cpu {
        let (gy, x, w) = (
            rounded(grad_y, low)?,
            rounded(x, low)?,
            rounded(weight, low)?,
        );
        let dx = gy.matmul(&w).ctx(OP)?;
        return Ok((dx, gy.t().ctx(OP)?.matmul(&x).ctx(OP)?));
    }
    // grad_x [m, k] = grad_y [m, n] · weight [n, k].
    let dx = tensor_product(OP, (m, k, n), (grad_y, (n, 1)), (weight, (k, 1)))?;
    // grad_weight [n, k] = grad_yᵀ [n, m] · x [m, k].
    let dw = tensor_product(OP, (n, k, m), (grad_y, (1, n)), (x, (k, 1)))?;
    Ok((dx, dw))
}
