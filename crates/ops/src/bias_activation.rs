//! A bias added over the last dimension, then an activation, in one node: Hugging Face's
//! `Conv1D` (`x·W + b`) before GPT-2's GELU, or any `y = act(h + b)` the
//! `bias_activation` pass finds. The forward reads `h` and writes `y`, where the two
//! ops read and wrote the sum in between; the backward recomputes `h + b` where it read
//! the kept sum, and returns the bias's gradient (the column sums) beside `h`'s.
//!
//! On the CPU every element is computed by the same function, in the same dtype, as the
//! two ops compute it (f32: the activations' vector lanes; f64: in f64, rounded once),
//! and the bias gradient by the same column sums: the fused graph's values are the
//! unfused graph's, bit for bit. Elsewhere the two ops run one after the other.

use candle_core::{DType, Tensor};
use rayon::prelude::*;

use crate::activation::{self, derivative64, forward64, Activation};
use crate::activation_lanes::lanes;
use crate::broadcast::{self, BinaryOp};
use crate::cpu::{self, Float, WideKernel};
use crate::error::Result;

/// Checks `h [.., C]` against the bias `b [C]` and the kind.
fn check(kind: Activation, h: &Tensor, b: &Tensor) -> Result<usize> {
    let op = kind.bias_name();
    if !kind.fuses_with_bias() {
        return Err(crate::invalid!(
            op,
            "{} does not fuse with a bias (GELU, GELU tanh and SiLU do)",
            kind.name()
        ));
    }
    let c = *h.dims().last().unwrap_or(&0);
    crate::shape::same(op, "bias", b.dims(), "the input's last dimension", &[c])?;
    crate::cpu::same_dtype(op, h.dtype(), &[("the bias", b)])?;
    Ok(c)
}

/// `act(h + b)`, `b` broadcast over the rows of `h [.., C]`.
pub fn bias_activation(kind: Activation, h: &Tensor, b: &Tensor) -> Result<Tensor> {
    let c = check(kind, h, b)?;
    if cpu::on_cpu_kernel(h) {
        return match h.dtype() {
            DType::F32 => match kind {
                Activation::Gelu => rows::<f32, _>(kind, h, b, None, c, lanes::gelu),
                Activation::GeluTanh => rows::<f32, _>(kind, h, b, None, c, lanes::gelu_tanh),
                _ => rows::<f32, _>(kind, h, b, None, c, lanes::silu),
            },
            _ => rows::<f64, _>(kind, h, b, None, c, move |x, _| forward64(kind, 0.0, x)),
        };
    }
    let x = broadcast::forward(BinaryOp::Add, h, b)?;
    activation::forward(kind, 0.0, &x)
}

/// `(grad_h, grad_b)` of [`bias_activation`] for the output gradient `grad_y`.
pub fn bias_activation_backward(
    kind: Activation,
    grad_y: &Tensor,
    h: &Tensor,
    b: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let c = check(kind, h, b)?;
    let op = kind.bias_backward_name();
    crate::shape::same(op, "output gradient", grad_y.dims(), "input", h.dims())?;
    cpu::same_dtype(op, h.dtype(), &[("output gradient", grad_y)])?;
    let grad_h = if cpu::on_cpu_kernel(h) {
        match h.dtype() {
            DType::F32 => match kind {
                Activation::Gelu => {
                    rows::<f32, _>(kind, h, b, Some(grad_y), c, lanes::gelu_backward)
                }
                Activation::GeluTanh => {
                    rows::<f32, _>(kind, h, b, Some(grad_y), c, lanes::gelu_tanh_backward)
                }
                _ => rows::<f32, _>(kind, h, b, Some(grad_y), c, lanes::silu_backward),
            },
            _ => rows::<f64, _>(kind, h, b, Some(grad_y), c, move |x, g| {
                g * derivative64(kind, 0.0, x)
            }),
        }?
    } else {
        let x = broadcast::forward(BinaryOp::Add, h, b)?;
        activation::backward(kind, 0.0, grad_y, &x)?
    };
    let grad_b = broadcast::sum_to_shape(op, &grad_h, &[c])?;
    Ok((grad_h, grad_b))
}

/// FLOPs of the forward: the add and the activation.
pub fn flops(kind: Activation, shape: &[usize]) -> u64 {
    broadcast::flops(shape) + activation::flops(kind, shape)
}

/// FLOPs of the backward: the activation's gradient and the bias's column sums.
pub fn backward_flops(kind: Activation, shape: &[usize]) -> u64 {
    2 * broadcast::flops(shape) + activation::backward_flops(kind, shape)
}

/// `out[r, j] = f(h[r, j] + b[j], g[r, j])` over rows of `c`, in parallel blocks of rows
/// (`g` = 0 without an output gradient).
fn rows<T: Float, F: Fn(T, T) -> T + Sync + Send + Copy>(
    kind: Activation,
    h: &Tensor,
    b: &Tensor,
    g: Option<&Tensor>,
    c: usize,
    f: F,
) -> Result<Tensor> {
    let op = kind.bias_name();
    let mut out = vec![T::ZERO; h.elem_count()];
    if c > 0 && !out.is_empty() {
        let per = (cpu::CHUNK / c).max(1) * c;
        cpu::with_slices::<T, _>(op, h, b, |hs, bs| {
            cpu::with_opt_slice::<T, _>(op, g, |gs| {
                out.par_chunks_mut(per).enumerate().for_each(|(i, o)| {
                    let at = i * per..i * per + o.len();
                    cpu::run_wide(Rows {
                        out: o,
                        h: &hs[at.clone()],
                        b: bs,
                        g: gs.map(|gs| &gs[at]),
                        f,
                    })
                });
                Ok(())
            })
        })?;
    }
    cpu::tensor(op, out, h.dims())
}

/// One block of whole rows of [`rows`], its loop inlined into the wide-vector wrapper.
struct Rows<'a, T, F> {
    out: &'a mut [T],
    h: &'a [T],
    b: &'a [T],
    g: Option<&'a [T]>,
    f: F,
}

impl<T: Float, F: Fn(T, T) -> T> WideKernel for Rows<'_, T, F> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let (c, f) = (self.b.len(), self.f);
        let rows = self.out.chunks_exact_mut(c).zip(self.h.chunks_exact(c));
        match self.g {
            Some(g) => {
                for ((o, h), g) in rows.zip(g.chunks_exact(c)) {
                    for (((o, &h), &b), &g) in o.iter_mut().zip(h).zip(self.b).zip(g) {
                        *o = f(h + b, g);
                    }
                }
            }
            None => {
                for (o, h) in rows {
                    for ((o, &h), &b) in o.iter_mut().zip(h).zip(self.b) {
                        *o = f(h + b, T::ZERO);
                    }
                }
            }
        }
    }
}
