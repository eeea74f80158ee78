//! Stride-1 convolutions with bfloat16 products as direct AMX tile products, with no
//! im2col matrix: the forward pass, and the input gradient as the forward convolution of
//! the output gradient with the weights flipped and transposed.
//!
//! Each image is rounded once into *pair planes*: plane `q` holds input channels `2q`
//! and `2q + 1` as one `u32` per pixel (the bfloat16 pair a `tdpbf16ps` lane multiplies),
//! zero-padded to `hp × wp`. An output position `o = y * wp + x` (over the padded width;
//! columns `x >= ow` are computed and dropped) reads tap `(ty, tx)` at `o + ty * wp + tx`
//! of every plane, so the right tile of a tap (16 channel pairs × 16 positions) is one
//! strided tile load from the planes, shifted by the tap: the convolution is a sum over
//! taps of tile products, as oneDNN's AMX convolutions run. Weights are packed as rows
//! of output channels holding, tap after tap, their input-channel pairs. The weight
//! gradient is `amx_filter.rs`.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::params::Geom;
#[cfg(target_arch = "x86_64")]
use crate::bf16::amx;
use crate::bf16::{round_slice, round_to_bf16, Aligned, Bf16Path, Products};
use crate::cpu::{run_wide, threads, WideKernel};

/// Output channels and positions per block of four accumulator tiles.
pub(super) const BLOCK: usize = 32;
/// Channel pairs per tile row.
pub(super) const PAIRS: usize = 16;

/// Whether the direct AMX kernels run `g` (float32 data, `T`): bfloat16 products on the
/// AMX path, one group, stride and dilation 1, a kernel larger than 1x1 (a 1x1 is a plain
/// GEMM), padding below the kernel's size, channel counts in and out that are multiples
/// of 32 (whole tiles), at least half the padded plane's positions real outputs (CIFAR's
/// 4x4 layers, 16 of 36, run faster as one im2col GEMM over the batch: 4.1 against 8.4
/// ms forward at 512 channels, batch 32), and [`ConvAlgorithm::Auto`](super::algorithm::ConvAlgorithm) in
/// force. It takes the place of Winograd there: with AMX's products the transforms cost
/// more than the products they save.
pub(super) fn fits<T: 'static>(g: &Geom) -> bool {
    std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
        && g.products == Products::Bf16
        && g.groups == 1
        && g.p.stride == [1, 1]
        && g.p.dilation == [1, 1]
        && (g.kh, g.kw) != (1, 1)
        && g.p.padding[0] < g.kh
        && g.p.padding[1] < g.kw
        && g.c_in.is_multiple_of(BLOCK)
        && g.c_out.is_multiple_of(BLOCK)
        && 2 * g.pixels() >= (g.h + 2 * g.p.padding[0]) * (g.w + 2 * g.p.padding[1])
        && Bf16Path::current() == Bf16Path::Amx
        && super::algorithm::ConvAlgorithm::current() == super::algorithm::ConvAlgorithm::Auto
}

/// One direct convolution: `c_in` channels of `h × w` into `c_out` of `oh × ow`, over
/// stacks of `images` images (each padded to `hp × wp`, one under the other in the
/// planes): the weight gradient's stacks share each accumulator tile's loads and stores
/// (`amx_filter.rs`); the forward runs one image a stack.
#[derive(Debug, Clone, Copy)]
pub(super) struct Direct {
    pub(super) c_in: usize,
    pub(super) h: usize,
    pub(super) w: usize,
    pub(super) c_out: usize,
    pub(super) kh: usize,
    pub(super) kw: usize,
    pub(super) pad: [usize; 2],
    pub(super) oh: usize,
    pub(super) ow: usize,
    pub(super) hp: usize,
    pub(super) wp: usize,
    pub(super) images: usize,
    /// The length of a pair plane: the padded stack, plus the slack the last block's
    /// shifted tile loads read past it.
    pub(super) plane: usize,
}

