//! Winograd's minimal filtering F(2x2, 3x3) for 3x3, stride-1 convolutions on the CPU
//! (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2015).
//!
//! Each 2x2 output tile is computed from a 4x4 input tile with 16 multiplications per
//! input channel instead of 36: the input tiles and the weights are transformed
//! (`V = Bᵀ d B`, `U = G g Gᵀ`), the 16 transformed planes are multiplied as 16 GEMMs
//! (`M[ξ] = U[ξ] · V[ξ]`, channels summed), and the output tiles are transformed back
//! (`Y = Aᵀ M A`). The GEMMs do 2.25x fewer FLOPs than im2col's; F(2x2, 3x3)'s transforms
//! only add and halve, so its rounding stays close to the direct convolution's.
//!
//! The input gradient of such a convolution is the same kind of convolution of the output
//! gradient with the weights flipped and transposed, and runs here too.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::bf16::{pack_left_once, PackedLeft, Products};
use crate::cpu::{self, Float};

/// Transformed-plane columns (tiles) per GEMM when the images allow it, and the budget of
/// one transformed buffer, in values, that bounds it for wide layers.
const TARGET_TILES: usize = 128;
const BUFFER_VALUES: usize = 1 << 16;

/// Fewest channels (in and out) for which the transforms pay.
pub(super) const MIN_CHANNELS: usize = 16;

/// Fewest 2x2 output tiles in a call (over the batch) for which the weight transform,
/// done once per call, pays.
pub(super) const MIN_TILES: usize = 128;

/// Whether a call of `tiles` 2x2 output tiles holding `pixels` output pixels (over the
/// batch) pays for its weight transform: [`MIN_TILES`] tiles, and with 16-bit products
/// as many whole tiles' worth of pixels. The bf16 GEMM saves half as much per product,
/// and the part of a ragged tile past the image is transformed and multiplied for
/// nothing: ResNet-50's 7x7 layers at batch 8 (512 channels, 128 tiles holding 98 tiles'
/// pixels) took 8.6-9.1 ms forward and 8.9-9.5 ms input gradient in Winograd against
/// im2col's 7.3-8.5 and 5.9-6.6 (bf16, Zen 4, 3 alternating runs of
/// `WICK_CONV_ALGORITHM=auto` and `im2col` with `conv_passes`), while 128 whole tiles
/// (8x8 outputs at batch 8) tie. With float32 products Winograd wins that 7x7 layer
/// (8.0-8.3 against 9.6-10.7 ms forward).
pub(super) fn enough_tiles(tiles: usize, pixels: usize, products: Products) -> bool {
    match products {
        Products::Native => tiles >= MIN_TILES,
        // A call's tiles cover its pixels: `pixels / 4 <= tiles`.
        _ => pixels / 4 >= MIN_TILES,
    }
}

/// Fewest tiles per image with bfloat16 products (7x7 outputs and up). The bf16 GEMM
/// runs twice the float32 one's multiply-adds per instruction, so on smaller images the
/// transforms' short rows cost more than the saved products: CIFAR ResNet-18's 4x4
/// layers (batch 32, 64 to 512 channels) measured 1.04-1.2x im2col's time.
pub(super) const MIN_TILES_PER_IMAGE_BF16: usize = 16;

/// Fewest tiles per image with float32 (or float64) products (4x4 outputs and up): the
/// same 4x4 layers measured 0.75-0.97x im2col's time, 512 channels 0.66-0.75x at batch 64.
pub(super) const MIN_TILES_PER_IMAGE: usize = 4;

/// The fewest tiles per image for which Winograd runs with `products`.
pub(super) fn min_tiles_per_image(products: Products) -> usize {
    match products {
        Products::Native => MIN_TILES_PER_IMAGE,
        _ => MIN_TILES_PER_IMAGE_BF16,
    }
}

/// The shape of one Winograd convolution: a 3x3, stride-1, undilated, ungrouped
/// convolution of `n` images of `c_in x h x w` into `c_out x oh x ow`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shape {
    pub n: usize,
    pub c_in: usize,
    pub h: usize,
    pub w: usize,
    pub c_out: usize,
    pub pad: [usize; 2],
    /// How its GEMMs multiply (bfloat16 products under autocast).
    pub products: Products,
}

