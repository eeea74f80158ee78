//! The CPU kernel: tiles of `BLOCK_Q` queries by `BLOCK_K` keys, each tile's scores one
//! small GEMM. The forward keeps a running maximum and sum per query row (the online
//! softmax) and rescales its output rows as the maximum grows, so it holds one tile of
//! scores per thread, never the T×T matrix. The backward splits the keys across threads
//! (their `dK`, `dV` rows are their own), draws each tile's probabilities again from the
//! saved log-sum-exp, and sums the threads' `dQ` at the end.

use candle_core::Tensor;
use rayon::prelude::*;

use super::generic;
use super::mask::Bias;
use super::params::{Attention, AttentionGrads, AttentionOutput, AttentionShape, Call, OP};
use crate::bf16::{gemm_strided_with, Products};
use crate::cpu::{self, Float};
use crate::dropout::Draws;
use crate::error::Result;

/// Query rows per tile.
const BLOCK_Q: usize = 64;
/// Key rows per tile: a 64×128 f32 tile of scores is 32 KiB, in L1/L2 with its operands.
const BLOCK_K: usize = 128;
/// Lanes of the row reductions: independent partial maxima and sums that vectorize.
const LANES: usize = 16;

/// One attention's sizes and settings, as the tiles need them.
struct Plan<'a, T> {
    queries: usize,
    keys: usize,
    qk_dim: usize,
    v_dim: usize,
    scale: T,
    causal: bool,
    bias: Option<&'a Bias<T>>,
    /// The dropout draws and the kept weights' factor `1 / (1 - p)`.
    dropout: Option<(Draws, T)>,
    /// How every tile's GEMMs multiply.
    products: Products,
}

impl<'a, T: Float> Plan<'a, T> {
    fn new(shape: &AttentionShape, a: &Attention, step: u64, bias: Option<&'a Bias<T>>) -> Self {
        Plan {
            queries: shape.queries,
            keys: shape.keys,
            qk_dim: shape.qk_dim,
            v_dim: shape.v_dim,
            scale: T::from_f64(a.scale),
            causal: a.causal,
            bias,
            dropout: (a.dropout_p > 0.0).then(|| {
                let draws = Draws::new(a.dropout_p, a.seed, step);
                (draws, T::from_f64(1.0 / (1.0 - a.dropout_p)))
            }),
            products: a.products,
        }
    }

    /// `dst (m×n, row-major) [+]= lhs · rhs` on this thread with the plan's products, the
    /// operands given with their (row, column) strides: every product of a tile.
    #[inline]
    fn product(
        &self,
        dst: &mut [T],
        (m, n, k): (usize, usize, usize),
        accumulate: bool,
        lhs: (&[T], (usize, usize)),
        rhs: (&[T], (usize, usize)),
    ) {
        let strides = (dst, (n, 1));
        gemm_strided_with(
            self.products,
            (m, n, k),
            strides,
            accumulate,
            (lhs, rhs),
            false,
        )
    }

    /// The keys query row `i` may see: `0..key_end(i)`.
    fn key_end(&self, i: usize) -> usize {
        if self.causal {
            (i + 1).min(self.keys)
        } else {
            self.keys
        }
    }

    /// A tile row of raw products `q_i·k_j` (keys from `k0`) made logits: scaled, the
    /// mask added, keys the causal rule hides set to −∞.
    #[inline(always)]
    fn logits(&self, h: usize, i: usize, k0: usize, row: &mut [T]) {
        let scale = self.scale;
        match self.bias {
            Some(bias) => {
                let (values, stride) = bias.row(h, i);
                for (j, x) in row.iter_mut().enumerate() {
                    *x = *x * scale + values[(k0 + j) * stride];
                }
            }
            None => row.iter_mut().for_each(|x| *x *= scale),
        }
        let visible = self.key_end(i).saturating_sub(k0).min(row.len());
        row[visible..].iter_mut().for_each(|x| *x = T::NEG_INFINITY);
    }

