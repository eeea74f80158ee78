//! The CPU convolution: im2col + GEMM through the `gemm` crate, for the forward pass and
//! both gradients, or Winograd's F(2x2, 3x3) (`winograd.rs`, `winograd_filter.rs`) for the
//! 3x3 stride-1 shapes where it pays.
//!
//! One driver decides how every pass spreads over threads ([`Spread`]):
//! - small images (under [`WHOLE_BATCH_BELOW_PIXELS`] output pixels, or
//!   [`POINTWISE_WHOLE_BATCH_BELOW_PIXELS`] for a 1x1 convolution): one GEMM over the
//!   whole batch (columns `n * pixels + p`), all threads inside the GEMM
//!   (`whole_batch.rs`);
//! - several images and threads: images split across threads, each running
//!   single-threaded GEMMs into its own reused im2col buffer;
//! - a batch of one (or one thread): image by image, every thread inside the GEMM and the
//!   im2col/col2im.
//!
//! A 1x1, stride-1, unpadded convolution needs no im2col at all. The input gradient is
//! GEMM then col2im (not a transposed convolution); the weight gradient sums per-thread
//! partial gradients.

use std::mem::MaybeUninit;
use std::ops::Range;

use candle_core::Tensor;
use rayon::prelude::*;

use super::epilogue::CpuEpilogue;
use super::im2col::{col2im, im2col, transpose};
use super::params::{Geom, OP};
use super::{amx_direct, amx_filter, depthwise, whole_batch, winograd, winograd_filter};
use crate::bf16;
use crate::cpu::{self, Float};
use crate::error::Result;

/// Below this many output pixels per image, a convolution runs as one GEMM over the whole
/// batch (packing the weights once) instead of one GEMM per image.
const WHOLE_BATCH_BELOW_PIXELS: usize = 256;

/// [`WHOLE_BATCH_BELOW_PIXELS`] for a pointwise convolution ([`Geom::is_pointwise`]),
/// whose per-image GEMMs read the input and write the output where they lie, while the
/// whole-batch GEMM gathers them first and scatters back. MobileNet-v2's 1x1 layers at
/// batch 8 ran all three passes 2-3x faster image by image at 14x14 and 7x7 (f32 and
/// bf16, one thread or two); at 4x4 bf16 ran slower that way.
const POINTWISE_WHOLE_BATCH_BELOW_PIXELS: usize = 32;

/// How a convolution pass spreads over the CPU's threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spread {
    /// One GEMM over the whole batch, all threads inside it.
    WholeBatch,
    /// Images split across threads; each image's GEMMs single-threaded.
    AcrossImages,
    /// Image by image, all threads inside each GEMM, im2col and col2im.
    WithinImage,
}

fn spread(g: &Geom) -> Spread {
    let whole_batch_below = if g.is_pointwise() {
        POINTWISE_WHOLE_BATCH_BELOW_PIXELS
    } else {
        WHOLE_BATCH_BELOW_PIXELS
    };
    if g.n > 1 && g.pixels() < whole_batch_below {
        Spread::WholeBatch
    } else if g.n >= 2 && cpu::threads() > 1 {
        Spread::AcrossImages
    } else {
        Spread::WithinImage
    }
}

/// Fills `g.n` image blocks of `img_len` slots each: `per_image(scratch, n, block,
/// parallel)` must write every slot of image `n`'s block. `scratch` is an im2col buffer
/// reused across the images of one thread; `parallel` says whether the call may split its
/// own work across threads.
fn fill_images<T: Float>(
    g: &Geom,
    img_len: usize,
    per_image: impl Fn(&mut Vec<T>, usize, &mut [MaybeUninit<T>], bool) + Sync,
) -> Vec<T> {
    let len = g.n * img_len;
    let mut out: Vec<T> = Vec::with_capacity(len);
    let slots = &mut out.spare_capacity_mut()[..len];
    if spread(g) == Spread::AcrossImages {
        // The worker threads run the caller's bf16 path (a thread-local choice).
        let path = bf16::Bf16Path::current();
        slots
            .par_chunks_mut(img_len)
            .enumerate()
            .with_min_len(g.n.div_ceil(cpu::threads()).max(1))
            .for_each_init(Vec::new, |col, (n, block)| {
                path.scope(|| per_image(col, n, block, false))
            });
    } else {
        let mut col = Vec::new();
        for (n, block) in slots.chunks_mut(img_len).enumerate() {
            per_image(&mut col, n, block, true);
        }
    }
    // SAFETY: the `len` slots are the `g.n` blocks handed to `per_image`, which writes
    // every slot of its block (its contract above).
    unsafe { out.set_len(len) };
    out
}