impl Shape {
    pub fn oh(&self) -> usize {
        self.h + 2 * self.pad[0] - 2
    }
    pub fn ow(&self) -> usize {
        self.w + 2 * self.pad[1] - 2
    }
    /// Output tile rows and columns (2x2 tiles, the last ones partial on odd sizes).
    pub fn tiles(&self) -> (usize, usize) {
        (self.oh().div_ceil(2), self.ow().div_ceil(2))
    }
}

/// The transformed weights `U` as `u[ξ][o][i] = (G g Gᵀ)[ξ]` for the 3x3 kernels `g` of a
/// weight `[c_out][c_in][3][3]`. With
/// `flip`, the weights of the input gradient: `o` ranges over the weight's input
/// channels, `i` over its output channels, and `g[ky][kx] = w[i][o][2 - ky][2 - kx]`.
/// Output rows in parallel, each as vector operations over `i`, written straight into
/// the 16 planes `u[ξ]` (the layout the GEMMs pack fastest), with no zeroing first.
pub(super) fn transform_weights<T: Float>(
    w: &[T],
    c_out: usize,
    c_in: usize,
    flip: bool,
) -> Vec<T> {
    let (rows, cols) = if flip { (c_in, c_out) } else { (c_out, c_in) };
    assert_eq!(w.len(), 9 * c_out * c_in, "3x3 weights expected");
    let half = T::ONE / (T::ONE + T::ONE);
    let len = 16 * rows * cols;
    let mut planes: Vec<T> = Vec::with_capacity(len);
    let dst = cpu::SendPtr(planes.as_mut_ptr());
    (0..rows).into_par_iter().for_each_init(
        || vec![T::ZERO; 21 * cols],
        |buf, o| {
            let (g, gg) = buf.split_at_mut(9 * cols);
            // g[k][i]: kernel tap k = 3 ky + kx of (o, i).
            for i in 0..cols {
                for k in 0..9 {
                    g[k * cols + i] = if flip {
                        w[(i * c_in + o) * 9 + 8 - k]
                    } else {
                        w[(o * c_in + i) * 9 + k]
                    };
                }
            }
            let tap = |k: usize| &g[k * cols..][..cols];
            // G g: row r of 3 taps, as [c0, c1, c2] columns.
            for c in 0..3 {
                let (t0, t1, t2) = (tap(c), tap(3 + c), tap(6 + c));
                for i in 0..cols {
                    gg[c * cols + i] = t0[i];
                    gg[(3 + c) * cols + i] = (t0[i] + t1[i] + t2[i]) * half;
                    gg[(6 + c) * cols + i] = (t0[i] - t1[i] + t2[i]) * half;
                    gg[(9 + c) * cols + i] = t2[i];
                }
            }
            // (G g) Gᵀ: ξ = 4 r + q, into row o of plane ξ.
            let dst = &dst;
            let plane_row = |xi: usize| {
                // SAFETY: row o of plane ξ lies inside the `len` slots, and only this
                // task (the one for row o) writes it.
                unsafe {
                    std::slice::from_raw_parts_mut(
                        dst.0.add((xi * rows + o) * cols).cast::<MaybeUninit<T>>(),
                        cols,
                    )
                }
            };
            for r in 0..4 {
                let row = |c: usize| &gg[(3 * r + c) * cols..][..cols];
                let (c0, c1, c2) = (row(0), row(1), row(2));
                let [d0, d1, d2, d3] = [0, 1, 2, 3].map(|q| plane_row(4 * r + q));
                for i in 0..cols {
                    d0[i].write(c0[i]);
                    d1[i].write((c0[i] + c1[i] + c2[i]) * half);
                    d2[i].write((c0[i] - c1[i] + c2[i]) * half);
                    d3[i].write(c2[i]);
                }
            }
        },
    );
    // SAFETY: every row o < rows of every plane ξ < 16 was written whole above.
    unsafe { planes.set_len(len) };
    planes
}

