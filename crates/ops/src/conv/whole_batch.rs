//! Convolutions of small images (few output pixels per image: `cpu.rs`'s
//! `Spread::WholeBatch`): one GEMM over the whole batch, whose columns are `n * pixels +
//! p`, with all threads inside the GEMM. The im2col matrix is built for every image at
//! once, and the outputs are gathered into and scattered from the GEMM's layout.

use candle_core::Tensor;
use rayon::prelude::*;

use super::epilogue::CpuEpilogue;
use super::im2col::{
    batch_columns, batch_rows, col2im_pixels, col2im_plane, gather_outputs, scatter_outputs,
    transpose,
};
use super::packed_columns;
use super::params::{Geom, OP};
use crate::bf16;
use crate::cpu::{self, Float};
use crate::error::Result;

/// The forward pass: `w · im2col` of every image at once, then the epilogue.
pub(super) fn forward<T: Float>(
    g: &Geom,
    x: &Tensor,
    w: &Tensor,
    epi: &CpuEpilogue<'_, T>,
) -> Result<Tensor> {
    let (k, p, cout_g) = (g.k(), g.pixels(), g.cout_g());
    let np = g.n * p;
    let len = g.n * g.c_out * p;
    // Written once (each group's planes by scatter_outputs), not zeroed first.
    let mut out: Vec<T> = Vec::with_capacity(len);
    cpu::with_slices::<T, _>(OP, x, w, |xs, ws| {
        for grp in 0..g.groups {
            let w_g = &ws[grp * cout_g * k..][..cout_g * k];
            let mut tmp: Vec<T> = Vec::with_capacity(cout_g * np);
            let dst = &mut tmp.spare_capacity_mut()[..cout_g * np];
            if !packed_columns::forward(g, xs, w_g, dst) {
                let col = batch_columns(g, xs, grp);
                let (lhs, rhs) = ((w_g, (k, 1)), (&col[..], (np, 1)));
                bf16::gemm_uninit_with(g.products, (cout_g, np, k), dst, lhs, rhs, true);
            }
            // SAFETY: gemm_uninit wrote all cout_g * np slots.
            unsafe { tmp.set_len(cout_g * np) };
            scatter_outputs(g, &tmp, &mut out.spare_capacity_mut()[..len], grp);
        }
        Ok(())
    })?;
    // SAFETY: every (image, channel) plane of p slots belongs to exactly one group, and
    // scatter_outputs wrote each group's planes whole (m holds cout_g * n * p values).
    unsafe { out.set_len(len) };
    if !epi.is_empty() {
        let per_image = g.c_out * g.pixels();
        out.par_chunks_mut(per_image)
            .enumerate()
            .for_each(|(n, image)| epi.apply(g, n, 0, image));
    }
    cpu::tensor(OP, out, (g.n, g.c_out, g.oh, g.ow))
}

/// The input gradient: `wᵀ · grad_out` of every image at once, added back by col2im (a
/// pointwise convolution's, one value per input position, transposed back per image).
pub(super) fn backward_data<T: Float>(g: &Geom, grad_out: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (k, p, cin_g, cout_g) = (g.k(), g.pixels(), g.cin_g(), g.cout_g());
    let np = g.n * p;
    let in_img = g.c_in * g.h * g.w;
    let mut dx = vec![T::ZERO; g.n * in_img];
    cpu::with_slices::<T, _>(OP, grad_out, w, |gs, ws| {
        let mut col = vec![T::ZERO; k * np];
        for grp in 0..g.groups {
            let gy = gather_outputs(g, gs, grp);
            let w_g = &ws[grp * cout_g * k..][..cout_g * k];
            // col (k × np) = w_gᵀ (k × cout_g) · gy (cout_g × np). When col is taller
            // than w_g is wide it is stored column-major (each pixel's window values
            // contiguous): the gemm crate runs such products up to twice as fast.
            let column_major = k > cout_g;
            let col_strides = if column_major { (1, k) } else { (np, 1) };
            let (lhs, rhs) = ((w_g, (1, k)), (&gy[..], (np, 1)));
            bf16::gemm_strided_with(
                g.products,
                (k, np, cout_g),
                (&mut col, col_strides),
                false,
                (lhs, rhs),
                true,
            );
            if column_major {
                // One task per image: images are disjoint in dx.
                dx.par_chunks_mut(in_img).enumerate().for_each(|(n, dx_n)| {
                    let dx_ng = &mut dx_n[grp * cin_g * g.h * g.w..][..cin_g * g.h * g.w];
                    let cols = &col[n * p * k..][..p * k];
                    if g.is_pointwise() {
                        // One value per input position: the image's [pixels, cin_g]
                        // block, transposed.
                        transpose(cols, p, k, dx_ng);
                    } else {
                        col2im_pixels(g, cols, dx_ng);
                    }
                });
            } else {
                // One task per input plane of this group: planes are disjoint in dx.
                let (kk, hw) = (g.kh * g.kw, g.h * g.w);
                dx.par_chunks_mut(hw).enumerate().for_each(|(i, plane)| {
                    let (n, ch) = (i / g.c_in, i % g.c_in);
                    if ch / cin_g == grp {
                        let rows = &col[(ch - grp * cin_g) * kk * np..][..kk * np];
                        col2im_plane(g, rows, plane, np, n * p);
                    }
                });
            }
        }
        Ok(())
    })?;
    cpu::tensor(OP, dx, (g.n, g.c_in, g.h, g.w))
}

/// The weight gradient: `grad_out · im2colᵀ` summed over the batch in one GEMM.
pub(super) fn backward_filter<T: Float>(g: &Geom, grad_out: &Tensor, x: &Tensor) -> Result<Tensor> {
    let (k, p, cout_g) = (g.k(), g.pixels(), g.cout_g());
    let np = g.n * p;
    let mut dw = vec![T::ZERO; g.c_out * k];
    cpu::with_slices::<T, _>(OP, grad_out, x, |gs, xs| {
        for grp in 0..g.groups {
            // dw_g (cout_g × k) = gy (cout_g × np) · rows (np × k): the pixel-major im2col
            // matrix, or for a pointwise convolution its planes side by side read
            // transposed (no im2col to build).
            let (rows, rows_strides) = if g.is_pointwise() {
                (batch_columns(g, xs, grp), (1, np))
            } else {
                (batch_rows(g, xs, grp), (k, 1))
            };
            let gy = gather_outputs(g, gs, grp);
            let dst = &mut dw[grp * cout_g * k..][..cout_g * k];
            let (lhs, rhs) = ((&gy[..], (np, 1)), (&rows[..], rows_strides));
            bf16::gemm_strided_with(
                g.products,
                (cout_g, k, np),
                (dst, (k, 1)),
                false,
                (lhs, rhs),
                true,
            );
        }
        Ok(())
    })?;
    cpu::tensor(OP, dw, (g.c_out, g.cin_g(), g.kh, g.kw))
}
