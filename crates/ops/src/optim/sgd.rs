//! Stochastic gradient descent with momentum, weight decay, dampening and nesterov, with
//! PyTorch's `torch.optim.SGD` semantics: one fused update per parameter.

use std::sync::atomic::Ordering;

use candle_core::Tensor;
use rayon::prelude::*;

use crate::cpu::{Float, CHUNK};
use crate::route::{route, Route};

use super::params::SgdParams;
use crate::error::{CandleContext, Result};

const OP: &str = "sgd";

/// One SGD step (`SgdUpdate`) of `param` with gradient `grad`. `momentum_buf` is the
/// buffer from the previous step (`None` on the first step, when the buffer becomes the
/// gradient, as in PyTorch). Returns the new parameter and the new buffer (`None` when
/// momentum is 0).
pub fn sgd_step(
    param: &Tensor,
    grad: &Tensor,
    momentum_buf: Option<&Tensor>,
    p: &SgdParams,
) -> Result<(Tensor, Option<Tensor>)> {
    p.validate()?;
    crate::shape::same(OP, "gradient", grad.dims(), "parameter", param.dims())?;
    if let Some(buf) = momentum_buf {
        crate::shape::same(OP, "momentum buffer", buf.dims(), "parameter", param.dims())?;
    }
    let mut d = grad.clone();
    if p.weight_decay != 0.0 {
        d = (d + (param * p.weight_decay).ctx(OP)?).ctx(OP)?;
    }
    let mut new_buf = None;
    if p.momentum != 0.0 {
        let buf = match momentum_buf {
            None => d.clone(),
            Some(buf) => {
                ((buf * p.momentum).ctx(OP)? + (&d * (1.0 - p.dampening)).ctx(OP)?).ctx(OP)?
            }
        };
        d = if p.nesterov {
            (d + (&buf * p.momentum).ctx(OP)?).ctx(OP)?
        } else {
            buf.clone()
        };
        new_buf = Some(buf);
    }
    let new_param = (param - (d * p.lr).ctx(OP)?).ctx(OP)?;
    Ok((new_param, new_buf))
}

/// One SGD step that updates `param` (and the momentum buffer) **in place** where wick has
/// an in-place kernel (f32/f64 contiguous tensors on the CPU route, see
/// [`KernelPath`](crate::KernelPath)): no allocation after the first step. Elsewhere it is
/// [`sgd_step`], the device-generic path. Returns the parameter and the buffer to keep (on the
/// CPU the same tensors, updated; a new buffer on the first step).
///
/// The caller must own `param` and `momentum_buf` exclusively: every tensor sharing
/// their storage sees the update.
pub fn sgd_step_in_place(
    param: &Tensor,
    grad: &Tensor,
    momentum_buf: Option<&Tensor>,
    p: &SgdParams,
) -> Result<(Tensor, Option<Tensor>)> {
    sgd_in_place(param, grad, momentum_buf, p, false).map(|(w, b, _)| (w, b))
}

/// Whether an update left its parameter finite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FiniteCheck {
    /// Every element of the updated parameter is finite.
    Finite,
    /// Some element is NaN or infinite.
    NonFinite,
    /// Not checked (the device-generic path): the caller has to look itself.
    Unchecked,
}

/// [`sgd_step_in_place`] that also says whether the updated parameter is finite. With
/// momentum on the CPU (after the first step) each block is checked right after it is
/// written, while it is still in cache, so the check costs no trip through memory; the
/// first step and plain SGD check the parameter after the update.
pub fn sgd_step_in_place_checked(
    param: &Tensor,
    grad: &Tensor,
    momentum_buf: Option<&Tensor>,
    p: &SgdParams,
) -> Result<(Tensor, Option<Tensor>, FiniteCheck)> {
    sgd_in_place(param, grad, momentum_buf, p, true)
}

/// One SGD update's operands: the parameter, its gradient and its momentum buffer (`None`
/// on the first step, or without momentum).
pub type SgdMember<'a> = (&'a Tensor, &'a Tensor, Option<&'a Tensor>);

/// One SGD update's result: the parameter, the buffer to keep, and its finiteness.
pub type SgdUpdated = (Tensor, Option<Tensor>, FiniteCheck);