/// The convolution of `x` (`[n][c_in][h][w]`) with transformed weights `u`
/// ([`transform_weights`]) into `out` (`[n][c_out][oh][ow]`, every slot written).
pub(super) fn convolve<T: Float>(s: &Shape, x: &[T], u: &[T], out: &mut [MaybeUninit<T>]) {
    let (images, chunks) = chunking(s);
    let out_image = s.c_out * s.oh() * s.ow();
    // The 16 weight planes, packed once for every chunk's products where bf16 ones run.
    let plane = s.c_out * s.c_in;
    let packed: Option<Vec<PackedLeft>> = (0..16)
        .map(|xi| {
            pack_left_once(
                s.products,
                (s.c_out, s.c_in),
                (&u[xi * plane..][..plane], (s.c_in, 1)),
            )
        })
        .collect();
    let weights = Weights {
        u,
        packed: packed.as_deref(),
    };
    let run =
        |buffers: &mut Buffers<T>, (chunk, out): (usize, &mut [MaybeUninit<T>]), parallel: bool| {
            let first = chunk * images;
            let count = images.min(s.n - first);
            chunk_convolve(s, x, &weights, first, count, out, buffers, parallel);
        };
    if chunks >= cpu::threads() && cpu::threads() > 1 {
        out.par_chunks_mut(images * out_image)
            .enumerate()
            .for_each_init(Buffers::default, |b, c| run(b, c, false));
    } else {
        let mut buffers = Buffers::default();
        out.chunks_mut(images * out_image)
            .enumerate()
            .for_each(|c| run(&mut buffers, c, true));
    }
}

/// How the batch of `s` splits into chunks transformed and multiplied together: (images
/// per chunk, chunks).
fn chunking(s: &Shape) -> (usize, usize) {
    let (th, tw) = s.tiles();
    let per_image = th * tw;
    let widest = s.c_in.max(s.c_out).max(1);
    let target = TARGET_TILES.min(BUFFER_VALUES / widest).max(per_image);
    let images = (target / per_image).clamp(1, s.n.max(1));
    (images, s.n.div_ceil(images))
}

/// One thread's transformed input and product planes, reused from chunk to chunk (fresh
/// megabyte buffers would fault their pages in every time).
struct Buffers<T> {
    v: Vec<T>,
    m: Vec<T>,
}

impl<T> Default for Buffers<T> {
    fn default() -> Self {
        Buffers {
            v: Vec::new(),
            m: Vec::new(),
        }
    }
}

/// The transformed weights `U`, and their 16 planes packed for the bf16 GEMM when
/// [`pack_left_once`] packs them.
struct Weights<'a, T> {
    u: &'a [T],
    packed: Option<&'a [PackedLeft]>,
}

/// Images `first..first + count` into `out` (their outputs).
#[allow(clippy::too_many_arguments)]
fn chunk_convolve<T: Float>(
    s: &Shape,
    x: &[T],
    Weights { u, packed }: &Weights<'_, T>,
    first: usize,
    count: usize,
    out: &mut [MaybeUninit<T>],
    Buffers { v, m }: &mut Buffers<T>,
    parallel: bool,
) {
    let (th, tw) = s.tiles();
    let tiles = count * th * tw;
    // V[c][ξ][t]: each channel's 16 transformed planes, contiguous per channel.
    let parallel_transform = parallel && cpu::threads() > 1;
    fill(v, s.c_in, 16 * tiles, parallel_transform, |c, planes| {
        input_transform(s, x, first, count, c, planes, tiles)
    });
    // M[ξ][o][t] = U[ξ] (c_out x c_in) · V[·][ξ][·] (c_in x tiles, row stride 16 * tiles).
    m.clear();
    m.reserve(16 * s.c_out * tiles);
    let v = &*v;
    {
        let slots = &mut m.spare_capacity_mut()[..16 * s.c_out * tiles];
        let gemm = |(xi, dst): (usize, &mut [MaybeUninit<T>])| {
            let lhs = (&u[xi * s.c_out * s.c_in..][..s.c_out * s.c_in], (s.c_in, 1));
            let rhs = (&v[xi * tiles..], (16 * tiles, 1));
            crate::bf16::gemm_uninit_packed(
                s.products,
                packed.map(|p| &p[xi]),
                (s.c_out, tiles, s.c_in),
                dst,
                lhs,
                rhs,
                false,
            );
        };
        if parallel && cpu::threads() > 1 {
            slots
                .par_chunks_mut(s.c_out * tiles)
                .enumerate()
                .for_each(gemm);
        } else {
            slots.chunks_mut(s.c_out * tiles).enumerate().for_each(gemm);
        }
    }
    // SAFETY: each of the 16 GEMMs wrote its c_out * tiles slots.
    unsafe { m.set_len(16 * s.c_out * tiles) };
    let plane = s.oh() * s.ow();
    let one = |a: &mut Vec<T>, (k, dst): (usize, &mut [MaybeUninit<T>])| {
        let (image, o) = (k / s.c_out, k % s.c_out);
        output_transform(s, m, tiles, image * th * tw, o, dst, a);
    };
    let out = &mut out[..count * s.c_out * plane];
    if parallel && cpu::threads() > 1 {
        out.par_chunks_mut(plane)
            .enumerate()
            .with_min_len(64)
            .for_each_init(Vec::new, one);
    } else {
        let mut a = Vec::new();
        out.chunks_mut(plane)
            .enumerate()
            .for_each(|k| one(&mut a, k));
    }
}

