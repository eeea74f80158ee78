//! The weight gradient of a 3x3, stride-1 convolution by Winograd's F(2x2, 3x3): the
//! adjoint of the forward transform (see [`super::winograd`]).
//!
//! The forward computes each 2x2 output tile as `Y = Aᵀ [U ⊙ V] A` with `U = G g Gᵀ`, so
//! the gradient of the transformed weights is `dU = Σ_tiles (A dY Aᵀ) ⊙ V` and the weight
//! gradient is `dg = Gᵀ dU G`. Per plane ξ the sum over tiles is one GEMM,
//! `dU[ξ] (c_out x c_in) = Ĝ[ξ] (c_out x tiles) · V[ξ]ᵀ (tiles x c_in)`, 2.25x fewer FLOPs
//! than im2col's `dy · colᵀ`. The transforms only add and halve.

use rayon::prelude::*;

use super::winograd::{fill, input_transform, Shape};
use crate::cpu::{self, Float};

/// Output channels per task of the gradient transform (one 64-byte row of f32 per tile).
const CHANNEL_BLOCK: usize = 16;

/// Whether the Winograd weight gradient runs the convolution `s` (already a Winograd
/// shape, see `cpu::winograd_shape`) faster than im2col + GEMM: images of 16 to 1024
/// tiles (8x8 to 64x64 outputs) and at least [`MIN_BATCH_TILES`] tiles in the batch.
/// Measured on Zen 5 (2 threads), alternating call by call against im2col: 0.86-0.97x
/// at 64 and 128 channels on 16x16 and 32x32 images at batches 8 and 32, 0.87-0.90x at
/// 256 channels on 8x8 at batch 32. On Zen 4, ResNet-50's 56x56 layer (64 channels,
/// 784 tiles an image) took 6.7-8.9 ms against im2col's 9.7-11.7 with bf16 products
/// and 6.8-7.3 against 9.9-10.5 in float32 at batch 8, 1.65-1.68 against 2.59-2.75 in
/// float32 at batch 2 (`conv_passes`, 3 alternating runs each).
pub(super) fn pays(s: &Shape) -> bool {
    let (th, tw) = s.tiles();
    let per_image = th * tw;
    (16..=1024).contains(&per_image) && s.n * per_image >= MIN_BATCH_TILES
}

/// Fewest tiles in the batch for the Winograd weight gradient (a batch of 8 16x16 images).
const MIN_BATCH_TILES: usize = 512;

/// Most values per transformed-weight plane (`c_in * c_out`) for which each thread
/// accumulates its own 16 planes of dU (1 MiB of f32 at 128 x 128), summed at the end;
/// wider layers share one dU, each plane's GEMMs on one thread (per-thread copies of 4
/// MiB and more measured up to 1.7x slower than im2col at 256 channels).
const MAX_PLANE_VALUES: usize = 128 * 128;

/// Fewest tiles per chunk: each chunk's two transformed operands (16 planes of its tiles,
/// for the input and output channels) should stay in the core's L2 cache between the
/// transforms and the GEMMs that read them, but the GEMMs, one per plane accumulating
/// into dU, need enough depth.
const CHUNK_TILES: usize = 64;

/// The weight gradient `[c_out][c_in][3][3]` of the convolution `s` of `x`
/// (`[n][c_in][h][w]`) given the output gradient `gy` (`[n][c_out][oh][ow]`), in chunks
/// of whole images of at least [`CHUNK_TILES`] tiles (chunks of part of an image, whose
/// GEMMs are shallower, measured slower).
pub(super) fn weight_gradient<T: Float>(s: &Shape, x: &[T], gy: &[T]) -> Vec<T> {
    let (th, tw) = s.tiles();
    let rows = s.n * th;
    // Whole images: the input transform works image by image.
    let per_chunk = (CHUNK_TILES / (th * tw)).max(1) * th;
    let chunks = rows.div_ceil(per_chunk);
    let len = 16 * s.c_out * s.c_in;
    let run_chunks = |range: std::ops::Range<usize>, parallel: bool| {
        let mut du = vec![T::ZERO; len];
        let (mut v, mut g) = (Vec::new(), Vec::new());
        for chunk in range {
            let rows = chunk * per_chunk..((chunk + 1) * per_chunk).min(rows);
            chunk_gradient(s, x, gy, rows, &mut du, (&mut v, &mut g), parallel);
        }
        du
    };
    let threads = cpu::threads();
    let du = if chunks >= threads && threads > 1 && s.c_in * s.c_out <= MAX_PLANE_VALUES {
        // Each thread its own run of chunks and its own dU, summed at the end.
        let per = chunks.div_ceil(threads);
        let partials: Vec<Vec<T>> = (0..threads)
            .into_par_iter()
            .map(|t| run_chunks(t * per..((t + 1) * per).min(chunks), false))
            .collect();
        let mut iter = partials.into_iter();
        let mut total = iter.next().unwrap_or_else(|| vec![T::ZERO; len]);
        for part in iter {
            total.iter_mut().zip(part).for_each(|(a, b)| *a += b);
        }
        total
    } else {
        run_chunks(0..chunks, true)
    };
    weights_from_planes(&du, s.c_out, s.c_in)
}