impl Direct {
    pub(super) fn new(
        (c_in, h, w): (usize, usize, usize),
        (c_out, kh, kw): (usize, usize, usize),
        pad: [usize; 2],
        images: usize,
    ) -> Self {
        let (hp, wp) = (h + 2 * pad[0], w + 2 * pad[1]);
        let (oh, ow) = (hp + 1 - kh, wp + 1 - kw);
        let mut d = Direct {
            c_in,
            h,
            w,
            c_out,
            kh,
            kw,
            pad,
            oh,
            ow,
            hp,
            wp,
            images,
            plane: 0,
        };
        let reach = d.positions().div_ceil(BLOCK) * BLOCK + (kh - 1) * wp + (kw - 1);
        // Whole cache lines: every plane starts on one (its tile rows then straddle lines
        // only by the tap's shift).
        d.plane = reach.max(images * hp * wp).next_multiple_of(16);
        d
    }

    fn pairs(&self) -> usize {
        self.c_in / 2
    }

    /// Output positions of a stack, over the padded width (the last image's rows end it).
    pub(super) fn positions(&self) -> usize {
        ((self.images - 1) * self.hp + self.oh) * self.wp
    }

    /// This convolution over stacks of `images` images.
    pub(super) fn stacking(self, images: usize) -> Self {
        Direct::new(
            (self.c_in, self.h, self.w),
            (self.c_out, self.kh, self.kw),
            self.pad,
            images,
        )
    }
}

/// The bfloat16 pair of two float32 values: `even` in the low half.
#[inline(always)]
fn pair(even: f32, odd: f32) -> u32 {
    round_to_bf16(even) as u32 | ((round_to_bf16(odd) as u32) << 16)
}

/// The weights as the left tiles read them: output channel `o` holds, tap after tap,
/// its input-channel pairs (`[(o * taps + t) * pairs + q]`), so a tile of 16 channels'
/// 16 pairs at tap `t` is rows `taps * pairs` apart. `ws` is the forward convolution's
/// `c_out × c_in × kh × kw` weight; `transposed` packs the input gradient's kernel (its
/// output channels are the forward input channels, its taps reversed). The weights are
/// rounded in one vectorized pass first, then only their bits move.
fn pack_weights(d: &Direct, ws: &[f32], transposed: bool) -> Aligned<u32> {
    let (pairs, taps) = (d.pairs(), d.kh * d.kw);
    let mut bits = vec![0u16; ws.len()];
    round_slice(ws, &mut bits);
    // Where weight (o, i, t) of the packed kernel sits in `ws`.
    let at = |o: usize, i: usize, t: usize| match transposed {
        false => (o * d.c_in + i) * taps + t,
        true => (i * d.c_out + o) * taps + taps - 1 - t,
    };
    let mut out = Aligned::zeros(d.c_out * taps * pairs);
    out.par_chunks_mut(taps * pairs)
        .enumerate()
        .for_each(|(o, dst)| {
            for (t, row) in dst.chunks_exact_mut(pairs).enumerate() {
                for (q, slot) in row.iter_mut().enumerate() {
                    let (even, odd) = (bits[at(o, 2 * q, t)], bits[at(o, 2 * q + 1, t)]);
                    *slot = even as u32 | ((odd as u32) << 16);
                }
            }
        });
    out
}

/// A stack of images' pair planes, written over `planes` (padding and slack zero).
struct FillPlanes<'a> {
    d: Direct,
    /// The stack's images, one after another (`c_in × h × w` each).
    images: &'a [f32],
    planes: &'a mut [u32],
}

impl WideKernel for FillPlanes<'_> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let Direct {
            h,
            w,
            hp,
            wp,
            plane,
            pad,
            c_in,
            ..
        } = self.d;
        self.planes.fill(0);
        for (i, image) in self.images.chunks_exact(c_in * h * w).enumerate() {
            for (q, dst) in self.planes.chunks_exact_mut(plane).enumerate() {
                let (even, odd) = (&image[2 * q * h * w..], &image[(2 * q + 1) * h * w..]);
                for y in 0..h {
                    let row = &mut dst[(i * hp + y + pad[0]) * wp + pad[1]..][..w];
                    let (e, o) = (&even[y * w..][..w], &odd[y * w..][..w]);
                    for ((slot, e), o) in row.iter_mut().zip(e).zip(o) {
                        *slot = pair(*e, *o);
                    }
                }
            }
        }
    }
}