/// The sum over images of `partial(range, parallel)`, each a `len`-long vector for the
/// images in `range`: one contiguous range per thread, summed at the end.
fn sum_over_images<T: Float>(
    g: &Geom,
    len: usize,
    partial: impl Fn(Range<usize>, bool) -> Vec<T> + Sync,
) -> Vec<T> {
    if spread(g) != Spread::AcrossImages {
        return partial(0..g.n, true);
    }
    let threads = cpu::threads().min(g.n);
    let chunk = g.n.div_ceil(threads);
    let path = bf16::Bf16Path::current();
    let partials: Vec<Vec<T>> = (0..threads)
        .into_par_iter()
        .map(|t| path.scope(|| partial(t * chunk..((t + 1) * chunk).min(g.n), false)))
        .collect();
    let mut iter = partials.into_iter();
    let mut total = iter.next().unwrap_or_else(|| vec![T::ZERO; len]);
    for part in iter {
        for (a, b) in total.iter_mut().zip(part) {
            *a += b;
        }
    }
    total
}

/// The slice of group `grp` of image `n` in NCHW data with `per_group` values per group.
fn group_of<'a, T>(data: &'a [T], n: usize, grp: usize, g: &Geom, per_group: usize) -> &'a [T] {
    &data[(n * g.groups + grp) * per_group..][..per_group]
}

pub(super) fn forward<T: Float>(
    g: &Geom,
    x: &Tensor,
    w: &Tensor,
    epilogue: &super::params::Epilogue<'_>,
) -> Result<Tensor> {
    let bias = epilogue
        .bias
        .map(|b| cpu::with_slice::<T, _>(OP, b, |s| Ok(s.to_vec())))
        .transpose()?;
    let run = |residual: Option<&[T]>| {
        let epi = CpuEpilogue {
            bias,
            residual,
            relu: epilogue.relu,
        };
        forward_with::<T>(g, x, w, &epi)
    };
    match epilogue.residual {
        Some(r) => cpu::with_slice::<T, _>(OP, r, |rs| run(Some(rs))),
        None => run(None),
    }
}

/// Whether `g`'s bfloat16 products run on AMX tiles: there Winograd's transforms cost
/// more than the products they save (ResNet-18 CIFAR at batch 32, weight gradients: 12.4
/// against im2col's 5.5 ms at 8x8, 7.2 against 6.1 at 16x16; `conv_passes` with
/// `WICK_CONV_ALGORITHM=auto` and `im2col`).
fn amx_products(g: &Geom) -> bool {
    g.products == bf16::Products::Bf16 && bf16::Bf16Path::current() == bf16::Bf16Path::Amx
}

/// The Winograd shape of `g` when Winograd's F(2x2, 3x3) runs it: 3x3, stride 1, no
/// dilation, one group, padding up to 2, at least [`winograd::MIN_CHANNELS`] channels in
/// and out, enough output tiles to pay for the weight transform
/// ([`winograd::enough_tiles`]; and per image, to pay for
/// the transforms' short rows: [`winograd::min_tiles_per_image`]), not float16 products
/// nor bfloat16 ones on AMX ([`amx_products`]), and [`ConvAlgorithm::Auto`](super::algorithm::ConvAlgorithm) in force. float16
/// products run on float32 arithmetic here, so Winograd's fewer products would save time
/// but round its transformed tiles to float16 too: about three times the error of
/// PyTorch's float16 convolutions (`autocast_pytorch`), where im2col matches them.
fn winograd_shape(g: &Geom) -> Option<winograd::Shape> {
    let per_image = g.oh.div_ceil(2) * g.ow.div_ceil(2);
    let tiles = g.n * per_image;
    let fits = g.groups == 1
        && g.products != crate::bf16::Products::F16
        && (g.kh, g.kw) == (3, 3)
        && g.p.stride == [1, 1]
        && g.p.dilation == [1, 1]
        && g.p.padding[0] <= 2
        && g.p.padding[1] <= 2
        && g.c_in.min(g.c_out) >= winograd::MIN_CHANNELS
        && winograd::enough_tiles(tiles, g.n * g.pixels(), g.products)
        && per_image >= winograd::min_tiles_per_image(g.products)
        && !amx_products(g)
        && super::algorithm::ConvAlgorithm::current() == super::algorithm::ConvAlgorithm::Auto;
    fits.then_some(winograd::Shape {
        n: g.n,
        c_in: g.c_in,
        h: g.h,
        w: g.w,
        c_out: g.c_out,
        pad: g.p.padding,
        products: g.products,
    })
}

