//! The CPU batch norm: one pass for the per-channel statistics (f64 accumulation in
//! independent partial sums), one pass that writes the output, channels and planes in
//! parallel. The backward pass runs channel by channel: its sums, then its input gradient
//! while the channel's data is still in the core's cache.

use std::mem::MaybeUninit;

use candle_core::{DType, Tensor};
use rayon::prelude::*;

use super::params::{BatchNormGrads, BatchNormOutput, Layer, OutputGrad, Stats, OP};
use crate::cpu::{self, dispatch_float, Float};
use crate::error::{CandleContext, Result};
use crate::shape::nchw;

/// Training-mode forward; with `relu`, the output pass writes `relu(y)`.
pub(super) fn train(x: &Tensor, layer: &Layer<'_>, relu: bool) -> Result<BatchNormOutput> {
    let (p, dims) = (layer.p, dims(x)?);
    let [n, _, h, w] = dims;
    let (mean, var) = dispatch_float!(OP, x.dtype(), channel_moments(x, dims))?;
    let m = (n * h * w) as f64;
    let inv_std: Vec<f64> = var.iter().map(|v| 1.0 / (v + p.eps).sqrt()).collect();
    let y = affine(x, dims, layer, &mean, &inv_std, relu)?;
    let unbiased: Vec<f64> = var.iter().map(|v| v * m / (m - 1.0)).collect();
    let dt = x.dtype();
    Ok(BatchNormOutput {
        y,
        running_mean: blend(layer.running_mean, &mean, p.momentum)?,
        running_var: blend(layer.running_var, &unbiased, p.momentum)?,
        mean: vector(mean, dt)?,
        inv_std: vector(inv_std, dt)?,
    })
}

pub(super) fn eval(x: &Tensor, layer: &Layer<'_>) -> Result<Tensor> {
    let (mean, inv_std) = running_stats(layer)?;
    affine(x, dims(x)?, layer, &mean, &inv_std, false)
}

/// The input's NCHW dims (checked by the public function).
fn dims(x: &Tensor) -> Result<[usize; 4]> {
    nchw(OP, "input", x.dims())
}

/// The running mean and `1 / sqrt(running_var + eps)`, on the host.
fn running_stats(layer: &Layer<'_>) -> Result<(Vec<f64>, Vec<f64>)> {
    let var = host(layer.running_var)?;
    let inv_std = var.iter().map(|v| 1.0 / (v + layer.p.eps).sqrt()).collect();
    Ok((host(layer.running_mean)?, inv_std))
}

/// `(1 - momentum) * running + momentum * batch`, as a tensor of `running`'s dtype.
fn blend(running: &Tensor, batch: &[f64], momentum: f64) -> Result<Tensor> {
    let old = host(running)?;
    let new = old
        .iter()
        .zip(batch)
        .map(|(r, b)| (1.0 - momentum) * r + momentum * b)
        .collect();
    vector(new, running.dtype())
}

/// `y = (x - mean) * (gamma * inv_std) + beta`, in the centred form: the expanded
/// `x * scale + (beta - mean * scale)` cancels two large terms where the mean is large next
/// to the standard deviation, and loses the low bits of `y` in float32.
fn affine(
    x: &Tensor,
    dims: [usize; 4],
    layer: &Layer<'_>,
    mean: &[f64],
    inv_std: &[f64],
    relu: bool,
) -> Result<Tensor> {
    let (gamma, beta) = (host(layer.weight)?, host(layer.bias)?);
    let scale: Vec<f64> = gamma.iter().zip(inv_std).map(|(g, s)| g * s).collect();
    let c = (mean, &scale[..], &beta[..]);
    dispatch_float!(OP, x.dtype(), affine_per_channel(x, dims, c, relu))
}

