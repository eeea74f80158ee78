//! 2-D convolution (NCHW, OIHW weights): forward, input gradient, weight gradient, bias gradient.
//!
//! On the CPU, every pass is im2col + GEMM through the `gemm` crate: the images of a batch
//! are split across threads, each thread running single-threaded GEMMs into its own
//! reused im2col buffer (a batch of one lets the GEMM use every thread instead). A 1x1,
//! stride-1, unpadded convolution needs no im2col at all. The input gradient is GEMM then
//! col2im (not a transposed convolution), and the weight gradient is one GEMM per image
//! over its im2col buffer, summed from per-thread partial gradients.
//!
//! On other devices the same maths runs through candle's `conv2d` and `conv_transpose2d`,
//! with the output padding computed so that non-square strided inputs come out right.

use candle_core::{Device, Tensor};
use rayon::prelude::*;
use std::mem::MaybeUninit;

use crate::cpu::{self, dispatch_float, Float};
use crate::error::{CandleContext, OpError, Result};
use crate::kernel::KernelPath;
use crate::shape::{nchw, window_out};

const OP: &str = "conv2d";

/// The settings of a 2-D convolution, as in PyTorch's `nn.Conv2d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Conv2dParams {
    /// Stride along (H, W).
    pub stride: [usize; 2],
    /// Zero padding along (H, W), on both sides.
    pub padding: [usize; 2],
    /// Dilation along (H, W).
    pub dilation: [usize; 2],
    /// Number of groups; input and output channels must both divide by it.
    pub groups: usize,
}

