//! The weight gradient of the convolutions `amx_direct` runs, as AMX tile products with
//! no im2col matrix. Per tap `t` (shift `s` over the padded width),
//! `dwᵀ[t][ci][co] = Σ_o x_pad[ci][o + s] · dy[co][o]` over the output positions `o` of a
//! stack of images (`amx_direct`'s geometry: images one under the other, each padded).
//!
//! The left tiles read the input straight from its padded bfloat16 planes: a tile row is
//! 32 consecutive values of one channel from position `s + 2p`, which are the depth pairs
//! `tdpbf16ps` multiplies, at any shift (tile loads need no alignment). The right tiles
//! read the output gradient transposed once per stack into pairs of positions by output
//! channel, zero at the positions past a row's outputs, so those positions add nothing.
//! Each thread sums its stacks into its own `[t][ci][co]` accumulators.

use rayon::prelude::*;

use super::amx_direct::{fits, Direct, BLOCK, PAIRS};
use super::params::Geom;
#[cfg(target_arch = "x86_64")]
use crate::bf16::amx;
use crate::bf16::{round_to_bf16, Aligned};
use crate::cpu::{run_wide, threads, WideKernel};

/// One stack's operands: the padded input planes (`c_in` rows of `row` bfloat16 values)
/// and the output gradient's position pairs (`pairs` rows of `c_out` pairs).
struct Operands {
    x: Aligned<u16>,
    row: usize,
    dy: Aligned<u32>,
    pairs: usize,
}

impl Operands {
    /// Sized for `d`'s stacks: depth rounded to whole tile rows, input rows long enough
    /// for the farthest tap's shifted reads and whole cache lines.
    fn new(d: &Direct) -> Self {
        let depth = d.positions().div_ceil(2 * PAIRS) * 2 * PAIRS;
        let reach = (d.kh - 1) * d.wp + (d.kw - 1);
        let row = (depth + reach + 2)
            .max(d.images * d.hp * d.wp)
            .next_multiple_of(32);
        Operands {
            x: Aligned::zeros(d.c_in * row),
            row,
            dy: Aligned::zeros(depth / 2 * d.c_out),
            pairs: depth / 2,
        }
    }
}

/// Fills a stack's operands from its images' inputs and output gradients.
struct FillOperands<'a> {
    d: Direct,
    xs: &'a [f32],
    gs: &'a [f32],
    ops: &'a mut Operands,
}

impl WideKernel for FillOperands<'_> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let Direct {
            c_in,
            c_out,
            h,
            w,
            hp,
            wp,
            oh,
            ow,
            pad,
            ..
        } = self.d;
        let Operands { x, row, dy, .. } = self.ops;
        // Both start zeroed (`Operands::new`): padding and junk positions stay zero.
        for (i, image) in self.xs.chunks_exact(c_in * h * w).enumerate() {
            for (plane, dst) in image.chunks_exact(h * w).zip(x.chunks_exact_mut(*row)) {
                for (y, values) in plane.chunks_exact(w).enumerate() {
                    let at = (i * hp + y + pad[0]) * wp + pad[1];
                    for (slot, v) in dst[at..at + w].iter_mut().zip(values) {
                        *slot = round_to_bf16(*v);
                    }
                }
            }
        }
        // Position o's value of channel co is half o % 2 of pair (o / 2, co).
        let halves = dy.len() * 2;
        // SAFETY: `dy` is `halves` u16 halves of plain data, little-endian pairs.
        let dy16 = unsafe { std::slice::from_raw_parts_mut(dy.as_mut_ptr().cast::<u16>(), halves) };
        for (i, image) in self.gs.chunks_exact(c_out * oh * ow).enumerate() {
            for (co, plane) in image.chunks_exact(oh * ow).enumerate() {
                for (y, values) in plane.chunks_exact(ow).enumerate() {
                    let o0 = (i * hp + y) * wp;
                    for (x, v) in values.iter().enumerate() {
                        let o = o0 + x;
                        dy16[(o / 2 * c_out + co) * 2 + o % 2] = round_to_bf16(*v);
                    }
                }
            }
        }
    }
}