/// `out` (the stack's images, each with output channels `channels` of `oh × ow`, every
/// slot written) = the convolution of the stack's pair planes with the packed weights.
/// Each block of 32 output channels runs over every position of the stack while its
/// weights stay in L2.
///
/// # Safety
/// The CPU must have AMX (the AMX path is in force: [`fits`]); `weights` and `planes` are
/// laid out for `d`, `channels` are whole blocks of `d`'s output channels.
#[cfg(target_arch = "x86_64")]
unsafe fn convolve_stack(
    d: &Direct,
    (weights, planes): (&[u32], &[u32]),
    channels: std::ops::Range<usize>,
    out: &mut [MaybeUninit<f32>],
) {
    let pairs = d.pairs();
    assert!(weights.len() >= d.kh * d.kw * d.c_out * pairs && planes.len() >= pairs * d.plane);
    assert!(channels.end <= d.c_out && out.len() >= d.images * channels.len() * d.oh * d.ow);
    amx::configure();
    #[repr(align(64))]
    struct Block([f32; BLOCK * BLOCK]);
    let mut block = Block([0f32; BLOCK * BLOCK]);
    let block = &mut block.0;
    let taps = d.kh * d.kw;
    let (a_row, b_row) = (4 * taps * pairs, 4 * d.plane);
    for cb in channels.clone().step_by(BLOCK) {
        for ob in (0..d.positions()).step_by(BLOCK) {
            // SAFETY: every left tile reads 16 rows of 16 pairs inside `weights` (rows of
            // `pairs`, c_out of them per tap); every right tile 16 planes' 16 slots at
            // `ob + shift + 16`, at most `plane` (its slack covers the last block); the
            // block is this call's own, 32 rows of 32 floats.
            unsafe {
                amx::zero_block();
                for ty in 0..d.kh {
                    for tx in 0..d.kw {
                        let t = ty * d.kw + tx;
                        let a_tap = weights.as_ptr().add((cb * taps + t) * pairs);
                        let b_tap = planes.as_ptr().add(ob + ty * d.wp + tx);
                        for q0 in (0..pairs).step_by(PAIRS) {
                            let a = a_tap.add(q0).cast::<u8>();
                            let b = b_tap.add(q0 * d.plane).cast::<u8>();
                            amx::step(a, a_row, b, b_row);
                        }
                    }
                }
                amx::store_block(block.as_mut_ptr().cast::<u8>(), 4 * BLOCK);
            }
            scatter(d, block, (ob, cb - channels.start, channels.len()), out);
        }
    }
}

/// Copies a block's real positions (`x < ow`, `y < oh` within its image) into their
/// output slots: its row `r` is channel `c0 + r` of the `channels` that `out` holds per
/// image.
fn scatter(
    d: &Direct,
    block: &[f32],
    (ob, c0, channels): (usize, usize, usize),
    out: &mut [MaybeUninit<f32>],
) {
    let plane_out = d.oh * d.ow;
    let end = (ob + BLOCK).min(d.positions());
    let mut o = ob;
    while o < end {
        let (row, x) = (o / d.wp, o % d.wp);
        let run_end = (o - x + d.wp).min(end);
        let (image, y) = (row / d.hp, row % d.hp);
        if x < d.ow && y < d.oh {
            let len = d.ow.min(run_end - o + x) - x;
            let j = o - ob;
            let at = (image * channels + c0) * plane_out + y * d.ow + x;
            for (r, values) in block.chunks_exact(BLOCK).enumerate() {
                let dst = &mut out[at + r * plane_out..][..len];
                for (slot, v) in dst.iter_mut().zip(&values[j..j + len]) {
                    slot.write(*v);
                }
            }
        }
        o = run_end;
    }
}