/// [`sgd_step_in_place_checked`] on many parameters with the same settings. On CUDA, when
/// every parameter is a contiguous tensor of one dtype (f32, f64, bf16 or f16) and every buffer is
/// present or none is, it is **one launch for all of them** (the non-finite flags stay on
/// the device: [`FiniteCheck::Unchecked`]); elsewhere one checked update after another.
pub fn sgd_step_multi_tensor_in_place(
    members: &[SgdMember<'_>],
    p: &SgdParams,
) -> Result<Vec<SgdUpdated>> {
    #[cfg(feature = "cuda")]
    if let Some(out) = sgd_cuda(members, p)? {
        return Ok(out);
    }
    members
        .iter()
        .map(|&(w, g, b)| sgd_in_place(w, g, b, p, true))
        .collect()
}

/// The multi-tensor kernel on `members` (one launch), or `None` when they do not qualify.
#[cfg(feature = "cuda")]
fn sgd_cuda(members: &[SgdMember<'_>], p: &SgdParams) -> Result<Option<Vec<SgdUpdated>>> {
    let Some(&(first, _, first_buf)) = members.first() else {
        return Ok(Some(Vec::new()));
    };
    let qualifies = members.iter().all(|&(w, _, b)| {
        route(w.device()) == Route::Cuda
            && w.dtype() == first.dtype()
            && crate::gpu::cuda::has_kernel_with_16_bit(w.dtype())
            && w.is_contiguous()
            && b.is_none_or(|b| b.is_contiguous())
            && b.is_some() == first_buf.is_some()
    });
    if !qualifies {
        return Ok(None);
    }
    p.validate()?;
    for &(w, g, b) in members {
        crate::shape::same(OP, "gradient", g.dims(), "parameter", w.dims())?;
        crate::cpu::same_dtype(OP, w.dtype(), &[("gradient", g)])?;
        if let Some(b) = b {
            crate::shape::same(OP, "momentum buffer", b.dims(), "parameter", w.dims())?;
        }
    }
    // The first step writes the buffers whole: their zeros are never read.
    let first_step = p.momentum != 0.0 && first_buf.is_none();
    let bufs: Option<Vec<Tensor>> = match p.momentum != 0.0 {
        true => Some(
            members
                .iter()
                .map(|&(w, _, b)| match b {
                    Some(b) => Ok(b.clone()),
                    None => w.zeros_like().ctx(OP),
                })
                .collect::<Result<_>>()?,
        ),
        false => None,
    };
    let params: Vec<&Tensor> = members.iter().map(|m| m.0).collect();
    let grads: Vec<&Tensor> = members.iter().map(|m| m.1).collect();
    let buf_refs: Option<Vec<&Tensor>> = bufs.as_ref().map(|v| v.iter().collect());
    super::cuda::sgd_multi_tensor(OP, &params, &grads, buf_refs.as_deref(), p, first_step)?;
    Ok(Some(
        members
            .iter()
            .enumerate()
            .map(|(i, m)| {
                (
                    m.0.clone(),
                    bufs.as_ref().map(|b| b[i].clone()),
                    FiniteCheck::Unchecked,
                )
            })
            .collect(),
    ))
}

fn sgd_in_place(
    param: &Tensor,
    grad: &Tensor,
    momentum_buf: Option<&Tensor>,
    p: &SgdParams,
    check: bool,
) -> Result<(Tensor, Option<Tensor>, FiniteCheck)> {
    let cpu_float = route(param.device()) == Route::Cpu
        && matches!(
            param.dtype(),
            candle_core::DType::F32 | candle_core::DType::F64
        )
        && param.is_contiguous()
        && momentum_buf.is_none_or(|b| b.is_contiguous());
    #[cfg(feature = "cuda")]
    if let Some(mut one) = sgd_cuda(&[(param, grad, momentum_buf)], p)? {
        return Ok(one.remove(0));
    }
    if !cpu_float {
        let (w, b) = sgd_step(param, grad, momentum_buf, p)?;
        return Ok((w, b, FiniteCheck::Unchecked));
    }
    p.validate()?;
    crate::shape::same(OP, "gradient", grad.dims(), "parameter", param.dims())?;
    crate::cpu::same_dtype(OP, param.dtype(), &[("gradient", grad)])?;
    let buf = if p.momentum == 0.0 {
        None
    } else {
        match momentum_buf {
            Some(buf) => {
                crate::shape::same(OP, "momentum buffer", buf.dims(), "parameter", param.dims())?;
                let update = SgdKernel::new(*p, Pass::Param { has_buf: true }, check);
                let momentum = SgdKernel::new(*p, Pass::Momentum, false);
                // Both passes block by block, so the second finds the block's buffer,
                // gradient and parameter still in cache: one trip through memory, not two.
                let flat = |t: &Tensor| t.flatten_all().ctx(OP);
                let (b, g, w) = (flat(buf)?, flat(grad)?, flat(param)?);
                let n = w.elem_count();
                for start in (0..n).step_by(SGD_BLOCK) {
                    let len = SGD_BLOCK.min(n - start);
                    let block = |t: &Tensor| t.narrow(0, start, len).ctx(OP);
                    let (b, g, w) = (block(&b)?, block(&g)?, block(&w)?);
                    b.inplace_op3(&g, &w, &momentum).ctx(OP)?;
                    w.inplace_op3(&g, &b, &update).ctx(OP)?;
                }
                return Ok((param.clone(), Some(buf.clone()), update.finite()));
            }
            // The first step's buffer is the (weight-decayed) gradient, as in PyTorch.
            None => Some(if p.weight_decay != 0.0 {
                (grad + (param * p.weight_decay).ctx(OP)?).ctx(OP)?
            } else {
                grad.copy().ctx(OP)?
            }),
        }
    };
    let step_src = buf.as_ref().unwrap_or(grad);
    let has_buf = buf.is_some();
    let update = SgdKernel::new(*p, Pass::Param { has_buf }, check);
    param.inplace_op3(grad, step_src, &update).ctx(OP)?;
    Ok((param.clone(), buf, update.finite()))
}

/// The contiguous data of one in-place operand.
fn slice_of<'a, T: candle_core::WithDType>(
    s: &'a candle_core::CpuStorage,
    l: &candle_core::Layout,
) -> candle_core::Result<&'a [T]> {
    let (start, end) = l.contiguous_offsets().ok_or_else(|| {
        candle_core::Error::Msg("sgd: in-place operands must be contiguous".into())
    })?;
    Ok(&s.as_slice::<T>()?[start..end])
}