    /// The dropout draw's index of slice `h`, query `i`, key `k0`: its place in the
    /// `[heads, L, S]` weights, as the generic path's mask numbers them.
    #[inline(always)]
    fn index(&self, h: usize, i: usize, k0: usize) -> u64 {
        ((h * self.queries + i) * self.keys + k0) as u64
    }

    /// The dropout factor of each weight in a tile row: 0 where dropped, `1 / (1 - p)`
    /// where kept, applied to `row` in place.
    #[inline(always)]
    fn drop(&self, h: usize, i: usize, k0: usize, row: &mut [T]) {
        if let Some((draws, keep)) = &self.dropout {
            let base = self.index(h, i, k0);
            for (j, x) in row.iter_mut().enumerate() {
                *x = if draws.kept(base + j as u64) {
                    *x * *keep
                } else {
                    T::ZERO
                };
            }
        }
    }
}

/// The largest value of `row` (NaN ignored: it reaches the output through the sum).
#[inline(always)]
fn row_max<T: Float>(row: &[T]) -> T {
    let mut lanes = [T::NEG_INFINITY; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for c in &mut chunks {
        for (m, &x) in lanes.iter_mut().zip(c) {
            *m = if x > *m { x } else { *m };
        }
    }
    let mut m = T::NEG_INFINITY;
    for &x in chunks.remainder().iter().chain(&lanes) {
        m = if x > m { x } else { m };
    }
    m
}

/// `row ← exp(row - m)`; returns the sum.
#[inline(always)]
fn exp_sum<T: Float>(row: &mut [T], m: T) -> T {
    let mut lanes = [T::ZERO; LANES];
    let mut chunks = row.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for (s, x) in lanes.iter_mut().zip(c.iter_mut()) {
            let y = (*x - m).exp();
            *x = y;
            *s += y;
        }
    }
    let mut sum = T::ZERO;
    for x in chunks.into_remainder() {
        let y = (*x - m).exp();
        *x = y;
        sum += y;
    }
    lanes.iter().fold(sum, |s, &l| s + l)
}

/// The running state of one tile's query rows: maximum and sum of `exp(logit - max)`.
struct Running<T> {
    max: Vec<T>,
    sum: Vec<T>,
}

/// One tile of the forward's online softmax: the tile's raw products become weights
/// `exp(logit - new max)` (dropped where dropout says), and each output row is rescaled
/// for its new maximum before the tile's `weights · V` is added.
struct SoftmaxTile<'a, 'p, T> {
    plan: &'a Plan<'p, T>,
    /// Slice, first query row, first key.
    at: (usize, usize, usize),
    tile: &'a mut [T],
    run: &'a mut Running<T>,
    out: &'a mut [T],
}

impl<T: Float> cpu::WideKernel for SoftmaxTile<'_, '_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let (plan, (h, i0, k0)) = (self.plan, self.at);
        let (tile, run, out) = (self.tile, self.run, self.out);
        let bc = tile.len() / run.max.len();
        for (r, row) in tile.chunks_exact_mut(bc).enumerate() {
            plan.logits(h, i0 + r, k0, row);
            let new_max = row_max(row);
            let new_max = if new_max > run.max[r] {
                new_max
            } else {
                run.max[r]
            };
            if new_max == T::NEG_INFINITY {
                // Nothing visible yet in this row: no weight, nothing to rescale.
                row.iter_mut().for_each(|x| *x = T::ZERO);
                continue;
            }
            let alpha = (run.max[r] - new_max).exp();
            run.sum[r] = run.sum[r] * alpha + exp_sum(row, new_max);
            run.max[r] = new_max;
            if alpha != T::ONE {
                let o = &mut out[r * plan.v_dim..(r + 1) * plan.v_dim];
                o.iter_mut().for_each(|x| *x *= alpha);
            }
            plan.drop(h, i0 + r, k0, row);
        }
    }
}