/// Runs the direct convolution `d` (one image a stack) over `n` images (`xs`:
/// `n × c_in × h × w`) into `dst` (`n × c_out × oh × ow`, every slot written): images
/// across threads, split by output channel blocks too when the batch is smaller than the
/// thread count.
fn run(d: &Direct, n: usize, xs: &[f32], weights: &[u32], dst: &mut [MaybeUninit<f32>]) {
    let (in_len, out_len) = (d.c_in * d.h * d.w, d.c_out * d.oh * d.ow);
    assert_eq!(xs.len(), n * in_len, "amx_direct: input size");
    assert_eq!(dst.len(), n * out_len, "amx_direct: output size");
    // One image a task: stacking small images to share the weights' tile loads measured
    // slower (ResNet-18 CIFAR's 256-channel 8x8 layer at batch 32: forward 4.2-4.5
    // against 5.0-5.3 ms in stacks of 6, 4 alternating `conv_passes` runs each).
    let blocks = d.c_out / BLOCK;
    let splits = threads().div_ceil(n.max(1)).clamp(1, blocks);
    let per_split = blocks.div_ceil(splits) * BLOCK;
    let mut tasks = Vec::new();
    for (image, image_out) in dst.chunks_mut(out_len).enumerate() {
        let mut rest = image_out;
        for lo in (0..d.c_out).step_by(per_split) {
            let hi = (lo + per_split).min(d.c_out);
            let (part, tail) = rest.split_at_mut((hi - lo) * d.oh * d.ow);
            rest = tail;
            tasks.push((image, lo..hi, part));
        }
    }
    tasks
        .into_par_iter()
        .for_each_init(Aligned::default, |planes, (image, channels, part)| {
            let planes = planes.prefix(d.pairs() * d.plane);
            run_wide(FillPlanes {
                d: *d,
                images: &xs[image * in_len..][..in_len],
                planes: &mut *planes,
            });
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `fits` put the AMX path in force (the CPU has AMX); the layouts are
            // `d`'s (a stack of one image), and `part` holds this task's channels of it.
            unsafe {
                convolve_stack(d, (weights, planes), channels, part)
            };
        });
}

/// The product of a convolution that [`convolve`] computes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Pass {
    /// The output, `n × c_out × oh × ow`, from the input.
    Forward,
    /// The input gradient, `n × c_in × h × w`, from the output gradient: the forward
    /// convolution of the output gradient, padded by `k - 1 - pad`, with the weights
    /// transposed and flipped.
    BackwardData,
}

/// `pass` of the convolution `g` ([`fits`]) on float32 data, from `input` (the input, or
/// the output gradient) and the weights `ws`: true when it ran (every slot of `dst`
/// written), false (nothing written) otherwise.
pub(super) fn convolve<T: 'static>(
    g: &Geom,
    pass: Pass,
    input: &[T],
    ws: &[T],
    dst: &mut [MaybeUninit<T>],
) -> bool {
    let Some((input, ws, dst)) = crate::bf16::f32_call(input, ws, dst).filter(|_| fits::<T>(g))
    else {
        return false;
    };
    // The direct convolution that computes `pass`, whether its weights are transposed
    // and flipped, and the planes it writes.
    let (d, transposed, out_hw) = match pass {
        Pass::Forward => {
            let d = Direct::new((g.c_in, g.h, g.w), (g.c_out, g.kh, g.kw), g.p.padding, 1);
            (d, false, (g.oh, g.ow))
        }
        Pass::BackwardData => {
            let pad = [g.kh - 1 - g.p.padding[0], g.kw - 1 - g.p.padding[1]];
            let d = Direct::new((g.c_out, g.oh, g.ow), (g.c_in, g.kh, g.kw), pad, 1);
            (d, true, (g.h, g.w))
        }
    };
    debug_assert_eq!((d.oh, d.ow), out_hw);
    run(&d, g.n, input, &pack_weights(&d, ws, transposed), dst);
    true
}