fn forward_with<T: Float>(
    g: &Geom,
    x: &Tensor,
    w: &Tensor,
    epi: &CpuEpilogue<'_, T>,
) -> Result<Tensor> {
    if depthwise::applies(g) {
        return cpu::from_slices::<T>(OP, x, w, (g.n, g.c_out, g.oh, g.ow), |xs, ws| {
            Ok(depthwise::forward(g, xs, ws, epi))
        });
    }
    if amx_direct::fits::<T>(g) {
        return cpu::from_slices::<T>(OP, x, w, (g.n, g.c_out, g.oh, g.ow), |xs, ws| {
            let len = g.n * g.c_out * g.pixels();
            let mut out: Vec<T> = Vec::with_capacity(len);
            let slots = &mut out.spare_capacity_mut()[..len];
            let ran = amx_direct::convolve(g, amx_direct::Pass::Forward, xs, ws, slots);
            assert!(ran, "amx_direct: fits");
            if !epi.is_empty() {
                for (n, image) in slots.chunks_mut(g.c_out * g.pixels()).enumerate() {
                    epi.apply_columns(g, n, 0, image, (0, g.pixels()), true);
                }
            }
            // SAFETY: `convolve` wrote every output slot.
            unsafe { out.set_len(len) };
            Ok(out)
        });
    }
    if let Some(s) = winograd_shape(g) {
        return cpu::from_slices::<T>(OP, x, w, (g.n, g.c_out, g.oh, g.ow), |xs, ws| {
            let u = winograd::transform_weights(ws, g.c_out, g.c_in, false);
            let len = g.n * g.c_out * g.pixels();
            let mut out: Vec<T> = Vec::with_capacity(len);
            let slots = &mut out.spare_capacity_mut()[..len];
            winograd::convolve(&s, xs, &u, slots);
            if !epi.is_empty() {
                for (n, image) in slots.chunks_mut(g.c_out * g.pixels()).enumerate() {
                    epi.apply_columns(g, n, 0, image, (0, g.pixels()), true);
                }
            }
            // SAFETY: `convolve` writes every output slot.
            unsafe { out.set_len(len) };
            Ok(out)
        });
    }
    if spread(g) == Spread::WholeBatch {
        return whole_batch::forward::<T>(g, x, w, epi);
    }
    let (k, p, cout_g) = (g.k(), g.pixels(), g.cout_g());
    let in_group = g.cin_g() * g.h * g.w;
    cpu::from_slices::<T>(OP, x, w, (g.n, g.c_out, g.oh, g.ow), |xs, ws| {
        let packed = packed_weights(g, ws, false);
        Ok(fill_images(g, g.c_out * p, |col, n, out_n, parallel| {
            for grp in 0..g.groups {
                let x_ng = group_of(xs, n, grp, g, in_group);
                let rhs: &[T] = if g.is_pointwise() {
                    x_ng
                } else {
                    im2col(g, x_ng, col, parallel);
                    col
                };
                let w_g = &ws[grp * cout_g * k..][..cout_g * k];
                let dst = &mut out_n[grp * cout_g * p..][..cout_g * p];
                let (lhs, rhs) = ((w_g, (k, 1)), (rhs, (p, 1)));
                let packed = packed[grp].as_ref();
                let shape = (cout_g, p, k);
                bf16::gemm_uninit_packed(g.products, packed, shape, dst, lhs, rhs, parallel);
                if !epi.is_empty() {
                    epi.apply_columns(g, n, grp * cout_g, dst, (0, p), parallel);
                }
            }
        }))
    })
}