/// The forward of query rows `i0..` of slice `h` into `out` (`rows × Ev`) and `lse`.
#[allow(clippy::too_many_arguments)]
fn forward_rows<T: Float>(
    plan: &Plan<'_, T>,
    (h, i0): (usize, usize),
    (q, k, v): (&[T], &[T], &[T]),
    out: &mut [T],
    lse: &mut [T],
) {
    let (l, s, e, ev) = (plan.queries, plan.keys, plan.qk_dim, plan.v_dim);
    let rows = lse.len();
    let qt = &q[(h * l + i0) * e..][..rows * e];
    let mut run = Running {
        max: vec![T::NEG_INFINITY; rows],
        sum: vec![T::ZERO; rows],
    };
    out.iter_mut().for_each(|x| *x = T::ZERO);
    let mut tile = vec![T::ZERO; rows * BLOCK_K];
    let key_end = plan.key_end(i0 + rows - 1);
    for k0 in (0..key_end).step_by(BLOCK_K) {
        let bc = BLOCK_K.min(key_end - k0);
        let kt = &k[(h * s + k0) * e..][..bc * e];
        let vt = &v[(h * s + k0) * ev..][..bc * ev];
        let tile = &mut tile[..rows * bc];
        plan.product(tile, (rows, bc, e), false, (qt, (e, 1)), (kt, (1, e)));
        cpu::run_wide(SoftmaxTile {
            plan,
            at: (h, i0, k0),
            tile,
            run: &mut run,
            out,
        });
        plan.product(out, (rows, ev, bc), true, (tile, (bc, 1)), (vt, (ev, 1)));
    }
    for r in 0..rows {
        let o = &mut out[r * ev..(r + 1) * ev];
        if run.sum[r] == T::ZERO {
            o.iter_mut().for_each(|x| *x = T::ZERO);
            lse[r] = T::NEG_INFINITY;
        } else {
            let inv = T::ONE / run.sum[r];
            o.iter_mut().for_each(|x| *x *= inv);
            lse[r] = run.max[r] + run.sum[r].ln();
        }
    }
}

/// Whether any dimension is zero (the generic path handles those).
fn empty(shape: &AttentionShape) -> bool {
    shape.heads() * shape.queries * shape.keys * shape.qk_dim * shape.v_dim == 0
}

pub(super) fn forward<T: Float>(c: &Call<'_>) -> Result<AttentionOutput> {
    let (shape, [q, k, v], mask, a, step) = c.parts();
    if empty(shape) {
        return generic::forward(c);
    }
    let bias = mask.map(|m| Bias::<T>::new(OP, m, shape)).transpose()?;
    let plan = Plan::new(shape, a, step, bias.as_ref());
    let (heads, l, ev) = (shape.heads(), shape.queries, shape.v_dim);
    let mut out = vec![T::ZERO; heads * l * ev];
    let mut lse = vec![T::ZERO; heads * l];
    cpu::with_slice(OP, q, |q| {
        cpu::with_slice(OP, k, |k| {
            cpu::with_slice(OP, v, |v| {
                out.par_chunks_mut(l * ev)
                    .zip(lse.par_chunks_mut(l))
                    .enumerate()
                    .for_each(|(h, (out, lse))| {
                        out.par_chunks_mut(BLOCK_Q * ev)
                            .zip(lse.par_chunks_mut(BLOCK_Q))
                            .enumerate()
                            .for_each(|(b, (out, lse))| {
                                forward_rows(&plan, (h, b * BLOCK_Q), (q, k, v), out, lse)
                            })
                    });
                Ok(())
            })
        })
    })?;
    Ok(AttentionOutput {
        out: cpu::tensor(OP, out, shape.out())?,
        lse: cpu::tensor(OP, lse, shape.lse())?,
    })
}

/// The gradients of one slice's keys `k0..k1`: their `dK` and `dV` rows, and this key
/// range's share of the slice's `dQ`.
struct KeyRangeGrads<T> {
    h: usize,
    k0: usize,
    dq: Vec<T>,
    dk: Vec<T>,
    dv: Vec<T>,
}