/// Runs `f` on the mutable destination and two sources of an in-place op, as f32 or f64.
macro_rules! in_place_float {
    ($dst:expr, $dst_l:expr, $srcs:expr, |$d:ident, $a:ident, $b:ident, $t:ident| $body:block) => {{
        let [(s1, l1), (s2, l2)] = $srcs;
        let (start, end) = $dst_l.contiguous_offsets().ok_or_else(|| {
            candle_core::Error::Msg("sgd: in-place operands must be contiguous".into())
        })?;
        match $dst {
            candle_core::CpuStorage::F32(v) => {
                type $t = f32;
                let $d = &mut v[start..end];
                let $a = slice_of::<f32>(s1, l1)?;
                let $b = slice_of::<f32>(s2, l2)?;
                $body
            }
            candle_core::CpuStorage::F64(v) => {
                type $t = f64;
                let $d = &mut v[start..end];
                let $a = slice_of::<f64>(s1, l1)?;
                let $b = slice_of::<f64>(s2, l2)?;
                $body
            }
            _ => candle_core::bail!("sgd: in-place kernels exist for f32 and f64 only"),
        }
        Ok(())
    }};
}

/// Elements per block of the blocked two-pass momentum update (1 MiB of f32 per operand:
/// the three operands of a block fit the L2 caches of two cores).
const SGD_BLOCK: usize = 1 << 18;

/// One pass of the in-place SGD update; sources are [grad, second] as the variant says.
#[derive(Clone, Copy)]
enum Pass {
    /// `buf = momentum*buf + (1 - dampening)*(grad + weight_decay*param)`; destination the
    /// buffer, sources [grad, param].
    Momentum,
    /// `param -= lr * step`, where `step` is the buffer (nesterov: d + momentum*buffer) or,
    /// without momentum, `d = grad + weight_decay*param`; destination the parameter, sources
    /// [grad, buffer or grad].
    Param {
        /// Whether the second source is a momentum buffer.
        has_buf: bool,
    },
}