pub(super) fn backward_data<T: Float>(g: &Geom, grad_out: &Tensor, w: &Tensor) -> Result<Tensor> {
    if depthwise::applies(g) {
        return cpu::from_slices::<T>(OP, grad_out, w, (g.n, g.c_in, g.h, g.w), |gs, ws| {
            Ok(depthwise::backward_data(g, gs, ws))
        });
    }
    if amx_direct::fits::<T>(g) {
        return cpu::from_slices::<T>(OP, grad_out, w, (g.n, g.c_in, g.h, g.w), |gs, ws| {
            let len = g.n * g.c_in * g.h * g.w;
            let mut out: Vec<T> = Vec::with_capacity(len);
            let slots = &mut out.spare_capacity_mut()[..len];
            let ran = amx_direct::convolve(g, amx_direct::Pass::BackwardData, gs, ws, slots);
            assert!(ran, "amx_direct: fits");
            // SAFETY: `convolve` wrote every slot.
            unsafe { out.set_len(len) };
            Ok(out)
        });
    }
    if let Some(s) = winograd_shape(g) {
        return winograd_backward_data::<T>(g, &s, grad_out, w);
    }
    if spread(g) == Spread::WholeBatch {
        return whole_batch::backward_data::<T>(g, grad_out, w);
    }
    let (k, p, cout_g) = (g.k(), g.pixels(), g.cout_g());
    let in_group = g.cin_g() * g.h * g.w;
    cpu::from_slices::<T>(OP, grad_out, w, (g.n, g.c_in, g.h, g.w), |gs, ws| {
        let packed = packed_weights(g, ws, true);
        Ok(fill_images(
            g,
            g.c_in * g.h * g.w,
            |col, n, dx_n, parallel| {
                for grp in 0..g.groups {
                    let g_ng = group_of(gs, n, grp, g, cout_g * p);
                    let w_g = &ws[grp * cout_g * k..][..cout_g * k];
                    let dx_ng = &mut dx_n[grp * in_group..][..in_group];
                    let packed = packed[grp].as_ref();
                    // col (k × p) = w_gᵀ (k × cout_g) · g_ng (cout_g × p)
                    if g.is_pointwise() {
                        let (lhs, rhs) = ((w_g, (1, k)), (g_ng, (p, 1)));
                        bf16::gemm_uninit_packed(
                            g.products,
                            packed,
                            (k, p, cout_g),
                            dx_ng,
                            lhs,
                            rhs,
                            parallel,
                        );
                    } else {
                        col.resize(k * p, T::ZERO);
                        let (lhs, rhs) = ((w_g, (1, k)), (g_ng, (p, 1)));
                        bf16::gemm_strided_packed(
                            g.products,
                            packed,
                            (k, p, cout_g),
                            (col, (p, 1)),
                            false,
                            (lhs, rhs),
                            parallel,
                        );
                        // Zeroed here, while this image's slots are in cache.
                        let dx_ng = cpu::fill_slots(dx_ng, T::ZERO);
                        col2im(g, col, dx_ng, parallel);
                    }
                }
            },
        ))
    })
}

/// Each group's weights (`cout_g × k`, or transposed for the input gradient), packed once
/// for the products of every image where bf16 products run ([`bf16::pack_left_once`]).
fn packed_weights<T: Float>(g: &Geom, ws: &[T], transposed: bool) -> Vec<Option<bf16::PackedLeft>> {
    let (k, cout_g) = (g.k(), g.cout_g());
    (0..g.groups)
        .map(|grp| {
            let w_g = &ws[grp * cout_g * k..][..cout_g * k];
            match transposed {
                false => bf16::pack_left_once(g.products, (cout_g, k), (w_g, (k, 1))),
                true => bf16::pack_left_once(g.products, (k, cout_g), (w_g, (1, k))),
            }
        })
        .collect()
}

/// The input gradient of a 3x3 stride-1 convolution that Winograd runs (`s`, its forward
/// shape): the output gradient convolved with the flipped, transposed weights, padded by
/// 2 - padding.
fn winograd_backward_data<T: Float>(
    g: &Geom,
    s: &winograd::Shape,
    grad_out: &Tensor,
    w: &Tensor,
) -> Result<Tensor> {
    let s = winograd::Shape {
        n: g.n,
        c_in: g.c_out,
        h: g.oh,
        w: g.ow,
        c_out: g.c_in,
        pad: [2 - s.pad[0], 2 - s.pad[1]],
        products: g.products,
    };
    cpu::from_slices::<T>(OP, grad_out, w, (g.n, g.c_in, g.h, g.w), |gs, ws| {
        let u = winograd::transform_weights(ws, g.c_out, g.c_in, true);
        let len = g.n * g.c_in * g.h * g.w;
        let mut dx: Vec<T> = Vec::with_capacity(len);
        winograd::convolve(&s, gs, &u, &mut dx.spare_capacity_mut()[..len]);
        // SAFETY: `convolve` writes every slot of the n x c_in x h x w gradient.
        unsafe { dx.set_len(len) };
        Ok(dx)
    })
}