/// The backward's per-tile work after the products: `p` holds `q·kᵀ`, `dp` holds
/// `dO·vᵀ`. Makes `p` the probabilities (dropped ones zeroed where dropout says: what
/// multiplied `v`), and `dp` the logits' gradient times the scale.
struct GradientTile<'a, 'p, T> {
    plan: &'a Plan<'p, T>,
    /// Slice, first query row, first key.
    at: (usize, usize, usize),
    lse: &'a [T],
    delta: &'a [T],
    p: &'a mut [T],
    dp: &'a mut [T],
    dropped: &'a mut [T],
}

impl<T: Float> cpu::WideKernel for GradientTile<'_, '_, T> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        let (plan, (h, i0, k0), lse, delta) = (self.plan, self.at, self.lse, self.delta);
        let (p, dp, dropped) = (self.p, self.dp, self.dropped);
        let bc = p.len() / lse.len();
        for r in 0..lse.len() {
            let i = i0 + r;
            let row = &mut p[r * bc..(r + 1) * bc];
            plan.logits(h, i, k0, row);
            let m = if lse[r] == T::NEG_INFINITY {
                -T::NEG_INFINITY
            } else {
                lse[r]
            };
            row.iter_mut().for_each(|x| *x = (*x - m).exp());
            let drow = &mut dp[r * bc..(r + 1) * bc];
            if let Some((draws, keep)) = &plan.dropout {
                // What multiplied v (the kept weights, scaled), and dP = dP_dropped · factor.
                let base = plan.index(h, i, k0);
                let kept = &mut dropped[r * bc..(r + 1) * bc];
                for (j, ((w, &pv), d)) in kept
                    .iter_mut()
                    .zip(row.iter())
                    .zip(drow.iter_mut())
                    .enumerate()
                {
                    let f = if draws.kept(base + j as u64) {
                        *keep
                    } else {
                        T::ZERO
                    };
                    *w = pv * f;
                    *d *= f;
                }
            }
            let scale = plan.scale;
            for (d, &pv) in drow.iter_mut().zip(row.iter()) {
                *d = pv * (*d - delta[r]) * scale;
            }
        }
    }
}

/// The backward of keys `k0..k1` of slice `h` against every query row that sees them.
#[allow(clippy::too_many_arguments)]
fn backward_keys<T: Float>(
    plan: &Plan<'_, T>,
    (h, k0, k1): (usize, usize, usize),
    (q, k, v): (&[T], &[T], &[T]),
    (dout, lse, delta): (&[T], &[T], &[T]),
) -> KeyRangeGrads<T> {
    let (l, s, e, ev) = (plan.queries, plan.keys, plan.qk_dim, plan.v_dim);
    let mut g = KeyRangeGrads {
        h,
        k0,
        dq: vec![T::ZERO; l * e],
        dk: vec![T::ZERO; (k1 - k0) * e],
        dv: vec![T::ZERO; (k1 - k0) * ev],
    };
    let mut p = [T::ZERO; BLOCK_Q * BLOCK_K];
    let mut dp = [T::ZERO; BLOCK_Q * BLOCK_K];
    let mut dropped = vec![
        T::ZERO;
        if plan.dropout.is_some() {
            BLOCK_Q * BLOCK_K
        } else {
            0
        }
    ];
    for kb in (k0..k1).step_by(BLOCK_K) {
        let bc = BLOCK_K.min(k1 - kb);
        let kt = &k[(h * s + kb) * e..][..bc * e];
        let vt = &v[(h * s + kb) * ev..][..bc * ev];
        let dk = &mut g.dk[(kb - k0) * e..][..bc * e];
        let dv = &mut g.dv[(kb - k0) * ev..][..bc * ev];
        let first_query = if plan.causal { kb.min(l) } else { 0 };
        for i0 in (first_query..l).step_by(BLOCK_Q) {
            let br = BLOCK_Q.min(l - i0);
            let qt = &q[(h * l + i0) * e..][..br * e];
            let dot = &dout[(h * l + i0) * ev..][..br * ev];
            let (p, dp) = (&mut p[..br * bc], &mut dp[..br * bc]);
            plan.product(p, (br, bc, e), false, (qt, (e, 1)), (kt, (1, e)));
            plan.product(dp, (br, bc, ev), false, (dot, (ev, 1)), (vt, (1, ev)));
            let rows = h * l + i0..h * l + i0 + br;
            let dropped = &mut dropped[..if plan.dropout.is_some() { br * bc } else { 0 }];
            cpu::run_wide(GradientTile {
                plan,
                at: (h, i0, kb),
                lse: &lse[rows.clone()],
                delta: &delta[rows],
                p,
                dp,
                dropped,
            });
            let weights: &[T] = if plan.dropout.is_some() { dropped } else { p };
            // dV += weightsᵀ·dO, dQ += dS·K, dK += dSᵀ·Q.
            plan.product(dv, (bc, ev, br), true, (weights, (1, bc)), (dot, (ev, 1)));
            let dq = &mut g.dq[i0 * e..][..br * e];
            plan.product(dq, (br, e, bc), true, (dp, (bc, 1)), (kt, (e, 1)));
            plan.product(dk, (bc, e, br), true, (dp, (1, bc)), (qt, (e, 1)));
        }
    }
    g
}