/// Fills `buf` with `rows` blocks of `per_row` values, block `r` by `one(r, block)`, which
/// writes every slot of it; over the threads when `parallel`.
pub(super) fn fill<T: Float>(
    buf: &mut Vec<T>,
    rows: usize,
    per_row: usize,
    parallel: bool,
    one: impl Fn(usize, &mut [MaybeUninit<T>]) + Sync,
) {
    buf.clear();
    buf.reserve(rows * per_row);
    let slots = &mut buf.spare_capacity_mut()[..rows * per_row];
    if parallel {
        slots
            .par_chunks_mut(per_row)
            .enumerate()
            .with_min_len(16)
            .for_each(|(r, b)| one(r, b));
    } else {
        slots
            .chunks_mut(per_row)
            .enumerate()
            .for_each(|(r, b)| one(r, b));
    }
    // SAFETY: `one` wrote every slot of each of the `rows` blocks.
    unsafe { buf.set_len(rows * per_row) };
}

/// Channel `c`'s transformed input tiles for images `first..first + count`: 16 planes of
/// `tiles` values, `planes[ξ * tiles + t]`. Row by row: `Bᵀ d` as whole-row vector
/// operations on four zero-padded input rows, then `(Bᵀ d) B` along each row, writing
/// each of the 16 planes contiguously (loops the compiler vectorises). The order matters
/// for rounding: down the columns first, then along the rows, measured closer to im2col
/// on images whose rows vary less than their columns (the 50x37 PyTorch fixture: the
/// other order put one training step's updates 1e-2 away from float64).
pub(super) fn input_transform<T: Float>(
    s: &Shape,
    x: &[T],
    first: usize,
    count: usize,
    c: usize,
    planes: &mut [MaybeUninit<T>],
    tiles: usize,
) {
    let (th, tw) = s.tiles();
    let [ph, pw] = s.pad;
    let width = 2 * tw + 2;
    let half = tw + 1;
    // Four zero-padded input rows split into their even and odd columns
    // (`[even | odd]`, `half` values each), then their four combinations (Bᵀ d), in the
    // same split layout: the tiles' columns 2 tx .. 2 tx + 3 are then the contiguous
    // slices even[tx], odd[tx], even[tx + 1], odd[tx + 1], so `(Bᵀ d) B` runs as vector
    // operations over the tiles (the same arithmetic, in the same order, as on columns
    // read at a stride of two).
    let mut scratch = vec![T::ZERO; 8 * width];
    let (rows, comb) = scratch.split_at_mut(4 * width);
    // Padded column `x` is line[x - pw] inside the line, zero outside. Columns 2i and
    // 2i + 1 both lie inside for i in `inside`: those pairs are read straight from the
    // input (copying the line into a padded buffer first, and reading it back at once,
    // stalled on store forwarding).
    let inside = pw.div_ceil(2)..((s.w + pw) / 2).clamp(pw.div_ceil(2), half);
    let mut t = 0;
    for image in first..first + count {
        let src = &x[(image * s.c_in + c) * s.h * s.w..][..s.h * s.w];
        for ty in 0..th {
            for (k, row) in rows.chunks_exact_mut(width).enumerate() {
                let y = (2 * ty + k) as isize - ph as isize;
                if y < 0 || y as usize >= s.h {
                    row.fill(T::ZERO);
                    continue;
                }
                let line = &src[y as usize * s.w..][..s.w];
                split_padded_row(line, pw, inside.clone(), row.split_at_mut(half));
            }
            {
                let (d0, rest) = rows.split_at(width);
                let (d1, rest) = rest.split_at(width);
                let (d2, d3) = rest.split_at(width);
                let (b0, rest) = comb.split_at_mut(width);
                let (b1, rest) = rest.split_at_mut(width);
                let (b2, b3) = rest.split_at_mut(width);
                for j in 0..width {
                    b0[j] = d0[j] - d2[j];
                    b1[j] = d1[j] + d2[j];
                    b2[j] = d2[j] - d1[j];
                    b3[j] = d1[j] - d3[j];
                }
            }
            for (r, b) in comb.chunks_exact(width).enumerate() {
                let (even, odd) = b.split_at(half);
                // Every slice exactly `tw` long, so the loop runs without bounds checks
                // (and vectorises).
                let (e0, e1) = (&even[..tw], &even[1..=tw]);
                let (o0, o1) = (&odd[..tw], &odd[1..=tw]);
                let plane = |q: usize| (r * 4 + q) * tiles + t;
                let [p0, p1, p2, p3] = [0, 1, 2, 3].map(plane);
                let (v0, rest) = planes[p0..p3 + tw].split_at_mut(p1 - p0);
                let (v1, rest) = rest.split_at_mut(p2 - p1);
                let (v2, v3) = rest.split_at_mut(p3 - p2);
                let (v0, v1, v2) = (&mut v0[..tw], &mut v1[..tw], &mut v2[..tw]);
                let v3 = &mut v3[..tw];
                for tx in 0..tw {
                    v0[tx].write(e0[tx] - e1[tx]);
                    v1[tx].write(o0[tx] + e1[tx]);
                    v2[tx].write(e1[tx] - o0[tx]);
                    v3[tx].write(o0[tx] - o1[tx]);
                }
            }
            t += tw;
        }
    }
}