pub(super) fn backward_filter<T: Float>(g: &Geom, grad_out: &Tensor, x: &Tensor) -> Result<Tensor> {
    if depthwise::applies(g) {
        return cpu::from_slices::<T>(OP, grad_out, x, (g.c_out, 1, g.kh, g.kw), |gs, xs| {
            Ok(depthwise::backward_filter(g, gs, xs))
        });
    }
    if amx_direct::fits::<T>(g) {
        let dw = cpu::with_slices::<T, _>(OP, grad_out, x, |gs, xs| {
            Ok(amx_filter::weight_gradient(g, gs, xs).expect("amx_filter: fits"))
        })?;
        return cpu::tensor(OP, dw, (g.c_out, g.c_in, g.kh, g.kw));
    }
    if let Some(s) = winograd_shape(g).filter(winograd_filter::pays) {
        return cpu::from_slices::<T>(OP, grad_out, x, (g.c_out, g.c_in, 3, 3), |gs, xs| {
            Ok(winograd_filter::weight_gradient(&s, xs, gs))
        });
    }
    if spread(g) == Spread::WholeBatch {
        return whole_batch::backward_filter::<T>(g, grad_out, x);
    }
    let (k, p, cout_g) = (g.k(), g.pixels(), g.cout_g());
    let in_group = g.cin_g() * g.h * g.w;
    // dw_g (cout_g × k) += g_ng (cout_g × p) · colᵀ (p × k), stored column-major (as
    // dw_gᵀ) when it is wider than tall: the gemm crate runs such products about twice as
    // fast that way. (The whole-batch path's pixel-major im2col, which makes both operands
    // untransposed, costs more per image than it saves: 8% slower at 64 channels, 32x32.)
    let column_major = k > cout_g;
    let dw_strides = if column_major { (1, cout_g) } else { (k, 1) };
    let dw = cpu::with_slices::<T, _>(OP, grad_out, x, |gs, xs| {
        Ok(sum_over_images(g, g.c_out * k, |images, parallel| {
            let mut dw = vec![T::ZERO; g.c_out * k];
            let mut col = Vec::new();
            for n in images {
                for grp in 0..g.groups {
                    let x_ng = group_of(xs, n, grp, g, in_group);
                    let rhs: &[T] = if g.is_pointwise() {
                        x_ng
                    } else {
                        im2col(g, x_ng, &mut col, parallel);
                        &col
                    };
                    let g_ng = group_of(gs, n, grp, g, cout_g * p);
                    let dst = &mut dw[grp * cout_g * k..][..cout_g * k];
                    let (lhs, rhs) = ((g_ng, (p, 1)), (rhs, (1, p)));
                    bf16::gemm_strided_with(
                        g.products,
                        (cout_g, k, p),
                        (dst, dw_strides),
                        true,
                        (lhs, rhs),
                        parallel,
                    );
                }
            }
            dw
        }))
    })?;
    filter_tensor(g, dw, column_major)
}

/// The weight gradient tensor from `dw`, whose group blocks hold dw_gᵀ (k × cout_g) when
/// `column_major`, else dw_g (cout_g × k).
fn filter_tensor<T: Float>(g: &Geom, dw: Vec<T>, column_major: bool) -> Result<Tensor> {
    let (k, cout_g) = (g.k(), g.cout_g());
    if !column_major {
        return cpu::tensor(OP, dw, (g.c_out, g.cin_g(), g.kh, g.kw));
    }
    let mut out = vec![T::ZERO; dw.len()];
    for (src, dst) in dw.chunks(cout_g * k).zip(out.chunks_mut(cout_g * k)) {
        transpose(src, k, cout_g, dst);
    }
    cpu::tensor(OP, out, (g.c_out, g.cin_g(), g.kh, g.kw))
}