/// Adds one stack's products into `acc` (`[t][ci][co]`, float32).
///
/// # Safety
/// The CPU must have AMX (the AMX path is in force: [`fits`]); `ops` is laid out for `d`.
#[cfg(target_arch = "x86_64")]
unsafe fn accumulate(d: &Direct, ops: &Operands, acc: &mut [f32]) {
    let (c_in, c_out) = (d.c_in, d.c_out);
    assert!(acc.len() >= d.kh * d.kw * c_in * c_out);
    assert!(ops.x.len() >= c_in * ops.row && ops.dy.len() >= ops.pairs * c_out);
    amx::configure();
    let (x_row, dy_row, acc_row) = (2 * ops.row, 4 * c_out, 4 * c_out);
    for ty in 0..d.kh {
        for tx in 0..d.kw {
            let t = ty * d.kw + tx;
            let shift = ty * d.wp + tx;
            for ib in (0..c_in).step_by(BLOCK) {
                for cb in (0..c_out).step_by(BLOCK) {
                    let c = acc
                        .as_mut_ptr()
                        .wrapping_add((t * c_in + ib) * c_out + cb)
                        .cast::<u8>();
                    // SAFETY: the accumulator block is 32 rows of 32 floats inside `acc`;
                    // left tiles read 16 channel rows of 32 values from `shift + 2 * p0`,
                    // at most `shift + depth <= row`; right tiles 16 pair rows of 16
                    // pairs inside `dy`.
                    unsafe {
                        amx::load_block(c, acc_row);
                        let a_base = ops.x.as_ptr().add(ib * ops.row + shift).cast::<u8>();
                        let b_base = ops.dy.as_ptr().add(cb).cast::<u8>();
                        for p0 in (0..ops.pairs).step_by(PAIRS) {
                            let (a, b) = (a_base.add(4 * p0), b_base.add(p0 * dy_row));
                            amx::step(a, x_row, b, dy_row);
                        }
                        amx::store_block(c, acc_row);
                    }
                }
            }
        }
    }
}

/// Bytes of one stack's operands to keep in L2 (2 MiB a core on Sapphire Rapids).
const STACK_BYTES: usize = 1 << 20;

/// Images per stack: as many as keep the operands within [`STACK_BYTES`] (every stack
/// loads and stores each accumulator tile once per tap, so fewer stacks move less), at
/// most a thread's share, cut into equal stacks.
fn filter_stack_size(d: &Direct, n: usize, threads: usize) -> usize {
    let per_image = d.hp * d.wp * 2 * (d.c_in + d.c_out);
    let per_thread = n.div_ceil(threads).max(1);
    let most = (STACK_BYTES / per_image).clamp(1, per_thread);
    // Equal stacks: a thread's share in as few as fit.
    per_thread.div_ceil(per_thread.div_ceil(most))
}

/// The weight gradient of `g` ([`fits`]) on float32 data (`gs`: the output gradient,
/// `n × c_out × oh × ow`; `xs`: the input): `c_out × c_in × kh × kw`, or `None` when it
/// does not run here.
pub(super) fn weight_gradient<T: 'static>(g: &Geom, gs: &[T], xs: &[T]) -> Option<Vec<f32>> {
    let (gs, xs) = (crate::bf16::as_f32(gs)?, crate::bf16::as_f32(xs)?);
    if !fits::<T>(g) {
        return None;
    }
    let one = Direct::new((g.c_in, g.h, g.w), (g.c_out, g.kh, g.kw), g.p.padding, 1);
    let (in_len, out_len) = (g.c_in * g.h * g.w, g.c_out * g.pixels());
    assert_eq!(xs.len(), g.n * in_len, "amx_filter: input size");
    assert_eq!(gs.len(), g.n * out_len, "amx_filter: output gradient size");
    let threads = threads();
    let stack = filter_stack_size(&one, g.n, threads);
    let stacks: Vec<usize> = (0..g.n).step_by(stack).collect();
    let taps = g.kh * g.kw;
    let len = taps * g.c_in * g.c_out;
    let per_thread = stacks.len().div_ceil(threads);
    let partials: Vec<Aligned<f32>> = stacks
        .par_chunks(per_thread.max(1))
        .map(|firsts| {
            let mut acc = Aligned::zeros(len);
            for &first in firsts {
                let images = stack.min(g.n - first);
                let d = one.stacking(images);
                let mut ops = Operands::new(&d);
                run_wide(FillOperands {
                    d,
                    xs: &xs[first * in_len..(first + images) * in_len],
                    gs: &gs[first * out_len..(first + images) * out_len],
                    ops: &mut ops,
                });
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `fits` put the AMX path in force (the CPU has AMX); `ops` is
                // laid out for `d`.
                unsafe {
                    accumulate(&d, &ops, &mut acc)
                };
            }
            acc
        })
        .collect();
    // Summed and reordered [t][ci][co] -> [co][ci][t], 16 output channels a task: each
    // read takes 16 contiguous sums from every partial.
    let mut dw = vec![0f32; len];
    let group = 16;
    dw.par_chunks_mut(group * g.c_in * taps)
        .enumerate()
        .for_each(|(b, out)| {
            let co0 = b * group;
            let cos = out.len() / (g.c_in * taps);
            let mut sums = [0f32; 16];
            for ci in 0..g.c_in {
                for t in 0..taps {
                    let at = (t * g.c_in + ci) * g.c_out + co0;
                    sums[..cos].fill(0.0);
                    for part in &partials {
                        for (s, v) in sums.iter_mut().zip(&part[at..at + cos]) {
                            *s += v;
                        }
                    }
                    for (j, s) in sums[..cos].iter().enumerate() {
                        out[(j * g.c_in + ci) * taps + t] = *s;
                    }
                }
            }
        });
    Some(dw)
}