/// The gradients for normalisation by the batch's or the running statistics, from the
/// output gradient (masked by a fused ReLU's output where one is given).
pub(super) fn backward(
    gy: OutputGrad<'_>,
    x: &Tensor,
    weight: &Tensor,
    stats: Stats<'_>,
) -> Result<BatchNormGrads> {
    let OutputGrad {
        grad: grad_y,
        relu_out,
    } = gy;
    let ((mean, inv_std), batch_stats) = match stats {
        Stats::Batch { mean, inv_std } => ((host(mean)?, host(inv_std)?), true),
        Stats::Running(layer) => (running_stats(layer)?, false),
    };
    let (mean, inv_std) = (&mean[..], &inv_std[..]);
    let dims = dims(x)?;
    let c = dims[1];
    let gamma = host(weight)?;
    let channel = ChannelConstants {
        mean,
        inv_std,
        gamma: &gamma,
        batch_stats,
    };
    let (dx, sum_dy, sum_dy_xc) = dispatch_float!(
        OP,
        x.dtype(),
        backward_per_channel(grad_y, relu_out, x, dims, &channel)
    )?;
    let d_weight: Vec<f64> = (0..c).map(|i| sum_dy_xc[i] * inv_std[i]).collect();
    Ok(BatchNormGrads {
        x: dx,
        weight: vector(d_weight, weight.dtype())?,
        bias: vector(sum_dy, weight.dtype())?,
    })
}

/// A small per-channel tensor's values on the host, as f64.
fn host(t: &Tensor) -> Result<Vec<f64>> {
    crate::compare::host_f64(OP, t)
}

/// A per-channel vector as a CPU tensor of `dtype`.
fn vector(v: Vec<f64>, dtype: DType) -> Result<Tensor> {
    let n = v.len();
    cpu::tensor(OP, v, n)?.to_dtype(dtype).ctx(OP)
}

/// Independent f64 accumulators per sum: a single running f64 sum is one long chain of
/// dependent additions (about four cycles per element); eight chains vectorise.
const LANES: usize = 8;

/// Values summed per block by [`lane_grad_sums`], a multiple of [`LANES`] so that blocks
/// do not change which lane sums which value.
const BLOCK: usize = 32 * LANES;

/// `sum f(v)` over `xs` as f64: 16 partial sums in the data type, each of at most 16
/// values (a block of 256), folded into an f64 total per block.
#[inline(always)]
fn block_sum<T: Float>(xs: &[T], f: impl Fn(T) -> T) -> f64 {
    let mut total = 0.0;
    for block in xs.chunks(256) {
        let mut acc = [T::ZERO; 16];
        let lanes = block.chunks_exact(16);
        total += lanes
            .remainder()
            .iter()
            .map(|v| f(*v).to_f64())
            .sum::<f64>();
        for c in lanes {
            let c: &[T; 16] = c.try_into().expect("16 values");
            for i in 0..16 {
                acc[i] += f(c[i]);
            }
        }
        total += acc.iter().map(|a| a.to_f64()).sum::<f64>();
    }
    total
}

/// `sum f(x)` over `xs` in f64, in [`LANES`] independent partial sums.
#[inline(always)]
fn lane_sum<T: Float>(xs: &[T], f: impl Fn(T) -> f64) -> f64 {
    let mut acc = [0.0f64; LANES];
    let chunks = xs.chunks_exact(LANES);
    let rest: f64 = chunks.remainder().iter().map(|v| f(*v)).sum();
    for c in chunks {
        let c: &[T; LANES] = c.try_into().expect("LANES values");
        for i in 0..LANES {
            acc[i] += f(c[i]);
        }
    }
    acc.iter().sum::<f64>() + rest
}

/// The output gradient masked by a fused ReLU's output (0 where `z <= 0`, as
/// `relu_backward`) into the input gradient's slots, in one streaming pass in memory
/// order over the threads; the two batch-norm passes then read it there and overwrite it
/// in place, so they read two tensors in order rather than three cold ones channel by
/// channel.
fn mask_gradient<T: Float>(gs: &[T], zs: &[T], slots: &mut [MaybeUninit<T>]) {
    const CHUNK: usize = 1 << 14;
    slots
        .par_chunks_mut(CHUNK)
        .zip(gs.par_chunks(CHUNK).zip(zs.par_chunks(CHUNK)))
        .for_each(|(d, (g, z))| {
            for ((o, g), z) in d.iter_mut().zip(g).zip(z) {
                // Both loaded first: a select the compiler vectorises, not a branch.
                let (g, z) = (*g, *z);
                o.write(if z <= T::ZERO { T::ZERO } else { g });
            }
        });
}