/// A float's magnitude as bits: a float is not finite exactly when its exponent bits are
/// all ones, so the largest magnitude's bits say whether a slice holds a NaN or an
/// infinity (a vectorised integer maximum).
trait MagnitudeBits: Float {
    type Bits: Ord + Copy + Default;
    /// The smallest magnitude that is not finite: infinity's bits.
    const INFINITY: Self::Bits;
    fn magnitude_bits(self) -> Self::Bits;
}

impl MagnitudeBits for f32 {
    type Bits = u32;
    const INFINITY: u32 = 0x7f80_0000;
    #[inline(always)]
    fn magnitude_bits(self) -> u32 {
        self.to_bits() & 0x7fff_ffff
    }
}

impl MagnitudeBits for f64 {
    type Bits = u64;
    const INFINITY: u64 = 0x7ff0_0000_0000_0000;
    #[inline(always)]
    fn magnitude_bits(self) -> u64 {
        self.to_bits() & 0x7fff_ffff_ffff_ffff
    }
}

/// Whether a value of `values` is NaN or infinite.
fn any_non_finite<T: MagnitudeBits>(values: &[T]) -> bool {
    let top = values.iter().map(|v| v.magnitude_bits()).max();
    top.unwrap_or_default() >= T::INFINITY
}

/// `param -= lr * buf`, element by element, checking each result in the same loop; true
/// when one is not finite.
fn step_checked<T: MagnitudeBits>(param: &mut [T], buf: &[T], lr: T) -> bool {
    let mut top = T::Bits::default();
    for (w, &b) in param.iter_mut().zip(buf) {
        *w -= lr * b;
        top = top.max(w.magnitude_bits());
    }
    top >= T::INFINITY
}

/// The in-place SGD kernel: one [`Pass`] with the settings it needs. With `check`, the
/// parameter pass looks at each chunk it wrote, still in the core's cache, and notes a
/// NaN or an infinity in `non_finite`.
struct SgdKernel {
    params: SgdParams,
    pass: Pass,
    check: bool,
    non_finite: std::sync::atomic::AtomicBool,
}

impl SgdKernel {
    fn new(params: SgdParams, pass: Pass, check: bool) -> Self {
        SgdKernel {
            params,
            pass,
            check,
            non_finite: Default::default(),
        }
    }

    /// What the parameter passes run so far found.
    fn finite(&self) -> FiniteCheck {
        match (self.check, self.non_finite.load(Ordering::Relaxed)) {
            (false, _) => FiniteCheck::Unchecked,
            (true, false) => FiniteCheck::Finite,
            (true, true) => FiniteCheck::NonFinite,
        }
    }
}

impl candle_core::InplaceOp3 for SgdKernel {
    fn name(&self) -> &'static str {
        match self.pass {
            Pass::Momentum => "sgd-momentum",
            Pass::Param { .. } => "sgd-param",
        }
    }

    fn cpu_fwd(
        &self,
        dst: &mut candle_core::CpuStorage,
        dst_l: &candle_core::Layout,
        s1: &candle_core::CpuStorage,
        l1: &candle_core::Layout,
        s2: &candle_core::CpuStorage,
        l2: &candle_core::Layout,
    ) -> candle_core::Result<()> {
        let srcs = [(s1, l1), (s2, l2)];
        let (p, pass, check) = (self.params, self.pass, self.check);
        let note = |bad: bool| {
            if bad {
                self.non_finite.store(true, Ordering::Relaxed);
            }
        };
        in_place_float!(dst, dst_l, srcs, |dst, grad, second, T| {
            let (lr, m, damp, wd) = (
                p.lr as T,
                p.momentum as T,
                (1.0 - p.dampening) as T,
                p.weight_decay as T,
            );
            let has_buf = match pass {
                Pass::Momentum => {
                    let param = second;
                    for_chunks(dst, grad, param, |buf, g, w| {
                        *buf = m * *buf + damp * (g + wd * w)
                    });
                    return Ok(());
                }
                Pass::Param { has_buf } => has_buf,
            };
            let buf = second;
            if has_buf && !p.nesterov {
                // Plain momentum steps by the buffer alone: the gradient is not read.
                dst.par_chunks_mut(CHUNK)
                    .zip(buf.par_chunks(CHUNK))
                    .for_each(|(param, buf)| {
                        if check {
                            note(step_checked(param, buf, lr));
                        } else {
                            for (w, b) in param.iter_mut().zip(buf) {
                                *w -= lr * *b;
                            }
                        }
                    });
                return Ok(());
            }
            dst.par_chunks_mut(CHUNK)
                .zip(grad.par_chunks(CHUNK))
                .zip(buf.par_chunks(CHUNK))
                .for_each(|((param, grad), buf)| {
                    for ((w, g), b) in param.iter_mut().zip(grad).zip(buf) {
                        let d = g + wd * *w;
                        let step = match (has_buf, p.nesterov) {
                            (false, _) => d,
                            (true, false) => *b,
                            (true, true) => d + m * b,
                        };
                        *w -= lr * step;
                    }
                    if check {
                        note(any_non_finite(param));
                    }
                });
        })
    }
}