/// Adds the transformed-weight gradients of the tile rows `rows` (numbered across the
/// batch) to `du` (`dU[ξ]ᵀ`, `[ξ][i][o]`), with `v` and `g` as reused buffers for the two
/// transformed operands.
fn chunk_gradient<T: Float>(
    s: &Shape,
    x: &[T],
    gy: &[T],
    rows: std::ops::Range<usize>,
    du: &mut [T],
    (v, g): (&mut Vec<T>, &mut Vec<T>),
    parallel: bool,
) {
    let (th, tw) = s.tiles();
    let tiles = rows.len() * tw;
    let parallel = parallel && cpu::threads() > 1;
    // V[i][ξ][t] (as the forward) and Ĝ[ξ][t][o] = (A dY Aᵀ)[ξ] of tile t.
    fill(v, s.c_in, 16 * tiles, parallel, |c, planes| {
        input_transform(s, x, rows.start / th, rows.len() / th, c, planes, tiles)
    });
    let len = 16 * tiles * s.c_out;
    g.clear();
    g.reserve(len);
    {
        let dst = cpu::SendPtr(g.as_mut_ptr());
        let blocks = s.c_out.div_ceil(CHANNEL_BLOCK);
        let one = |pair: &mut Vec<T>, b: usize| {
            let o0 = b * CHANNEL_BLOCK;
            let width = CHANNEL_BLOCK.min(s.c_out - o0);
            output_gradient_transform(s, gy, rows.clone(), (o0, width), &dst, tiles, pair);
        };
        if parallel {
            (0..blocks).into_par_iter().for_each_init(Vec::new, one);
        } else {
            let mut pair = Vec::new();
            (0..blocks).for_each(|b| one(&mut pair, b));
        }
    }
    // SAFETY: the channel blocks cover 0..c_out, and each wrote its channels of every
    // (ξ, t): all `len` slots.
    unsafe { g.set_len(len) };
    let (v, g) = (&**v, &**g);
    // dU[ξ]ᵀ (c_in x c_out) += V[·][ξ][·] (c_in x tiles) · Ĝ[ξ] (tiles x c_out).
    let gemm = |(xi, dst): (usize, &mut [T])| {
        let lhs = (&v[xi * tiles..], (16 * tiles, 1));
        let rhs = (&g[xi * tiles * s.c_out..], (s.c_out, 1));
        let dst = (dst, (s.c_out, 1));
        crate::bf16::gemm_strided_with(
            s.products,
            (s.c_in, s.c_out, tiles),
            dst,
            true,
            (lhs, rhs),
            false,
        );
    };
    let planes = du.chunks_mut(s.c_out * s.c_in).enumerate();
    if parallel {
        planes.par_bridge().for_each(gemm);
    } else {
        planes.for_each(gemm);
    }
}