/// `(sum g, sum g * (x - mu))` over one plane in f64, `g` read from `gs`, or when
/// `MASK` from the plane's input-gradient slots `d`, where [`mask_gradient`] left the
/// masked gradient; in [`LANES`] partial sums each (value `j` into lane `j % LANES`, the
/// last `len % LANES` values apart), [`BLOCK`] values at a time.
#[inline(always)]
fn lane_grad_sums<T: Float, const MASK: bool>(
    (gs, xs): (&[T], &[T]),
    d: &mut [MaybeUninit<T>],
    mu: f64,
) -> (f64, f64) {
    let (mut s1, mut s2) = ([0.0f64; LANES], [0.0f64; LANES]);
    let (mut r1, mut r2) = (0.0, 0.0);
    let full = gs.len() / LANES * LANES;
    for start in (0..gs.len()).step_by(BLOCK) {
        let end = (start + BLOCK).min(gs.len());
        let g: &[T] = if MASK {
            // SAFETY: mask_gradient wrote every slot of the input gradient.
            unsafe { cpu::assume_init_mut(&mut d[start..end]) }
        } else {
            &gs[start..end]
        };
        let x = &xs[start..end];
        let lanes = full.min(end).saturating_sub(start);
        let pairs = g[..lanes]
            .chunks_exact(LANES)
            .zip(x[..lanes].chunks_exact(LANES));
        for (gc, xc) in pairs {
            let gc: &[T; LANES] = gc.try_into().expect("LANES values");
            let xc: &[T; LANES] = xc.try_into().expect("LANES values");
            let gv: [f64; LANES] = std::array::from_fn(|i| gc[i].to_f64());
            let xv: [f64; LANES] = std::array::from_fn(|i| xc[i].to_f64() - mu);
            for i in 0..LANES {
                s1[i] += gv[i];
                s2[i] += gv[i] * xv[i];
            }
        }
        for (gv, xv) in g[lanes..].iter().zip(&x[lanes..]) {
            r1 += gv.to_f64();
            r2 += gv.to_f64() * (xv.to_f64() - mu);
        }
    }
    (s1.iter().sum::<f64>() + r1, s2.iter().sum::<f64>() + r2)
}

/// One channel's input-gradient coefficients from its sums: `dx = a * ((dy - dm) + cx *
/// (x - mu))` (see [`backward_per_channel`]), as `(a, dm, cx, mu)`.
fn coefficients<T: Float>(
    k: &ChannelConstants<'_>,
    ch: usize,
    m: f64,
    (sum_dy, sum_dy_xc): (f64, f64),
) -> [T; 4] {
    let inv_std = k.inv_std[ch];
    let (dy_mean, cx) = if k.batch_stats {
        (sum_dy / m, -inv_std * (sum_dy_xc * inv_std) / m)
    } else {
        (0.0, 0.0)
    };
    [
        T::from_f64(k.gamma[ch] * inv_std),
        T::from_f64(dy_mean),
        T::from_f64(cx),
        T::from_f64(k.mean[ch]),
    ]
}

/// One plane of the input gradient into `d` from `g` (or, when `MASK`, from the masked
/// gradient [`mask_gradient`] left in `d`, overwritten in place) and `x`, with its
/// channel's [`coefficients`].
#[inline(always)]
fn plane_gradient<T: Float, const MASK: bool>(
    g: &[T],
    x: &[T],
    d: &mut [MaybeUninit<T>],
    [a, dm, cx, mu]: [T; 4],
) {
    let f = |g: T, x: T| a * ((g - dm) + cx * (x - mu));
    if MASK {
        // SAFETY: mask_gradient wrote every slot of `d`.
        let d = unsafe { cpu::assume_init_mut(d) };
        for (o, x) in d.iter_mut().zip(x) {
            *o = f(*o, *x);
        }
    } else {
        for ((o, g), x) in d.iter_mut().zip(g).zip(x) {
            o.write(f(*g, *x));
        }
    }
}