impl Default for Conv2dParams {
    fn default() -> Self {
        Conv2dParams {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

/// The sizes of one convolution, derived once from the input and weight shapes.
#[derive(Debug, Clone, Copy)]
struct Geom {
    n: usize,
    c_in: usize,
    h: usize,
    w: usize,
    c_out: usize,
    kh: usize,
    kw: usize,
    oh: usize,
    ow: usize,
    groups: usize,
    p: Conv2dParams,
}

impl Geom {
    fn cin_g(&self) -> usize {
        self.c_in / self.groups
    }
    fn cout_g(&self) -> usize {
        self.c_out / self.groups
    }
    /// Rows of the im2col matrix of one group: cin_g * kh * kw.
    fn k(&self) -> usize {
        self.cin_g() * self.kh * self.kw
    }
    /// Output pixels per image.
    fn pixels(&self) -> usize {
        self.oh * self.ow
    }
    /// A 1x1, stride-1, unpadded convolution: its im2col matrix is the input itself.
    fn is_pointwise(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.p.stride == [1, 1] && self.p.padding == [0, 0]
    }
}

impl Conv2dParams {
    /// Settings with the given stride and padding (same along H and W), no dilation, one group.
    pub fn new(stride: usize, padding: usize) -> Self {
        Conv2dParams {
            stride: [stride, stride],
            padding: [padding, padding],
            ..Default::default()
        }
    }

    /// The same settings with dilation `d` along H and W.
    pub fn with_dilation(mut self, d: usize) -> Self {
        self.dilation = [d, d];
        self
    }

    /// The same settings with `groups` groups.
    pub fn with_groups(mut self, groups: usize) -> Self {
        self.groups = groups;
        self
    }

    fn geom(&self, input: &[usize], weight: &[usize]) -> Result<Geom> {
        let [n, c_in, h, w] = nchw(OP, "input", input)?;
        let [c_out, cin_g, kh, kw] = nchw(OP, "weight", weight)?;
        if self.groups == 0 {
            return Err(OpError::invalid(OP, "groups must be at least 1, got 0"));
        }
        if c_in % self.groups != 0 || c_out % self.groups != 0 {
            return Err(OpError::invalid(
                OP,
                format!(
                    "input channels ({c_in}, input {input:?}) and output channels ({c_out}, weight {weight:?}) must both divide by groups ({})",
                    self.groups
                ),
            ));
        }
        if cin_g * self.groups != c_in {
            return Err(OpError::invalid(
                OP,
                format!(
                    "channel mismatch: input {input:?} has {c_in} channels but weight {weight:?} expects {} ({cin_g} per group x {} groups)",
                    cin_g * self.groups,
                    self.groups
                ),
            ));
        }
        let oh = window_out(
            OP,
            "H",
            h,
            kh,
            self.stride[0],
            self.padding[0],
            self.dilation[0],
        )?;
        let ow = window_out(
            OP,
            "W",
            w,
            kw,
            self.stride[1],
            self.padding[1],
            self.dilation[1],
        )?;
        Ok(Geom {
            n,
            c_in,
            h,
            w,
            c_out,
            kh,
            kw,
            oh,
            ow,
            groups: self.groups,
            p: *self,
        })
    }

    /// The output shape for an input of shape `input` (N, C, H, W) and a weight of shape
    /// `weight` (C_out, C/groups, KH, KW), or an error naming the shapes.
    pub fn output_shape(&self, input: &[usize], weight: &[usize]) -> Result<[usize; 4]> {
        let g = self.geom(input, weight)?;
        Ok([g.n, g.c_out, g.oh, g.ow])
    }

    /// Checks a bias shape against a weight shape.
    pub fn check_bias(&self, weight: &[usize], bias: &[usize]) -> Result<()> {
        if bias.len() != 1 || weight.first() != bias.first() {
            return Err(OpError::invalid(
                OP,
                format!(
                    "bias must have shape [{}] for weight {weight:?}, got {bias:?}",
                    weight.first().copied().unwrap_or(0)
                ),
            ));
        }
        Ok(())
    }

    /// Multiply-adds times two of the forward pass (the input and weight gradients cost the same).
    pub fn flops(&self, input: &[usize], weight: &[usize]) -> u64 {
        match self.geom(input, weight) {
            Ok(g) => 2 * (g.n * g.c_out * g.pixels() * g.k()) as u64,
            Err(_) => 0,
        }
    }
}

/// Convolution forward: `out = conv(x, weight) + bias`.
pub fn conv2d(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    p: &Conv2dParams,
) -> Result<Tensor> {
    conv2d_with_path(x, weight, bias, p, KernelPath::Auto)
}

/// [`conv2d`] on a chosen implementation path.
pub fn conv2d_with_path(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    p: &Conv2dParams,
    path: KernelPath,
) -> Result<Tensor> {
    let g = p.geom(x.dims(), weight.dims())?;
    if let Some(b) = bias {
        p.check_bias(weight.dims(), b.dims())?;
    }
    cpu::same_dtype(OP, x.dtype(), &[("weight", weight)])?;
    let out = if x.device().is_cpu() && path == KernelPath::Auto {
        dispatch_float!(OP, x.dtype(), forward_cpu(&g, x, weight))?
    } else {
        generic_forward(&g, x, weight)?
    };
    match bias {
        Some(b) => out
            .broadcast_add(&b.reshape((1, g.c_out, 1, 1)).ctx(OP)?)
            .ctx(OP),
        None => Ok(out),
    }
}

/// Convolution input gradient (`ConvBackwardData`): the gradient with respect to an input
/// of shape `input_shape`, given the output gradient and the weight.
pub fn conv2d_backward_data(
    grad_out: &Tensor,
    weight: &Tensor,
    input_shape: &[usize],
    p: &Conv2dParams,
) -> Result<Tensor> {
    conv2d_backward_data_with_path(grad_out, weight, input_shape, p, KernelPath::Auto)
}

/// [`conv2d_backward_data`] on a chosen implementation path.
pub fn conv2d_backward_data_with_path(
    grad_out: &Tensor,
    weight: &Tensor,
    input_shape: &[usize],
    p: &Conv2dParams,
    path: KernelPath,
) -> Result<Tensor> {
    let g = p.geom(input_shape, weight.dims())?;
    check_grad_out(&g, grad_out)?;
    cpu::same_dtype(OP, grad_out.dtype(), &[("weight", weight)])?;
    if grad_out.device().is_cpu() && path == KernelPath::Auto {
        dispatch_float!(
            OP,
            grad_out.dtype(),
            backward_data_cpu(&g, grad_out, weight)
        )
    } else {
        generic_backward_data(&g, grad_out, weight)
    }
}

/// Convolution weight gradient (`ConvBackwardFilter`) for a weight of shape `weight_shape`.
pub fn conv2d_backward_filter(
    grad_out: &Tensor,
    x: &Tensor,
    weight_shape: &[usize],
    p: &Conv2dParams,
) -> Result<Tensor> {
    conv2d_backward_filter_with_path(grad_out, x, weight_shape, p, KernelPath::Auto)
}

/// [`conv2d_backward_filter`] on a chosen implementation path.
pub fn conv2d_backward_filter_with_path(
    grad_out: &Tensor,
    x: &Tensor,
    weight_shape: &[usize],
    p: &Conv2dParams,
    path: KernelPath,
) -> Result<Tensor> {
    let g = p.geom(x.dims(), weight_shape)?;
    check_grad_out(&g, grad_out)?;
    cpu::same_dtype(OP, grad_out.dtype(), &[("input", x)])?;
    if x.device().is_cpu() && path == KernelPath::Auto {
        dispatch_float!(OP, x.dtype(), backward_filter_cpu(&g, grad_out, x))
    } else {
        generic_backward_filter(&g, grad_out, x)
    }
}

/// Convolution bias gradient: the output gradient summed over batch, height and width.
pub fn conv2d_backward_bias(grad_out: &Tensor) -> Result<Tensor> {
    nchw(OP, "output gradient", grad_out.dims())?;
    grad_out.sum((0, 2, 3)).ctx(OP)
}

fn check_grad_out(g: &Geom, grad_out: &Tensor) -> Result<()> {
    let expected = [g.n, g.c_out, g.oh, g.ow];
    if grad_out.dims() != expected {
        return Err(OpError::invalid(
            OP,
            format!(
                "output gradient has shape {:?}, expected {expected:?}",
                grad_out.dims()
            ),
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// CPU: im2col + GEMM.

/// Sets `col` to the im2col matrix ([cin_g*kh*kw, oh*ow]) of one image's group `x`
/// ([cin_g, h, w]), reusing its allocation; every element is written once, none zeroed
/// first. `parallel` splits it across threads, one task per input channel (for a batch of
/// one, where the images are not split across threads).
fn im2col<T: Float>(g: &Geom, x: &[T], col: &mut Vec<T>, parallel: bool) {
    let (hw, rows, len) = (g.h * g.w, g.kh * g.kw * g.pixels(), g.k() * g.pixels());
    col.clear();
    col.reserve(len);
    let slots = &mut col.spare_capacity_mut()[..len];
    let fill =
        |(dst, plane): (&mut [MaybeUninit<T>], &[T])| im2col_plane(g, plane, dst, g.pixels(), 0);
    if parallel {
        slots
            .par_chunks_mut(rows)
            .zip(x.par_chunks(hw))
            .for_each(fill);
    } else {
        slots.chunks_mut(rows).zip(x.chunks(hw)).for_each(fill);
    }
    // SAFETY: `x` has cin_g planes, so each of the cin_g row blocks of `len` was written
    // whole by im2col_plane.
    unsafe { col.set_len(len) };
}

/// Writes the kh*kw im2col rows of one input plane ([h, w]) into the columns
/// `offset..offset + oh*ow` of `rows`, a matrix whose rows are `row_stride` long. Every
/// slot of those columns is written (padding as zeros).
fn im2col_plane<T: Float>(
    g: &Geom,
    plane: &[T],
    rows: &mut [MaybeUninit<T>],
    row_stride: usize,
    offset: usize,
) {
    let p = g.pixels();
    let [sh, sw] = g.p.stride;
    let [ph, pw] = g.p.padding;
    let [dh, dw] = g.p.dilation;
    let zero = |s: &mut [MaybeUninit<T>]| s.iter_mut().for_each(|o| _ = o.write(T::ZERO));
    for ki in 0..g.kh {
        for kj in 0..g.kw {
            let dst = &mut rows[(ki * g.kw + kj) * row_stride + offset..][..p];
            let (lo, hi) = valid_range(g.ow, sw, kj * dw, pw, g.w);
            for oy in 0..g.oh {
                let out_row = &mut dst[oy * g.ow..(oy + 1) * g.ow];
                let iy = (oy * sh + ki * dh) as isize - ph as isize;
                if iy < 0 || iy >= g.h as isize || lo >= hi {
                    zero(out_row);
                    continue;
                }
                let src = &plane[iy as usize * g.w..(iy as usize + 1) * g.w];
                zero(&mut out_row[..lo]);
                zero(&mut out_row[hi..]);
                let ix0 = lo * sw + kj * dw - pw;
                // valid_range keeps the last window column inside the row; checked anyway,
                // since every slot of out_row[lo..hi] must be written.
                assert!(
                    ix0 + (hi - lo - 1) * sw < src.len(),
                    "im2col window past its row"
                );
                if sw == 1 {
                    for (o, v) in out_row[lo..hi].iter_mut().zip(&src[ix0..ix0 + (hi - lo)]) {
                        o.write(*v);
                    }
                } else {
                    for (o, v) in out_row[lo..hi]
                        .iter_mut()
                        .zip(src[ix0..].iter().step_by(sw))
                    {
                        o.write(*v);
                    }
                }
            }
        }
    }
}

/// Adds the columns of `col` back into one image's group `dx` ([cin_g, h, w]); `parallel`
/// splits it across threads, one task per input plane (planes are disjoint in dx).
fn col2im<T: Float>(g: &Geom, col: &[T], dx: &mut [T], parallel: bool) {
    let (hw, rows) = (g.h * g.w, g.kh * g.kw * g.pixels());
    let add = |(plane, src): (&mut [T], &[T])| col2im_plane(g, src, plane, g.pixels(), 0);
    if parallel {
        dx.par_chunks_mut(hw)
            .zip(col.par_chunks(rows))
            .for_each(add);
    } else {
        dx.chunks_mut(hw).zip(col.chunks(rows)).for_each(add);
    }
}

/// Adds the kh*kw im2col rows of one plane, columns `offset..offset + oh*ow` of `rows` (a
/// matrix whose rows are `row_stride` long), back into that plane `dx` ([h, w]).
fn col2im_plane<T: Float>(g: &Geom, rows: &[T], dx: &mut [T], row_stride: usize, offset: usize) {
    let p = g.pixels();
    let [sh, sw] = g.p.stride;
    let [ph, pw] = g.p.padding;
    let [dh, dw] = g.p.dilation;
    for ki in 0..g.kh {
        for kj in 0..g.kw {
            let src = &rows[(ki * g.kw + kj) * row_stride + offset..][..p];
            let (lo, hi) = valid_range(g.ow, sw, kj * dw, pw, g.w);
            if lo >= hi {
                continue;
            }
            for oy in 0..g.oh {
                let iy = (oy * sh + ki * dh) as isize - ph as isize;
                if iy < 0 || iy >= g.h as isize {
                    continue;
                }
                let dst = &mut dx[iy as usize * g.w..(iy as usize + 1) * g.w];
                let ix0 = lo * sw + kj * dw - pw;
                let s = &src[oy * g.ow + lo..oy * g.ow + hi];
                if sw == 1 {
                    for (d, v) in dst[ix0..ix0 + (hi - lo)].iter_mut().zip(s) {
                        *d += *v;
                    }
                } else {
                    for (d, v) in dst[ix0..].iter_mut().step_by(sw).zip(s) {
                        *d += *v;
                    }
                }
            }
        }
    }
}

/// Adds one image's window values back into its group `dx` ([cin_g, h, w]), from a
/// pixel-major matrix `cols` ([oh*ow, cin_g*kh*kw]: each output pixel's window contiguous).
fn col2im_pixels<T: Float>(g: &Geom, cols: &[T], dx: &mut [T]) {
    let (k, hw) = (g.k(), g.h * g.w);
    let [sh, sw] = g.p.stride;
    let [ph, pw] = g.p.padding;
    let [dh, dw] = g.p.dilation;
    for (pix, window) in cols.chunks(k).enumerate() {
        let (oy, ox) = (pix / g.ow, pix % g.ow);
        for ki in 0..g.kh {
            let iy = (oy * sh + ki * dh) as isize - ph as isize;
            if iy < 0 || iy >= g.h as isize {
                continue;
            }
            for kj in 0..g.kw {
                let ix = (ox * sw + kj * dw) as isize - pw as isize;
                if ix < 0 || ix >= g.w as isize {
                    continue;
                }
                let at = iy as usize * g.w + ix as usize;
                let first = ki * g.kw + kj;
                for (c, v) in window[first..].iter().step_by(g.kh * g.kw).enumerate() {
                    dx[c * hw + at] += *v;
                }
            }
        }
    }
}

/// The output columns `[lo, hi)` whose input column `ox*stride + offset - pad` lies in `[0, w)`.
fn valid_range(ow: usize, stride: usize, offset: usize, pad: usize, w: usize) -> (usize, usize) {
    // ox*stride + offset >= pad  <=>  ox >= ceil((pad - offset) / stride)
    let lo = if offset >= pad {
        0
    } else {
        (pad - offset).div_ceil(stride)
    };
    // ox*stride + offset - pad < w  <=>  ox*stride < w + pad - offset
    let hi = if w + pad <= offset {
        0
    } else {
        (w + pad - offset).div_ceil(stride)
    };
    (lo.min(ow), hi.min(ow))
}

/// Splits `n` images into at most `threads` contiguous chunks of near-equal size.
fn image_chunks(n: usize) -> usize {
    n.div_ceil(cpu::threads()).max(1)
}

/// Below this many output pixels per image, a convolution runs as one GEMM over the whole
/// batch (packing the weights once) instead of one GEMM per image.
const BATCHED_BELOW_PIXELS: usize = 256;

fn batched(g: &Geom) -> bool {
    g.n > 1 && g.pixels() < BATCHED_BELOW_PIXELS
}

fn forward_cpu<T: Float>(g: &Geom, x: &Tensor, w: &Tensor) -> Result<Tensor> {
    if batched(g) {
        return forward_batched::<T>(g, x, w);
    }
    let (k, p, cin_g, cout_g) = (g.k(), g.pixels(), g.cin_g(), g.cout_g());
    let in_img = g.c_in * g.h * g.w;
    let out_img = g.c_out * p;
    let len = g.n * out_img;
    // Written once by the GEMMs (every group of every image), not zeroed first.
    let mut out: Vec<T> = Vec::with_capacity(len);
    cpu::with_slice::<T, _>(OP, x, |xs| {
        cpu::with_slice::<T, _>(OP, w, |ws| {
            let per_image =
                |col: &mut Vec<T>, n: usize, out_n: &mut [MaybeUninit<T>], parallel: bool| {
                    for grp in 0..g.groups {
                        let x_ng = &xs[n * in_img + grp * cin_g * g.h * g.w..][..cin_g * g.h * g.w];
                        let rhs: &[T] = if g.is_pointwise() {
                            x_ng
                        } else {
                            im2col(g, x_ng, col, parallel);
                            col
                        };
                        let w_g = &ws[grp * cout_g * k..][..cout_g * k];
                        let dst = &mut out_n[grp * cout_g * p..][..cout_g * p];
                        cpu::gemm_uninit(cout_g, p, k, dst, (w_g, (k, 1)), (rhs, (p, 1)), parallel);
                    }
                };
            let slots = &mut out.spare_capacity_mut()[..len];
            if g.n >= 2 && cpu::threads() > 1 {
                slots
                    .par_chunks_mut(out_img)
                    .enumerate()
                    .with_min_len(image_chunks(g.n))
                    .for_each_init(Vec::new, |col, (n, out_n)| per_image(col, n, out_n, false));
            } else {
                let mut col = Vec::new();
                for (n, out_n) in slots.chunks_mut(out_img).enumerate() {
                    per_image(&mut col, n, out_n, true);
                }
            }
            Ok(())
        })
    })?;
    // SAFETY: the `len` slots are n images of `groups` blocks of cout_g * p slots each, and
    // every block was written whole by `gemm_uninit` above.
    unsafe { out.set_len(len) };
    cpu::tensor(OP, out, (g.n, g.c_out, g.oh, g.ow))
}

fn backward_data_cpu<T: Float>(g: &Geom, grad_out: &Tensor, w: &Tensor) -> Result<Tensor> {
    if batched(g) {
        return backward_data_batched::<T>(g, grad_out, w);
    }
    let (k, p, cin_g, cout_g) = (g.k(), g.pixels(), g.cin_g(), g.cout_g());
    let in_img = g.c_in * g.h * g.w;
    let out_img = g.c_out * p;
    let len = g.n * in_img;
    // Each image's slots are written by its own task (zeroed there, while in cache, then
    // accumulated into by col2im; or written whole by the GEMM for a pointwise conv).
    let mut dx: Vec<T> = Vec::with_capacity(len);
    cpu::with_slice::<T, _>(OP, grad_out, |gs| {
        cpu::with_slice::<T, _>(OP, w, |ws| {
            let per_image =
                |col: &mut Vec<T>, n: usize, dx_n: &mut [MaybeUninit<T>], parallel: bool| {
                    for grp in 0..g.groups {
                        let g_ng = &gs[n * out_img + grp * cout_g * p..][..cout_g * p];
                        let w_g = &ws[grp * cout_g * k..][..cout_g * k];
                        let dx_ng = &mut dx_n[grp * cin_g * g.h * g.w..][..cin_g * g.h * g.w];
                        // col (k × p) = w_gᵀ (k × cout_g) · g_ng (cout_g × p)
                        if g.is_pointwise() {
                            let (lhs, rhs) = ((w_g, (1, k)), (g_ng, (p, 1)));
                            cpu::gemm_uninit(k, p, cout_g, dx_ng, lhs, rhs, parallel);
                        } else {
                            col.resize(k * p, T::ZERO);
                            cpu::gemm(
                                k,
                                p,
                                cout_g,
                                col,
                                false,
                                w_g,
                                (1, k),
                                g_ng,
                                (p, 1),
                                parallel,
                            );
                            let dx_ng = cpu::fill_slots(dx_ng, T::ZERO);
                            col2im(g, col, dx_ng, parallel);
                        }
                    }
                };
            let slots = &mut dx.spare_capacity_mut()[..len];
            if g.n >= 2 && cpu::threads() > 1 {
                slots
                    .par_chunks_mut(in_img)
                    .enumerate()
                    .with_min_len(image_chunks(g.n))
                    .for_each_init(Vec::new, |col, (n, dx_n)| per_image(col, n, dx_n, false));
            } else {
                let mut col = Vec::new();
                for (n, dx_n) in slots.chunks_mut(in_img).enumerate() {
                    per_image(&mut col, n, dx_n, true);
                }
            }
            Ok(())
        })
    })?;
    // SAFETY: every image's groups were each written whole above (by gemm_uninit, or
    // filled with zeros before col2im).
    unsafe { dx.set_len(len) };
    cpu::tensor(OP, dx, (g.n, g.c_in, g.h, g.w))
}

fn backward_filter_cpu<T: Float>(g: &Geom, grad_out: &Tensor, x: &Tensor) -> Result<Tensor> {
    if batched(g) {
        return backward_filter_batched::<T>(g, grad_out, x);
    }
    let (k, p, cin_g, cout_g) = (g.k(), g.pixels(), g.cin_g(), g.cout_g());
    let in_img = g.c_in * g.h * g.w;
    let out_img = g.c_out * p;
    let column_major = k > cout_g;
    let dw_strides = if column_major { (1, cout_g) } else { (k, 1) };
    let dw = cpu::with_slice::<T, _>(OP, grad_out, |gs| {
        cpu::with_slice::<T, _>(OP, x, |xs| {
            // Accumulates the weight gradient of images `range` into `dw`.
            let accumulate = |range: std::ops::Range<usize>, parallel: bool| {
                let mut dw = vec![T::ZERO; g.c_out * k];
                let mut col = Vec::new();
                for n in range {
                    for grp in 0..g.groups {
                        let x_ng = &xs[n * in_img + grp * cin_g * g.h * g.w..][..cin_g * g.h * g.w];
                        let rhs: &[T] = if g.is_pointwise() {
                            x_ng
                        } else {
                            im2col(g, x_ng, &mut col, parallel);
                            &col
                        };
                        let g_ng = &gs[n * out_img + grp * cout_g * p..][..cout_g * p];
                        let dst = &mut dw[grp * cout_g * k..][..cout_g * k];
                        // dw_g (cout_g × k) += g_ng (cout_g × p) · colᵀ (p × k), stored
                        // column-major (as dw_gᵀ) when it is wider than tall: the gemm
                        // crate runs such products about twice as fast that way.
                        cpu::gemm_strided(
                            cout_g,
                            k,
                            p,
                            (dst, dw_strides),
                            true,
                            (g_ng, (p, 1)),
                            (rhs, (1, p)),
                            parallel,
                        );
                    }
                }
                dw
            };
            let threads = cpu::threads().min(g.n);
            if threads >= 2 {
                let chunk = g.n.div_ceil(threads);
                let partials: Vec<Vec<T>> = (0..threads)
                    .into_par_iter()
                    .map(|t| accumulate(t * chunk..((t + 1) * chunk).min(g.n), false))
                    .collect();
                let mut iter = partials.into_iter();
                let mut total = iter.next().unwrap_or_else(|| vec![T::ZERO; g.c_out * k]);
                for part in iter {
                    for (a, b) in total.iter_mut().zip(part) {
                        *a += b;
                    }
                }
                Ok(total)
            } else {
                Ok(accumulate(0..g.n, true))
            }
        })
    })?;
    if !column_major {
        return cpu::tensor(OP, dw, (g.c_out, cin_g, g.kh, g.kw));
    }
    // Each group's block holds dw_gᵀ (k × cout_g): transpose it to (cout_g × k).
    let mut out = vec![T::ZERO; dw.len()];
    for (src, dst) in dw.chunks(cout_g * k).zip(out.chunks_mut(cout_g * k)) {
        transpose(src, k, cout_g, dst);
    }
    cpu::tensor(OP, out, (g.c_out, cin_g, g.kh, g.kw))
}

/// Writes the transpose of `src` (rows × cols, row-major) into `dst` (cols × rows), in tiles.
fn transpose<T: Float>(src: &[T], rows: usize, cols: usize, dst: &mut [T]) {
    const TILE: usize = 32;
    for r0 in (0..rows).step_by(TILE) {
        for c0 in (0..cols).step_by(TILE) {
            for r in r0..(r0 + TILE).min(rows) {
                for c in c0..(c0 + TILE).min(cols) {
                    dst[c * rows + r] = src[r * cols + c];
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// CPU, small images: one GEMM over the whole batch (columns n*P + p), all threads in the GEMM.

/// The im2col matrix of group `grp` for every image: [k, n * pixels], filled in parallel
/// (one task per input channel, each writing its own kh*kw rows once).
fn batch_columns<T: Float>(g: &Geom, xs: &[T], grp: usize) -> Vec<T> {
    let (k, p, hw) = (g.k(), g.pixels(), g.h * g.w);
    let np = g.n * p;
    let mut col: Vec<T> = Vec::with_capacity(k * np);
    col.spare_capacity_mut()[..k * np]
        .par_chunks_mut(g.kh * g.kw * np)
        .enumerate()
        .for_each(|(c, rows)| {
            let ch = grp * g.cin_g() + c;
            for n in 0..g.n {
                let plane = &xs[(n * g.c_in + ch) * hw..][..hw];
                im2col_plane(g, plane, rows, np, n * p);
            }
        });
    // SAFETY: cin_g row blocks, each of whose n column ranges im2col_plane wrote whole.
    unsafe { col.set_len(k * np) };
    col
}

/// Output-shaped data [n, c_out, pixels] of group `grp` as a matrix [cout_g, n * pixels].
fn gather_outputs<T: Float>(g: &Geom, ys: &[T], grp: usize) -> Vec<T> {
    let (p, cout_g) = (g.pixels(), g.cout_g());
    let len = cout_g * g.n * p;
    let mut m: Vec<T> = Vec::with_capacity(len);
    m.spare_capacity_mut()[..len]
        .par_chunks_mut(g.n * p)
        .enumerate()
        .for_each(|(c, row)| {
            for (n, dst) in row.chunks_mut(p).enumerate() {
                let src = &ys[(n * g.c_out + grp * cout_g + c) * p..][..p];
                for (d, v) in dst.iter_mut().zip(src) {
                    d.write(*v);
                }
            }
        });
    // SAFETY: each of the cout_g rows is n chunks of p slots, each written from p values.
    unsafe { m.set_len(len) };
    m
}

/// The inverse of [`gather_outputs`]: writes a [cout_g, n * pixels] matrix of group `grp`
/// into the slots of output-shaped data [n, c_out, pixels] (each group's slots once).
fn scatter_outputs<T: Float>(g: &Geom, m: &[T], ys: &mut [MaybeUninit<T>], grp: usize) {
    let (p, cout_g) = (g.pixels(), g.cout_g());
    let np = g.n * p;
    ys.par_chunks_mut(p).enumerate().for_each(|(i, dst)| {
        let (n, c) = (i / g.c_out, i % g.c_out);
        if c / cout_g == grp {
            let src = &m[(c - grp * cout_g) * np + n * p..][..p];
            for (d, v) in dst.iter_mut().zip(src) {
                d.write(*v);
            }
        }
    });
}

fn forward_batched<T: Float>(g: &Geom, x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (k, p, cout_g) = (g.k(), g.pixels(), g.cout_g());
    let np = g.n * p;
    let len = g.n * g.c_out * p;
    // Written once (each group's planes by scatter_outputs), not zeroed first.
    let mut out: Vec<T> = Vec::with_capacity(len);
    cpu::with_slice::<T, _>(OP, x, |xs| {
        cpu::with_slice::<T, _>(OP, w, |ws| {
            for grp in 0..g.groups {
                let col = batch_columns(g, xs, grp);
                let w_g = &ws[grp * cout_g * k..][..cout_g * k];
                let mut tmp: Vec<T> = Vec::with_capacity(cout_g * np);
                cpu::gemm_uninit(
                    cout_g,
                    np,
                    k,
                    &mut tmp.spare_capacity_mut()[..cout_g * np],
                    (w_g, (k, 1)),
                    (&col, (np, 1)),
                    true,
                );
                // SAFETY: gemm_uninit wrote all cout_g * np slots.
                unsafe { tmp.set_len(cout_g * np) };
                scatter_outputs(g, &tmp, &mut out.spare_capacity_mut()[..len], grp);
            }
            Ok(())
        })
    })?;
    // SAFETY: every (image, channel) plane of p slots belongs to exactly one group, and
    // scatter_outputs wrote each group's planes whole (m holds cout_g * n * p values).
    unsafe { out.set_len(len) };
    cpu::tensor(OP, out, (g.n, g.c_out, g.oh, g.ow))
}

fn backward_data_batched<T: Float>(g: &Geom, grad_out: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (k, p, cin_g, cout_g) = (g.k(), g.pixels(), g.cin_g(), g.cout_g());
    let np = g.n * p;
    let in_img = g.c_in * g.h * g.w;
    let mut dx = vec![T::ZERO; g.n * in_img];
    cpu::with_slice::<T, _>(OP, grad_out, |gs| {
        cpu::with_slice::<T, _>(OP, w, |ws| {
            let mut col = vec![T::ZERO; k * np];
            for grp in 0..g.groups {
                let gy = gather_outputs(g, gs, grp);
                let w_g = &ws[grp * cout_g * k..][..cout_g * k];
                // col (k × np) = w_gᵀ (k × cout_g) · gy (cout_g × np). When col is taller
                // than w_g is wide it is stored column-major (each pixel's window values
                // contiguous): the gemm crate runs such products up to twice as fast.
                let column_major = k > cout_g;
                let col_strides = if column_major { (1, k) } else { (np, 1) };
                cpu::gemm_strided(
                    k,
                    np,
                    cout_g,
                    (&mut col, col_strides),
                    false,
                    (w_g, (1, k)),
                    (&gy, (np, 1)),
                    true,
                );
                if column_major {
                    // One task per image: images are disjoint in dx.
                    dx.par_chunks_mut(in_img).enumerate().for_each(|(n, dx_n)| {
                        let dx_ng = &mut dx_n[grp * cin_g * g.h * g.w..][..cin_g * g.h * g.w];
                        col2im_pixels(g, &col[n * p * k..][..p * k], dx_ng);
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
        })
    })?;
    cpu::tensor(OP, dx, (g.n, g.c_in, g.h, g.w))
}

fn backward_filter_batched<T: Float>(g: &Geom, grad_out: &Tensor, x: &Tensor) -> Result<Tensor> {
    let (k, p, cout_g) = (g.k(), g.pixels(), g.cout_g());
    let np = g.n * p;
    let mut dw = vec![T::ZERO; g.c_out * k];
    cpu::with_slice::<T, _>(OP, grad_out, |gs| {
        cpu::with_slice::<T, _>(OP, x, |xs| {
            for grp in 0..g.groups {
                let col = batch_columns(g, xs, grp);
                let gy = gather_outputs(g, gs, grp);
                let dst = &mut dw[grp * cout_g * k..][..cout_g * k];
                // dw_g (cout_g × k) = gy (cout_g × np) · colᵀ (np × k)
                cpu::gemm(cout_g, k, np, dst, false, &gy, (np, 1), &col, (1, np), true);
            }
            Ok(())
        })
    })?;
    cpu::tensor(OP, dw, (g.c_out, g.cin_g(), g.kh, g.kw))
}

// ---------------------------------------------------------------------------------------
// Device-generic: candle's conv2d and conv_transpose2d.

fn generic_forward(g: &Geom, x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (s, pad, d) = isotropic(g, x.device())?;
    x.conv2d(w, pad, s, d, g.groups).ctx(OP)
}

fn generic_backward_data(g: &Geom, grad_out: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (s, pad, d) = isotropic(g, grad_out.device())?;
    // The unpadded transposed convolution covers padded rows 0..full_h; input row i is
    // padded row i + pad. Rows past full_h were never read by a window (the stride skipped
    // them): their gradient is zero. candle's conv_transpose2d has one output padding for
    // both axes, which cannot express that for non-square inputs, so crop here instead.
    let full_h = (g.oh - 1) * s + d * (g.kh - 1) + 1;
    let full_w = (g.ow - 1) * s + d * (g.kw - 1) + 1;
    let per_group = |grad: &Tensor, w: &Tensor| -> Result<Tensor> {
        let dx = grad.conv_transpose2d(w, 0, 0, s, d).ctx(OP)?;
        let dx = dx
            .pad_with_zeros(2, 0, (pad + g.h).saturating_sub(full_h))
            .ctx(OP)?;
        let dx = dx
            .pad_with_zeros(3, 0, (pad + g.w).saturating_sub(full_w))
            .ctx(OP)?;
        dx.narrow(2, pad, g.h)
            .ctx(OP)?
            .narrow(3, pad, g.w)
            .ctx(OP)?
            .contiguous()
            .ctx(OP)
    };
    by_groups(g.groups, (grad_out, 1), (w, 0), 1, per_group)
}

fn generic_backward_filter(g: &Geom, grad_out: &Tensor, x: &Tensor) -> Result<Tensor> {
    let (s, pad, d) = isotropic(g, x.device())?;
    // dW[o, c, i, j] = sum_{n, y, x} grad[n, o, y, x] * xpad[n, c, y*s + i*d, x*s + j*d]:
    // a convolution of x (channels as batch) with grad (as kernel), stride d, dilation s.
    let per_group = |grad: &Tensor, x: &Tensor| -> Result<Tensor> {
        let xt = x.transpose(0, 1).ctx(OP)?.contiguous().ctx(OP)?;
        let gt = grad.transpose(0, 1).ctx(OP)?.contiguous().ctx(OP)?;
        let dw = xt.conv2d(&gt, pad, d, s, 1).ctx(OP)?; // [cin_g, cout_g, >=kh, >=kw]
        let dw = dw.narrow(2, 0, g.kh).ctx(OP)?.narrow(3, 0, g.kw).ctx(OP)?;
        dw.transpose(0, 1).ctx(OP)?.contiguous().ctx(OP)
    };
    by_groups(g.groups, (grad_out, 1), (x, 1), 0, per_group)
}

/// Runs `f` on each group's slices of `a` and `b` (each split along the given dimension)
/// and concatenates the results along `cat_dim`; one call when there is one group.
fn by_groups(
    groups: usize,
    (a, a_dim): (&Tensor, usize),
    (b, b_dim): (&Tensor, usize),
    cat_dim: usize,
    f: impl Fn(&Tensor, &Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    if groups == 1 {
        return f(a, b);
    }
    let a_parts = a.chunk(groups, a_dim).ctx(OP)?;
    let b_parts = b.chunk(groups, b_dim).ctx(OP)?;
    let parts = a_parts
        .iter()
        .zip(&b_parts)
        .map(|(x, y)| f(x, y))
        .collect::<Result<Vec<_>>>()?;
    Tensor::cat(&parts, cat_dim).ctx(OP)
}

/// (stride, padding, dilation) when each is the same along H and W (candle's conv takes
/// one value for both), else an error.
fn isotropic(g: &Geom, device: &Device) -> Result<(usize, usize, usize)> {
    let p = &g.p;
    if p.stride[0] != p.stride[1] || p.padding[0] != p.padding[1] || p.dilation[0] != p.dilation[1]
    {
        return Err(unsupported_anisotropic(device));
    }
    Ok((p.stride[0], p.padding[0], p.dilation[0]))
}

fn unsupported_anisotropic(device: &Device) -> OpError {
    OpError::Unsupported {
        op: OP,
        what: format!(
            "different stride, padding or dilation along H and W on {:?} (candle's conv takes one value for both)",
            device.location()
        ),
    }
}