/// Output channels `o0..o0 + width` (`width` ≤ [`CHANNEL_BLOCK`])'s transformed gradient
/// tiles `A dY Aᵀ` for the tile rows `rows` (numbered across the batch), written
/// tile-major into `planes`
/// (`Ĝ[ξ][t][o]`, `c_out` channels per tile, `tiles` tiles per plane): the layout whose
/// rows the GEMM packs fastest. Outputs beyond `oh x ow` (partial tiles) count as zero.
/// Each pair of output rows is first transposed into `pair` (`[row][x][o - o0]`), so that
/// `A` (4x2, mapping `(d0, d1)` to `(d0, d0 + d1, d0 - d1, -d1)`) runs along both axes as
/// vector operations over the block's channels.
fn output_gradient_transform<T: Float>(
    s: &Shape,
    gy: &[T],
    rows: std::ops::Range<usize>,
    (o0, width): (usize, usize),
    planes: &cpu::SendPtr<T>,
    tiles: usize,
    pair: &mut Vec<T>,
) {
    const B: usize = CHANNEL_BLOCK;
    let (th, tw) = s.tiles();
    let (oh, ow) = (s.oh(), s.ow());
    let row_len = 2 * tw * B;
    pair.clear();
    pair.resize(2 * row_len, T::ZERO);
    for (t, row) in rows.enumerate() {
        let (image, ty) = (row / th, row % th);
        let t = t * tw;
        for (k, line) in pair.chunks_exact_mut(row_len).enumerate() {
            let y = 2 * ty + k;
            if y >= oh {
                line.fill(T::ZERO);
                continue;
            }
            for o in 0..width {
                let src = &gy[((image * s.c_out + o0 + o) * oh + y) * ow..][..ow];
                for (x, v) in src.iter().enumerate() {
                    line[x * B + o] = *v;
                }
            }
        }
        let (r0, r1) = pair.split_at(row_len);
        for tx in 0..tw {
            let at = |line: &[T], x: usize| -> [T; B] {
                line[x * B..][..B].try_into().expect("B values")
            };
            // A along the rows (r) of columns a and b, as vectors over the block's
            // channels: (d0, d0 + d1, d0 - d1, -d1).
            let rows = |d0: [T; B], d1: [T; B]| -> [[T; B]; 4] {
                [
                    d0,
                    std::array::from_fn(|o| d0[o] + d1[o]),
                    std::array::from_fn(|o| d0[o] - d1[o]),
                    std::array::from_fn(|o| T::ZERO - d1[o]),
                ]
            };
            let ca = rows(at(r0, 2 * tx), at(r1, 2 * tx));
            let cb = rows(at(r0, 2 * tx + 1), at(r1, 2 * tx + 1));
            for (r, (a, b)) in ca.iter().zip(&cb).enumerate() {
                // Then along the columns (q), each plane ξ = 4 r + q written straight to
                // its slots (a, a + b, a - b, -b).
                let plane = |q: usize| {
                    // SAFETY: slots (ξ, t + tx, o0..o0 + width) lie inside the
                    // 16 * tiles * c_out slots of `planes`, only this call (the one for
                    // channels o0..o0 + width) writes them, and each ξ's are distinct.
                    unsafe {
                        let at = planes.0.add(((4 * r + q) * tiles + t + tx) * s.c_out + o0);
                        std::slice::from_raw_parts_mut(at, width)
                    }
                };
                // A whole block is one fixed-size copy (a slice copy of a run-time
                // length calls memmove, which measured 10% of this gradient).
                match <&mut [T; B]>::try_from(plane(0)) {
                    Ok(whole) => *whole = *a,
                    Err(_) => plane(0).copy_from_slice(&a[..width]),
                }
                for ((d, a), b) in plane(1).iter_mut().zip(a).zip(b) {
                    *d = *a + *b;
                }
                for ((d, a), b) in plane(2).iter_mut().zip(a).zip(b) {
                    *d = *a - *b;
                }
                for (d, b) in plane(3).iter_mut().zip(b) {
                    *d = T::ZERO - *b;
                }
            }
        }
    }
}

/// `dg = Gᵀ dU G` for every (o, i): the weight gradient `[c_out][c_in][3][3]` from the
/// planes `du[ξ][i][o]`. `Gᵀ` (3x4) maps `(u0, u1, u2, u3)` to
/// `(u0 + (u1 + u2) / 2, (u1 - u2) / 2, (u1 + u2) / 2 + u3)`.
fn weights_from_planes<T: Float>(du: &[T], c_out: usize, c_in: usize) -> Vec<T> {
    let half = T::ONE / (T::ONE + T::ONE);
    let adjoint = |u: [T; 4]| {
        let s = (u[1] + u[2]) * half;
        [u[0] + s, (u[1] - u[2]) * half, s + u[3]]
    };
    let pairs = c_out * c_in;
    let mut dw = vec![T::ZERO; 9 * pairs];
    dw.par_chunks_mut(9).enumerate().for_each(|(k, out)| {
        let (o, i) = (k / c_in, k % c_in);
        let u = |xi: usize| du[xi * pairs + i * c_out + o];
        // Gᵀ along the rows (first index r of ξ = 4 r + q), then along the columns.
        let columns: [[T; 3]; 4] =
            std::array::from_fn(|q| adjoint([u(q), u(4 + q), u(8 + q), u(12 + q)]));
        for ky in 0..3 {
            let row = [
                columns[0][ky],
                columns[1][ky],
                columns[2][ky],
                columns[3][ky],
            ];
            out[3 * ky..3 * ky + 3].copy_from_slice(&adjoint(row));
        }
    });
    dw
}