pub(super) fn backward<T: Float>(
    c: &Call<'_>,
    y: &AttentionOutput,
    dy: &Tensor,
) -> Result<AttentionGrads> {
    let (shape, [q, k, v], mask, a, step) = c.parts();
    if empty(shape) {
        return generic::backward(c, y, dy);
    }
    let bias = mask.map(|m| Bias::<T>::new(OP, m, shape)).transpose()?;
    let plan = Plan::new(shape, a, step, bias.as_ref());
    let (heads, l, s, e, ev) = shape.dims();
    // Enough key ranges to keep every thread busy when there are few slices.
    let key_blocks = s.div_ceil(BLOCK_K);
    let ranges = (2 * cpu::threads()).div_ceil(heads).clamp(1, key_blocks);
    let range_keys = key_blocks.div_ceil(ranges) * BLOCK_K;
    let units: Vec<(usize, usize, usize)> = (0..heads)
        .flat_map(|h| {
            (0..s)
                .step_by(range_keys)
                .map(move |k0| (h, k0, (k0 + range_keys).min(s)))
        })
        .collect();
    let parts = cpu::with_slice(OP, q, |q| {
        cpu::with_slice(OP, k, |k| {
            cpu::with_slice(OP, v, |v| {
                cpu::with_slice(OP, dy, |dout| {
                    cpu::with_slice(OP, &y.out, |out| {
                        cpu::with_slice(OP, &y.lse, |lse| {
                            let delta: Vec<T> = dout
                                .par_chunks(ev)
                                .zip(out.par_chunks(ev))
                                .map(|(d, o)| {
                                    d.iter().zip(o).fold(T::ZERO, |s, (&d, &o)| s + d * o)
                                })
                                .collect();
                            Ok(units
                                .par_iter()
                                .map(|&u| backward_keys(&plan, u, (q, k, v), (dout, lse, &delta)))
                                .collect::<Vec<_>>())
                        })
                    })
                })
            })
        })
    })?;
    let mut dq = vec![T::ZERO; heads * l * e];
    let mut dk = vec![T::ZERO; heads * s * e];
    let mut dv = vec![T::ZERO; heads * s * ev];
    for g in parts {
        let slice = &mut dq[g.h * l * e..][..l * e];
        slice.iter_mut().zip(&g.dq).for_each(|(a, &b)| *a += b);
        dk[(g.h * s + g.k0) * e..][..g.dk.len()].copy_from_slice(&g.dk);
        dv[(g.h * s + g.k0) * ev..][..g.dv.len()].copy_from_slice(&g.dv);
    }
    Ok(AttentionGrads {
        q: cpu::tensor(OP, dq, q.dims())?,
        k: cpu::tensor(OP, dk, k.dims())?,
        v: cpu::tensor(OP, dv, v.dims())?,
    })
}