/// One channel of the input gradient: its sums over the `n` planes of `gs` (or, when
/// `MASK`, of the masked gradient already in `out`) and `xs` at `range(b)`, then its
/// planes of `dx` into `out` (see [`backward_per_channel`]). Returns `(sum dy, sum dy *
/// (x - mean))`.
#[inline(always)]
fn channel_gradient<T: Float, const MASK: bool>(
    (gs, xs): (&[T], &[T]),
    range: impl Fn(usize) -> std::ops::Range<usize>,
    mut out: Vec<&mut [MaybeUninit<T>]>,
    k: &ChannelConstants<'_>,
    ch: usize,
    m: f64,
) -> (f64, f64) {
    let (mut sum_dy, mut sum_dy_xc) = (0.0, 0.0);
    let n = out.len();
    for (b, d) in out.iter_mut().enumerate() {
        if b + 1 < n {
            let next = range(b + 1);
            if !MASK {
                cpu::prefetch(&gs[next.clone()]);
            }
            cpu::prefetch(&xs[next]);
        }
        let r = range(b);
        let (a1, a2) = lane_grad_sums::<T, MASK>((&gs[r.clone()], &xs[r]), d, k.mean[ch]);
        sum_dy += a1;
        sum_dy_xc += a2;
    }
    let coefs = coefficients(k, ch, m, (sum_dy, sum_dy_xc));
    for (b, d) in out.into_iter().enumerate() {
        let r = range(b);
        plane_gradient::<T, MASK>(&gs[r.clone()], &xs[r], d, coefs);
    }
    (sum_dy, sum_dy_xc)
}

/// The input gradient plane by plane in memory order, for small planes (see
/// [`PLANE_ORDER_BELOW`]): every plane's sums in one parallel pass, each channel's sums
/// added over its planes in batch order (the same additions in the same order as
/// [`channel_gradient`], so the same bits), then every plane's `dx` in a second pass.
/// Returns each channel's `(sum dy, sum dy * (x - mean))`.
fn gradient_by_plane<T: Float, const MASK: bool>(
    (gs, xs): (&[T], &[T]),
    dx: &mut [MaybeUninit<T>],
    [n, c, hw]: [usize; 3],
    k: &ChannelConstants<'_>,
    m: f64,
) -> Vec<(f64, f64)> {
    let min = (4096 / hw.max(1)).max(1);
    let per_plane: Vec<(f64, f64)> = dx[..n * c * hw]
        .par_chunks_mut(hw)
        .enumerate()
        .with_min_len(min)
        .map(|(i, d)| {
            let r = i * hw..(i + 1) * hw;
            let (g, x, mean) = (&gs[r.clone()], &xs[r], k.mean[i % c]);
            cpu::vectorized(
                #[inline(always)]
                || lane_grad_sums::<T, MASK>((g, x), d, mean),
            )
        })
        .collect();
    let sums: Vec<(f64, f64)> = (0..c)
        .map(|ch| {
            let (mut s1, mut s2) = (0.0, 0.0);
            for b in 0..n {
                let (a1, a2) = per_plane[b * c + ch];
                s1 += a1;
                s2 += a2;
            }
            (s1, s2)
        })
        .collect();
    let coefs: Vec<[T; 4]> = (0..c).map(|ch| coefficients(k, ch, m, sums[ch])).collect();
    dx[..n * c * hw]
        .par_chunks_mut(hw)
        .enumerate()
        .with_min_len(min)
        .for_each(|(i, d)| {
            let r = i * hw..(i + 1) * hw;
            let (g, x) = (&gs[r.clone()], &xs[r]);
            cpu::vectorized(
                #[inline(always)]
                || plane_gradient::<T, MASK>(g, x, d, coefs[i % c]),
            )
        });
    sums
}