/// `f(dst[i], a[i], b[i])` for every element, in parallel chunks.
fn for_chunks<T: Copy + Send + Sync>(
    dst: &mut [T],
    a: &[T],
    b: &[T],
    f: impl Fn(&mut T, T, T) + Sync,
) {
    dst.par_chunks_mut(CHUNK)
        .zip(a.par_chunks(CHUNK))
        .zip(b.par_chunks(CHUNK))
        .for_each(|((dst, a), b)| {
            for ((d, a), b) in dst.iter_mut().zip(a).zip(b) {
                f(d, *a, *b);
            }
        });
}

#[cfg(test)]
mod tests {
    use candle_core::{DType, Device, Tensor};

    use super::*;

    /// The checked update finds a NaN or an infinity it writes on every CPU path (plain,
    /// first momentum step, blocked momentum step; f32 and f64), anywhere in a parameter
    /// larger than one block, and updates exactly as the unchecked one.
    #[test]
    fn the_checked_update_notes_what_it_writes_on_every_path() {
        let n = SGD_BLOCK + 1000;
        for dtype in [DType::F32, DType::F64] {
            for momentum in [0.0, 0.9] {
                for at in [None, Some(3), Some(n - 1)] {
                    let p = SgdParams {
                        lr: 0.1,
                        momentum,
                        weight_decay: 1e-4,
                        ..Default::default()
                    };
                    let mut g = vec![1.0f64; n];
                    if let Some(i) = at {
                        g[i] = f64::INFINITY;
                    }
                    let grad = Tensor::from_vec(g, n, &Device::Cpu).unwrap();
                    let grad = grad.to_dtype(dtype).unwrap();
                    let param = Tensor::ones(n, dtype, &Device::Cpu).unwrap();
                    let plain = param.copy().unwrap();
                    let (_, buf, first) =
                        sgd_step_in_place_checked(&param, &grad, None, &p).unwrap();
                    let (_, plain_buf) = sgd_step_in_place(&plain, &grad, None, &p).unwrap();
                    let expected = if at.is_some() {
                        FiniteCheck::NonFinite
                    } else {
                        FiniteCheck::Finite
                    };
                    assert_eq!(first, expected, "{dtype:?} momentum {momentum} at {at:?}");
                    if momentum == 0.0 {
                        continue;
                    }
                    // The blocked momentum step: the infinity enters through the gradient.
                    let (buf, plain_buf) = (buf.unwrap(), plain_buf.unwrap());
                    let (_, _, second) =
                        sgd_step_in_place_checked(&param, &grad, Some(&buf), &p).unwrap();
                    sgd_step_in_place(&plain, &grad, Some(&plain_buf), &p).unwrap();
                    assert_eq!(second, expected, "{dtype:?} second step at {at:?}");
                    let same = param
                        .to_dtype(DType::F64)
                        .unwrap()
                        .to_vec1::<f64>()
                        .unwrap()
                        .iter()
                        .zip(
                            plain
                                .to_dtype(DType::F64)
                                .unwrap()
                                .to_vec1::<f64>()
                                .unwrap(),
                        )
                        .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
                    assert!(same, "checked and unchecked updates differ");
                }
            }
        }
    }
}
