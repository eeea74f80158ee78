//! Convolutions with bfloat16 products, as autocast runs them: the input and the weight
//! are bfloat16 (cast nodes made them), the products run on the bfloat16 GEMM
//! (`crate::bf16`: `vdpbf16ps` where the CPU has it) with float32 sums, and the output
//! and both gradients are float32. Each group is one GEMM over the whole batch (columns
//! `n * pixels + p`), as the float32 path runs small images.

use candle_core::{DType, Tensor};
use rayon::prelude::*;

use super::epilogue::CpuEpilogue;
use super::im2col::{batch_columns, batch_rows, col2im_plane, gather_outputs, scatter_outputs};
use super::params::{Epilogue, Geom, OP};
use crate::bf16::{gemm, with_values, Bf16Path, Matrix, Values};
use crate::cpu;
use crate::error::{OpError, Result};

/// Whether a convolution with this input and weight runs with bfloat16 products.
pub(super) fn applies(x: &Tensor, weight: &Tensor) -> bool {
    x.dtype() == DType::BF16 || weight.dtype() == DType::BF16
}

/// Checks that both the input and the weight are bfloat16 (autocast casts both) and
/// that the bias and residual, if any, are float32.
pub(super) fn check(x: &Tensor, weight: &Tensor, epilogue: &Epilogue<'_>) -> Result<()> {
    if x.dtype() != DType::BF16 || weight.dtype() != DType::BF16 {
        return Err(OpError::invalid(
            OP,
            format!(
                "a bf16 convolution takes a bf16 input and a bf16 weight, got {:?} and {:?}: cast both (autocast does)",
                x.dtype(),
                weight.dtype()
            ),
        ));
    }
    for (name, t) in [("bias", epilogue.bias), ("residual", epilogue.residual)] {
        if let Some(t) = t.filter(|t| t.dtype() != DType::F32) {
            return Err(OpError::invalid(
                OP,
                format!("a bf16 convolution's {name} must be f32, got {:?}", t.dtype()),
            ));
        }
    }
    Ok(())
}

/// Runs `f` on the bits of a bfloat16 tensor.
fn with_bits<R>(t: &Tensor, f: impl FnOnce(&[u16]) -> Result<R>) -> Result<R> {
    with_values(OP, t, |v| match v {
        Values::Bf16(bits) => f(bits),
        Values::F32(_) => Err(OpError::invalid(OP, "expected a bf16 tensor, got f32")),
    })
}

/// `relu?(conv(x, weight) + bias + residual)` in float32, from bfloat16 `x` and `weight`.
pub(super) fn forward(g: &Geom, x: &Tensor, w: &Tensor, epilogue: &Epilogue<'_>) -> Result<Tensor> {
    let (k, p, cout_g) = (g.k(), g.pixels(), g.cout_g());
    let (np, len) = (g.n * p, g.n * g.c_out * p);
    let mut out: Vec<f32> = Vec::with_capacity(len);
    with_bits(x, |xs| {
        with_bits(w, |ws| {
            for grp in 0..g.groups {
                let col = batch_columns(g, xs, grp);
                let w_g = &ws[grp * cout_g * k..][..cout_g * k];
                let mut tmp = vec![0f32; cout_g * np];
                gemm(
                    Bf16Path::best(),
                    (cout_g, np, k),
                    (&mut tmp, (np, 1)),
                    false,
                    &Matrix { values: Values::Bf16(w_g), strides: (k, 1) },
                    &Matrix { values: Values::Bf16(&col), strides: (np, 1) },
                );
                scatter_outputs(g, &tmp, &mut out.spare_capacity_mut()[..len], grp);
            }
            Ok(())
        })
    })?;
    // SAFETY: every (image, channel) plane belongs to exactly one group, whose planes
    // scatter_outputs wrote whole.
    unsafe { out.set_len(len) };
    apply_epilogue(g, &mut out, epilogue)?;
    cpu::tensor(OP, out, (g.n, g.c_out, g.oh, g.ow))
}