/// Per-channel mean and biased variance, channels in parallel, in two passes: the mean
/// from f32 partial sums of at most 16 values each ([`block_sum`]: the first pass reads
/// the data from memory, and converting every value to f64 would make it compute-bound),
/// the variance around it in f64 ([`lane_sum`], the data now in cache). The variance stays
/// in f64: in f32 it is accurate per kernel but moves which ReLU inputs near zero change
/// sides, which shows in a training step's updates (the CIFAR fixture's test).
fn channel_moments<T: Float>(x: &Tensor, [n, c, h, w]: [usize; 4]) -> Result<(Vec<f64>, Vec<f64>)> {
    let hw = h * w;
    let m = (n * hw) as f64;
    cpu::with_slice::<T, _>(OP, x, |xs| {
        let moments: Vec<(f64, f64)> = (0..c)
            .into_par_iter()
            .map(|ch| {
                cpu::vectorized(
                    #[inline(always)]
                    || {
                        let planes = (0..n).map(|b| &xs[(b * c + ch) * hw..(b * c + ch + 1) * hw]);
                        let mean = planes.clone().map(|p| block_sum(p, |v| v)).sum::<f64>() / m;
                        let var = planes
                            .map(|p| lane_sum(p, |v| (v.to_f64() - mean).powi(2)))
                            .sum::<f64>()
                            / m;
                        (mean, var)
                    },
                )
            })
            .collect();
        Ok(moments.into_iter().unzip())
    })
}

/// `y = (x - center[c]) * scale[c] + shift[c]` (then ReLU with `relu`), planes in parallel.
fn affine_per_channel<T: Float>(
    x: &Tensor,
    [n, c, h, w]: [usize; 4],
    (center, scale, shift): (&[f64], &[f64], &[f64]),
    relu: bool,
) -> Result<Tensor> {
    let (hw, len) = (h * w, n * c * h * w);
    let mut y: Vec<T> = Vec::with_capacity(len);
    cpu::with_slice::<T, _>(OP, x, |xs| {
        if xs.len() != len {
            return Err(crate::invalid!(
                OP,
                "input {:?} does not have shape {:?}",
                x.dims(),
                [n, c, h, w]
            ));
        }
        y.spare_capacity_mut()[..len]
            .par_chunks_mut(hw)
            .zip(xs.par_chunks(hw))
            .enumerate()
            .for_each(|(plane, (yp, xp))| {
                let ch = plane % c;
                let (m, s, t) = (
                    T::from_f64(center[ch]),
                    T::from_f64(scale[ch]),
                    T::from_f64(shift[ch]),
                );
                let affine = |v: T| (v - m) * s + t;
                if relu {
                    // ReLU as `activation::relu`: 0 where y <= 0, NaN kept.
                    for (o, v) in yp.iter_mut().zip(xp) {
                        let y = affine(*v);
                        o.write(if y <= T::ZERO { T::ZERO } else { y });
                    }
                } else {
                    for (o, v) in yp.iter_mut().zip(xp) {
                        o.write(affine(*v));
                    }
                }
            });
        Ok(())
    })?;
    // SAFETY: `xs` holds `len` elements (checked above), so the planes above wrote every one
    // of the `len` slots (written once, not zeroed first).
    unsafe { y.set_len(len) };
    cpu::tensor(OP, y, (n, c, h, w))
}

/// Each channel's `n` planes of `hw` slots in `slots` (NCHW), to hand one channel's
/// output to one task.
fn planes_by_channel<T>(
    slots: &mut [MaybeUninit<T>],
    [n, c, h, w]: [usize; 4],
) -> Vec<Vec<&mut [MaybeUninit<T>]>> {
    let mut planes: Vec<Vec<&mut [MaybeUninit<T>]>> =
        (0..c).map(|_| Vec::with_capacity(n)).collect();
    for (plane, d) in slots[..n * c * h * w].chunks_mut(h * w).enumerate() {
        planes[plane % c].push(d);
    }
    planes
}

