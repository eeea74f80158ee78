//! Linear layers with bfloat16 products, as autocast runs them: a bfloat16 weight (and
//! input, or a float32 input rounded to bfloat16 as the GEMM packs it), float32 output
//! and gradients, products on the bfloat16 GEMM (`crate::bf16`) with float32 sums. On
//! devices other than the CPU the bfloat16-rounded values run through the float32
//! product (they are exact in float32).

use candle_core::{DType, Tensor};

use crate::bf16::{gemm, with_values, Bf16Path, Matrix, Values};
use crate::cpu;
use crate::error::{CandleContext, OpError, Result};
use crate::route::{route, Route};

const OP: &str = "linear";

/// Whether a linear layer with this input and weight runs with bfloat16 products.
pub(crate) fn applies(x: &Tensor, weight: &Tensor) -> bool {
    x.dtype() == DType::BF16 || weight.dtype() == DType::BF16
}

fn check(x: &Tensor, weight: &Tensor) -> Result<()> {
    for (name, t) in [("input", x), ("weight", weight)] {
        if !matches!(t.dtype(), DType::F32 | DType::BF16) {
            return Err(OpError::invalid(
                OP,
                format!(
                    "a bf16 linear layer's {name} must be f32 or bf16, got {:?}",
                    t.dtype()
                ),
            ));
        }
    }
    Ok(())
}

/// `y [m, n] = x [m, k] · weightᵀ (+ bias)` in float32 from bfloat16 `x` and `weight`.
pub(crate) fn forward(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    check(x, weight)?;
    let (m, k, n) = (x.dims()[0], x.dims()[1], weight.dims()[0]);
    let y = if route(x.device()) == Route::Cpu {
        let y = with_values(OP, x, |xv| {
            with_values(OP, weight, |wv| {
                let mut y = vec![0f32; m * n];
                let (lhs, rhs) = (
                    Matrix {
                        values: xv,
                        strides: (k, 1),
                    },
                    Matrix {
                        values: wv,
                        strides: (1, k),
                    },
                );
                gemm(
                    Bf16Path::best(),
                    (m, n, k),
                    (&mut y, (n, 1)),
                    false,
                    &lhs,
                    &rhs,
                );
                Ok(y)
            })
        })?;
        cpu::tensor(OP, y, (m, n))?
    } else {
        let (x, w) = (
            crate::bf16::rounded_f32(OP, x)?,
            crate::bf16::rounded_f32(OP, weight)?,
        );
        x.matmul(&w.t().ctx(OP)?).ctx(OP)?
    };
    match bias {
        Some(b) => crate::broadcast::forward(crate::broadcast::BinaryOp::Add, &y, b),
        None => Ok(y),
    }
}

/// `(grad_x [m, k], grad_weight [n, k])` in float32 for a float32 `grad_y [m, n]` (its
/// products rounded to bfloat16 as the GEMM packs it) and bfloat16 `x` and `weight`.
pub(crate) fn backward(grad_y: &Tensor, x: &Tensor, weight: &Tensor) -> Result<(Tensor, Tensor)> {
    check(x, weight)?;
    let (m, k, n) = (x.dims()[0], x.dims()[1], weight.dims()[0]);
    if route(x.device()) != Route::Cpu {
        let (gy, x, w) = (
            crate::bf16::rounded_f32(OP, grad_y)?,
            crate::bf16::rounded_f32(OP, x)?,
            crate::bf16::rounded_f32(OP, weight)?,
        );
        let dx = gy.matmul(&w).ctx(OP)?;
        return Ok((dx, gy.t().ctx(OP)?.matmul(&x).ctx(OP)?));
    }
    let (dx, dw) = cpu::with_slice::<f32, _>(OP, grad_y, |gd| {
        with_values(OP, x, |xv| {
            with_values(OP, weight, |wv| {
                let gy = Values::F32(gd);
                let mut dx = vec![0f32; m * k];
                let (lhs, rhs) = (
                    Matrix {
                        values: gy,
                        strides: (n, 1),
                    },
                    Matrix {
                        values: wv,
                        strides: (k, 1),
                    },
                );
                gemm(
                    Bf16Path::best(),
                    (m, k, n),
                    (&mut dx, (k, 1)),
                    false,
                    &lhs,
                    &rhs,
                );
                // grad_weight [n, k] = grad_yᵀ [n, m] · x [m, k].
                let mut dw = vec![0f32; n * k];
                let (lhs, rhs) = (
                    Matrix {
                        values: gy,
                        strides: (1, n),
                    },
                    Matrix {
                        values: xv,
                        strides: (k, 1),
                    },
                );
                gemm(
                    Bf16Path::best(),
                    (n, k, m),
                    (&mut dw, (k, 1)),
                    false,
                    &lhs,
                    &rhs,
                );
                Ok((dx, dw))
            })
        })
    })?;
    Ok((cpu::tensor(OP, dx, (m, k))?, cpu::tensor(OP, dw, (n, k))?))
}