/// The float32 epilogue (bias, residual, ReLU) over a finished output.
fn apply_epilogue(g: &Geom, out: &mut [f32], epilogue: &Epilogue<'_>) -> Result<()> {
    let bias = epilogue
        .bias
        .map(|b| cpu::with_slice::<f32, _>(OP, b, |s| Ok(s.to_vec())))
        .transpose()?;
    let run = |residual: Option<&[f32]>| {
        let epi = CpuEpilogue { bias, residual, relu: epilogue.relu };
        if !epi.is_empty() {
            out.par_chunks_mut(g.c_out * g.pixels())
                .enumerate()
                .for_each(|(n, image)| epi.apply(g, n, 0, image));
        }
        Ok(())
    };
    match epilogue.residual {
        Some(r) => cpu::with_slice::<f32, _>(OP, r, |rs| run(Some(rs))),
        None => run(None),
    }
}

/// The float32 input gradient from a float32 output gradient and a bfloat16 weight
/// (the output gradient is rounded to bfloat16 as the GEMM packs it).
pub(super) fn backward_data(g: &Geom, grad_out: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (k, p, cin_g, cout_g) = (g.k(), g.pixels(), g.cin_g(), g.cout_g());
    let np = g.n * p;
    let (kk, hw) = (g.kh * g.kw, g.h * g.w);
    let mut dx = vec![0f32; g.n * g.c_in * hw];
    cpu::with_slice::<f32, _>(OP, grad_out, |gs| {
        with_bits(w, |ws| {
            let mut col = vec![0f32; k * np];
            for grp in 0..g.groups {
                let gy = gather_outputs(g, gs, grp);
                let w_g = &ws[grp * cout_g * k..][..cout_g * k];
                // col (k × np) = w_gᵀ (k × cout_g) · gy (cout_g × np).
                gemm(
                    Bf16Path::best(),
                    (k, np, cout_g),
                    (&mut col, (np, 1)),
                    false,
                    &Matrix { values: Values::Bf16(w_g), strides: (1, k) },
                    &Matrix { values: Values::F32(&gy), strides: (np, 1) },
                );
                // One task per input plane of this group: planes are disjoint in dx.
                dx.par_chunks_mut(hw).enumerate().for_each(|(i, plane)| {
                    let (n, ch) = (i / g.c_in, i % g.c_in);
                    if ch / cin_g == grp {
                        let rows = &col[(ch - grp * cin_g) * kk * np..][..kk * np];
                        col2im_plane(g, rows, plane, np, n * p);
                    }
                });
            }
            Ok(())
        })
    })?;
    cpu::tensor(OP, dx, (g.n, g.c_in, g.h, g.w))
}

/// The float32 weight gradient from a float32 output gradient and a bfloat16 input.
pub(super) fn backward_filter(g: &Geom, grad_out: &Tensor, x: &Tensor) -> Result<Tensor> {
    let (k, p, cout_g) = (g.k(), g.pixels(), g.cout_g());
    let np = g.n * p;
    let mut dw = vec![0f32; g.c_out * k];
    cpu::with_slice::<f32, _>(OP, grad_out, |gs| {
        with_bits(x, |xs| {
            for grp in 0..g.groups {
                let rows = batch_rows(g, xs, grp);
                let gy = gather_outputs(g, gs, grp);
                let dst = &mut dw[grp * cout_g * k..][..cout_g * k];
                // dw_g (cout_g × k) = gy (cout_g × np) · rows (np × k).
                gemm(
                    Bf16Path::best(),
                    (cout_g, k, np),
                    (dst, (k, 1)),
                    false,
                    &Matrix { values: Values::F32(&gy), strides: (np, 1) },
                    &Matrix { values: Values::Bf16(&rows), strides: (k, 1) },
                );
            }
            Ok(())
        })
    })?;
    cpu::tensor(OP, dw, (g.c_out, g.cin_g(), g.kh, g.kw))
}