/// Planes of fewer values than this (smaller than 16x16) take the input gradient plane by
/// plane in memory order ([`gradient_by_plane`]) instead of channel by channel: a
/// channel's planes of a few hundred bytes each, far apart, are read at a fraction of the
/// memory's speed. Measured on Zen 5, 2 threads, alternating call by call (ReLU-fused
/// backward): 0.57-0.94x at 4x4 to 14x14 planes; 16x16 and larger stay per channel
/// (0.97-1.05x, within noise, and per channel keeps a channel's data in cache between its
/// two passes).
const PLANE_ORDER_BELOW: usize = 256;

/// What the input gradient needs per channel besides the data.
struct ChannelConstants<'a> {
    mean: &'a [f64],
    inv_std: &'a [f64],
    gamma: &'a [f64],
    /// Normalised by the batch's statistics (their gradient adds two corrections).
    batch_stats: bool,
}

/// The input gradient and, per channel, `sum dy` and `sum dy * (x - mean)` (dy masked by
/// `relu_out` if given), channels in parallel: each channel's sums, then its input
/// gradient planes while its data is still in the core's cache (a 64-channel 32x32 layer
/// at batch 32 holds 384 KiB per channel), instead of a second pass over the whole
/// tensors from memory. Centred, as PyTorch's kernel: `dx = a * ((dy - mean(dy)) +
/// c * (x - mean))` with `a = gamma * inv_std` and `c = -inv_std * d_weight / m` (the
/// batch statistics' gradient); with running statistics both corrections are 0 and
/// `dx = a * dy`.
fn backward_per_channel<T: Float>(
    grad_y: &Tensor,
    relu_out: Option<&Tensor>,
    x: &Tensor,
    [n, c, h, w]: [usize; 4],
    k: &ChannelConstants<'_>,
) -> Result<(Tensor, Vec<f64>, Vec<f64>)> {
    let (hw, len) = (h * w, n * c * h * w);
    let m = (n * hw) as f64;
    let mut dx: Vec<T> = Vec::with_capacity(len);
    let sums: Vec<(f64, f64)> = cpu::with_slice::<T, _>(OP, grad_y, |gs| {
        cpu::with_opt_slice::<T, _>(OP, relu_out, |zs| {
            cpu::with_slice::<T, _>(OP, x, |xs| {
                if gs.len() != len || xs.len() != len || zs.is_some_and(|z| z.len() != len) {
                    return Err(crate::invalid!(
                        OP,
                        "gradient, input and ReLU output must all be {:?}",
                        [n, c, h, w]
                    ));
                }
                let slots = &mut dx.spare_capacity_mut()[..len];
                if let Some(zs) = zs {
                    mask_gradient(gs, zs, slots);
                }
                if hw < PLANE_ORDER_BELOW {
                    return Ok(match zs {
                        Some(_) => gradient_by_plane::<T, true>((gs, xs), slots, [n, c, hw], k, m),
                        None => gradient_by_plane::<T, false>((gs, xs), slots, [n, c, hw], k, m),
                    });
                }
                let planes = planes_by_channel(slots, [n, c, h, w]);
                Ok(planes
                    .into_par_iter()
                    .enumerate()
                    .map(|(ch, out)| {
                        let range = |b: usize| (b * c + ch) * hw..(b * c + ch + 1) * hw;
                        cpu::vectorized(
                            #[inline(always)]
                            || match zs {
                                Some(_) => {
                                    channel_gradient::<T, true>((gs, xs), range, out, k, ch, m)
                                }
                                None => {
                                    channel_gradient::<T, false>((gs, xs), range, out, k, ch, m)
                                }
                            },
                        )
                    })
                    .collect())
            })
        })
    })?;
    // SAFETY: the lengths were checked above, so the c channels' n planes of hw slots
    // each, all written, are the `len` slots.
    unsafe { dx.set_len(len) };
    let (sum_dy, sum_dy_xc) = sums.into_iter().unzip();
    Ok((cpu::tensor(OP, dx, (n, c, h, w))?, sum_dy, sum_dy_xc))
}
