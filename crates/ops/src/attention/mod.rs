//! `torch.nn.functional.scaled_dot_product_attention`: `softmax(q·kᵀ·scale + mask)·v`,
//! fused. The forward keeps only the output and one log-sum-exp per query row (O(T) per
//! head, not the T×T probabilities); the backward draws the probabilities again, tile by
//! tile, from `q`, `k` and the log-sum-exp. Dropout on the probabilities is drawn from a
//! counter (as wick's dropout), so the backward draws the same mask without storing it.
//!
//! On the CPU a tiled kernel with an online softmax (flash attention's scheme), on CUDA
//! wick's kernel (`cuda/attention.cu`), elsewhere candle's ops (which hold the T×T
//! scores: the unfused graph, kept as the reference path).

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
mod generic;
mod low_precision;
mod mask;
mod params;

use candle_core::{DType, Tensor};

use crate::cpu::dispatch_float;
use crate::error::Result;
use crate::route::{route, Route};
pub use params::{lse_dtype, Attention, AttentionGrads, AttentionOutput, AttentionShape};
use params::{Call, OP};

/// Checks the operands' dtypes and the mask, and gives the shape.
fn check(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    a: &Attention,
) -> Result<AttentionShape> {
    let shape = AttentionShape::new(q.dims(), k.dims(), v.dims())?;
    crate::cpu::same_dtype(OP, q.dtype(), &[("key", k), ("value", v)])?;
    a.check(mask.is_some())?;
    if let Some(m) = mask {
        shape.check_mask(m.dims(), m.dtype(), q.dtype())?;
    }
    Ok(shape)
}

/// `softmax(q·kᵀ·scale + mask)·v`, with dropout on the softmax in training
/// (`a.dropout_p > 0`, drawn for `step`). `mask` broadcasts to `[.., L, S]`: `u8` where
/// nonzero means "may attend" (PyTorch's boolean mask), or `q`'s dtype, added to the
/// scores.
///
/// # Examples
///
/// ```
/// use candle_core::{Device, Tensor};
/// use wick_ops::attention::{scaled_dot_product_attention, Attention};
///
/// let q = Tensor::randn(0f32, 1., (2, 4, 16, 8), &Device::Cpu)?;
/// let a = Attention { scale: 1.0 / 8f64.sqrt(), causal: true, dropout_p: 0.0, seed: 0,
///     products: Default::default() };
/// let y = scaled_dot_product_attention(&q, &q, &q, None, &a, 0)?;
/// assert_eq!(y.out.dims(), &[2, 4, 16, 8]);
/// assert_eq!(y.lse.dims(), &[2, 4, 16]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn scaled_dot_product_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    a: &Attention,
    step: u64,
) -> Result<AttentionOutput> {
    let shape = check(q, k, v, mask, a)?;
    let c = Call::new(&shape, [q, k, v], mask, a, step);
    match Path::of(&shape, q, a) {
        Path::Cpu => dispatch_float!(OP, q.dtype(), cpu::forward(&c)),
        #[cfg(feature = "cuda")]
        Path::Cuda => cuda::forward(&c),
        Path::Rounded(low) => {
            let [q, k, v] = low_precision::rounded([q, k, v], low)?;
            let a = low_precision::native(a);
            scaled_dot_product_attention(&q, &k, &v, mask, &a, step)
        }
        Path::Generic => generic::forward(&c),
    }
}

/// The gradients of [`scaled_dot_product_attention`] from its inputs, its output and
/// log-sum-exp, and the output's gradient (the probabilities drawn again, not stored).
#[allow(clippy::too_many_arguments)]
pub fn scaled_dot_product_attention_backward(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    saved: &AttentionOutput,
    grad_out: &Tensor,
    mask: Option<&Tensor>,
    a: &Attention,
    step: u64,
) -> Result<AttentionGrads> {
    let shape = check(q, k, v, mask, a)?;
    for (name, t, want) in [
        ("output", &saved.out, shape.out()),
        ("output gradient", grad_out, shape.out()),
        ("log-sum-exp", &saved.lse, shape.lse()),
    ] {
        if t.dims() != want.as_slice() {
            return Err(crate::invalid!(
                OP,
                "the {name} has shape {:?}, expected {want:?}",
                t.dims()
            ));
        }
    }
    crate::cpu::same_dtype(
        OP,
        q.dtype(),
        &[("output", &saved.out), ("output gradient", grad_out)],
    )?;
    crate::cpu::same_dtype(OP, lse_dtype(q.dtype()), &[("log-sum-exp", &saved.lse)])?;
    let c = Call::new(&shape, [q, k, v], mask, a, step);
    match Path::of(&shape, q, a) {
        Path::Cpu => dispatch_float!(OP, q.dtype(), cpu::backward(&c, saved, grad_out)),
        #[cfg(feature = "cuda")]
        Path::Cuda => cuda::backward(&c, saved, grad_out),
        Path::Rounded(low) => {
            let [q, k, v, dy] = low_precision::rounded([q, k, v, grad_out], low)?;
            let a = low_precision::native(a);
            scaled_dot_product_attention_backward(&q, &k, &v, saved, &dy, mask, &a, step)
        }
        Path::Generic => generic::backward(&c, saved, grad_out),
    }
}

/// Which implementation a call runs.
enum Path {
    /// The tiled CPU kernel (f32 and f64).
    Cpu,
    /// wick's CUDA kernels, for the shapes they take (16-bit products included).
    #[cfg(feature = "cuda")]
    Cuda,
    /// candle's ops with 16-bit products: the operands rounded to this dtype's values,
    /// then the float32 path ([`low_precision`]).
    Rounded(DType),
    /// candle's ops.
    Generic,
}

impl Path {
    fn of(shape: &AttentionShape, q: &Tensor, a: &Attention) -> Path {
        let route = route(q.device());
        if route == Route::Cpu && matches!(q.dtype(), DType::F32 | DType::F64) {
            return Path::Cpu;
        }
        #[cfg(feature = "cuda")]
        if route == Route::Cuda && cuda::fits(shape) {
            return Path::Cuda;
        }
        #[cfg(not(feature = "cuda"))]
        let _ = shape;
        if let Some(low) = low_precision::dtype(q, a) {
            return Path::Rounded(low);
        }
        Path::Generic
    }
}