/// Writes the zero-padded row `line` (padded by `pw` on the left) split into its even and
/// odd columns: `even[i]` is padded column `2i`, `odd[i]` column `2i + 1`. The pairs in
/// `inside` lie wholly inside the line and are copied from it directly.
fn split_padded_row<T: Float>(
    line: &[T],
    pw: usize,
    inside: std::ops::Range<usize>,
    (even, odd): (&mut [T], &mut [T]),
) {
    let padded = |x: usize| match x.checked_sub(pw) {
        Some(i) if i < line.len() => line[i],
        _ => T::ZERO,
    };
    for i in (0..inside.start).chain(inside.end..even.len()) {
        (even[i], odd[i]) = (padded(2 * i), padded(2 * i + 1));
    }
    let pairs = line[2 * inside.start - pw..].chunks_exact(2);
    let (even, odd) = (&mut even[inside.clone()], &mut odd[inside]);
    for ((e, o), pair) in even.iter_mut().zip(odd.iter_mut()).zip(pairs) {
        *e = pair[0];
        *o = pair[1];
    }
}

/// Output channel `o` of one image from `m` (`M[ξ][o][t]`, its tiles from `tile0`), into
/// its plane `dst` (every slot written). Tile row by tile row: `Aᵀ M` as vector operations
/// over the row's tiles, then `(Aᵀ M) A` into the two output rows.
fn output_transform<T: Float>(
    s: &Shape,
    m: &[T],
    tiles: usize,
    tile0: usize,
    o: usize,
    dst: &mut [MaybeUninit<T>],
    a: &mut Vec<T>,
) {
    let (th, tw) = s.tiles();
    let (oh, ow) = (s.oh(), s.ow());
    // Aᵀ M for one tile row: 2 rows x 4 columns, each `tw` tiles long.
    a.resize(8 * tw, T::ZERO);
    for ty in 0..th {
        let t = tile0 + ty * tw;
        let plane = |xi: usize| &m[(xi * s.c_out + o) * tiles + t..][..tw];
        for q in 0..4 {
            let (m0, m1, m2, m3) = (plane(q), plane(4 + q), plane(8 + q), plane(12 + q));
            let (a0, a1) = a.split_at_mut(4 * tw);
            let (a0, a1) = (&mut a0[q * tw..][..tw], &mut a1[q * tw..][..tw]);
            for i in 0..tw {
                a0[i] = m0[i] + m1[i] + m2[i];
                a1[i] = m1[i] - m2[i] - m3[i];
            }
        }
        for r in 0..2 {
            let y = 2 * ty + r;
            if y >= oh {
                continue;
            }
            let row = &a[r * 4 * tw..][..4 * tw];
            let (q0, q1, q2, q3) = (
                &row[..tw],
                &row[tw..2 * tw],
                &row[2 * tw..3 * tw],
                &row[3 * tw..],
            );
            let out = &mut dst[y * ow..][..ow];
            let columns = q0.iter().zip(q1).zip(q2).zip(q3);
            for (pair, (((q0, q1), q2), q3)) in out.chunks_exact_mut(2).zip(columns) {
                pair[0].write(*q0 + *q1 + *q2);
                pair[1].write(*q1 - *q2 - *q3);
            }
            if ow % 2 == 1 {
                let i = ow / 2;
                out[2 * i].write(q0[i] + q1[i] + q2[i]);
            }
        }
    }
}
