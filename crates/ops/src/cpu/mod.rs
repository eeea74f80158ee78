//! Access to the data of CPU tensors, for wick's own CPU kernels.

use candle_core::{DType, Device, Shape, Storage, Tensor, WithDType};

use crate::error::{CandleContext, OpError, Result};
use crate::route::{route, Route};

mod gemm;
pub(crate) use gemm::{check_operands, gemm_strided, gemm_uninit, SendPtr};

/// The float types wick's CPU kernels are written for (f32 and f64).
pub(crate) trait Float:
    WithDType
    + Copy
    + Send
    + Sync
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Neg<Output = Self>
    + std::ops::AddAssign
    + std::ops::SubAssign
    + std::ops::MulAssign
    + std::iter::Sum
    + 'static
{
    const ZERO: Self;
    const ONE: Self;
    const NEG_INFINITY: Self;
    fn is_nan(self) -> bool;
    /// `eˣ`; in f32 branch-free, so that loops over it vectorize (within 1 ulp).
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn sqrt(self) -> Self;
    fn abs(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    /// C's `pow` (a negative base with an integer exponent has a real value).
    fn powf(self, p: Self) -> Self;
}

/// `fn f(self) -> Self` for each `f`, as the standard library's method of that name.
macro_rules! std_methods {
    ($t:ident: $($f:ident),*) => {$(
        #[inline(always)]
        fn $f(self) -> Self {
            $t::$f(self)
        }
    )*};
}

macro_rules! impl_float {
    ($($t:ident: $exp:path),*) => {$(
        impl Float for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const NEG_INFINITY: Self = $t::NEG_INFINITY;
            #[inline(always)]
            fn is_nan(self) -> bool {
                $t::is_nan(self)
            }
            #[inline(always)]
            fn exp(self) -> Self {
                $exp(self)
            }
            std_methods!($t: ln, sqrt, abs, sin, cos);
            #[inline(always)]
            fn powf(self, p: Self) -> Self {
                $t::powf(self, p)
            }
        }
    )*};
}
impl_float!(f32: crate::vector_math::exp_f32, f64: f64::exp);

/// Runs `f` compiled for the widest vector instructions this CPU has: AVX-512 (x86-64-v4),
/// else AVX2 + FMA (v3), else the baseline wick is built for (SSE2). Wick is built for any
/// x86-64, so its own loops otherwise only use 4-wide SSE; inlined into one of these
/// wrappers they use 16- or 8-wide registers. The same operations run in the same order
/// (Rust never fuses a multiply and an add on its own), so every path gives the same bits.
/// `f` must be a closure whose loops can inline (no indirect calls in the hot part).
#[inline(always)]
pub(crate) fn vectorized<R>(f: impl FnOnce() -> R) -> R {
    run_wide(Closure(f))
}

/// A closure as a [`WideKernel`], for [`vectorized`].
struct Closure<F>(F);

impl<R, F: FnOnce() -> R> WideKernel for Closure<F> {
    type Output = R;
    #[inline(always)]
    fn run(self) -> R {
        (self.0)()
    }
}

/// Work whose loops compile for the widest vector instructions this CPU has, as
/// [`vectorized`] chooses them. A closure's body is a function of its own that LLVM may
/// leave un-inlined (and so compiled for the baseline) inside the wide wrapper; a
/// `run` marked `#[inline(always)]` is always inlined there, so large kernels (a tile of
/// attention) vectorize too.
pub(crate) trait WideKernel {
    type Output;
    /// The work; implementations must be `#[inline(always)]`.
    fn run(self) -> Self::Output;
}

/// Runs `k` compiled for AVX-512, AVX2 + FMA or the baseline, as [`vectorized`].
#[inline(always)]
pub(crate) fn run_wide<K: WideKernel>(k: K) -> K::Output {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi1,bmi2")]
        fn v4<K: WideKernel>(k: K) -> K::Output {
            k.run()
        }
        #[target_feature(enable = "avx2,fma,bmi1,bmi2")]
        fn v3<K: WideKernel>(k: K) -> K::Output {
            k.run()
        }
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl")
        {
            // SAFETY: the CPU has every feature v4 enables (checked just above).
            return unsafe { v4(k) };
        }
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("bmi1")
            && std::arch::is_x86_feature_detected!("bmi2")
        {
            // SAFETY: the CPU has every feature v3 enables (checked just above).
            return unsafe { v3(k) };
        }
    }
    k.run()
}

/// Asks the CPU to start loading every cache line of `data` into its caches (x86-64; a
/// no-op elsewhere). For reads that jump between small blocks far apart (one channel's
/// planes of an NCHW tensor), where the hardware prefetchers, which follow streams
/// within a 4 KiB page, start cold at every block: issued one block ahead, the loads of
/// the next block overlap the work on this one.
#[inline(always)]
pub(crate) fn prefetch<T>(data: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        let bytes = std::mem::size_of_val(data);
        let start = data.as_ptr().cast::<i8>();
        for offset in (0..bytes).step_by(64) {
            // SAFETY: `offset < bytes`, so the address lies inside `data`; a prefetch
            // never faults and changes no program state.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    start.add(offset),
                )
            };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

/// Whether wick's CPU kernels run `t`: on the CPU by the routing rule, f32 or f64.
pub(crate) fn on_cpu_kernel(t: &Tensor) -> bool {
    route(t.device()) == Route::Cpu && matches!(t.dtype(), DType::F32 | DType::F64)
}

/// Runs `f` on the contiguous data of a CPU tensor (copying only if it is not contiguous).
pub(crate) fn with_slice<T: WithDType, R>(
    op: &'static str,
    t: &Tensor,
    f: impl FnOnce(&[T]) -> Result<R>,
) -> Result<R> {
    let t = t.contiguous().ctx(op)?;
    let (storage, layout) = t.storage_and_layout();
    match &*storage {
        Storage::Cpu(cpu) => {
            let data = cpu.as_slice::<T>().ctx(op)?;
            let start = layout.start_offset();
            f(&data[start..start + layout.shape().elem_count()])
        }
        _ => Err(OpError::Unsupported {
            op,
            what: format!(
                "a CPU kernel was asked to read a tensor on {:?}",
                t.device().location()
            ),
        }),
    }
}

/// [`with_slice`] on two tensors at once.
pub(crate) fn with_slices<T: WithDType, R>(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    f: impl FnOnce(&[T], &[T]) -> Result<R>,
) -> Result<R> {
    with_slice::<T, _>(op, a, |a| with_slice::<T, _>(op, b, |b| f(a, b)))
}

/// A kernel on the values of `a` and `b` whose result is a new tensor of `shape`.
pub(crate) fn from_slices<T: WithDType>(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    shape: impl Into<Shape>,
    f: impl FnOnce(&[T], &[T]) -> Result<Vec<T>>,
) -> Result<Tensor> {
    let values = with_slices::<T, _>(op, a, b, f)?;
    tensor(op, values, shape)
}

/// [`with_slice`] on an optional tensor: `f(None)` when there is none.
pub(crate) fn with_opt_slice<T: WithDType, R>(
    op: &'static str,
    t: Option<&Tensor>,
    f: impl FnOnce(Option<&[T]>) -> Result<R>,
) -> Result<R> {
    match t {
        Some(t) => with_slice::<T, _>(op, t, |s| f(Some(s))),
        None => f(None),
    }
}

/// An optional tensor's values, flattened (a norm's weight or bias).
pub(crate) fn opt_values<T: WithDType>(
    op: &'static str,
    t: Option<&Tensor>,
) -> Result<Option<Vec<T>>> {
    t.map(|t| t.flatten_all()?.to_vec1::<T>())
        .transpose()
        .ctx(op)
}

/// Wraps a vector as a CPU tensor of the given shape.
pub(crate) fn tensor<T: WithDType>(
    op: &'static str,
    data: Vec<T>,
    shape: impl Into<Shape>,
) -> Result<Tensor> {
    Tensor::from_vec(data, shape, &Device::Cpu).ctx(op)
}

/// Runs the f32 or f64 instance of a generic CPU kernel, by the dtype of `dtype`.
macro_rules! dispatch_float {
    ($op:expr, $dtype:expr, $($f:ident)::+ ( $($arg:expr),* $(,)? )) => {
        match $dtype {
            candle_core::DType::F32 => $($f)::+::<f32>($($arg),*),
            candle_core::DType::F64 => $($f)::+::<f64>($($arg),*),
            other => Err($crate::error::OpError::Unsupported {
                op: $op,
                what: format!("dtype {other:?} on the CPU (f32 and f64 are supported)"),
            }),
        }
    };
}
pub(crate) use dispatch_float;

/// Checks that every tensor has `dtype`.
pub(crate) fn same_dtype(
    op: &'static str,
    dtype: DType,
    tensors: &[(&str, &Tensor)],
) -> Result<()> {
    for (name, t) in tensors {
        if t.dtype() != dtype {
            return Err(crate::invalid!(
                op,
                "{name} has dtype {:?} but the op runs in {dtype:?}",
                t.dtype()
            ));
        }
    }
    Ok(())
}

/// Elements per parallel task of the element-wise CPU kernels.
pub(crate) const CHUNK: usize = 1 << 15;

/// `out[i] = f(a[i], b[i])` over two CPU tensors of one float dtype, in parallel chunks.
/// The output is written once, not zeroed first (a zeroing pass would cost as much memory
/// traffic as the kernel's own write).
pub(crate) fn zip_map<T: Float>(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(T, T) -> T + Sync,
) -> Result<Tensor> {
    use rayon::prelude::*;
    let len = a.elem_count();
    if b.elem_count() != len {
        return Err(crate::invalid!(
            op,
            "operands of shapes {:?} and {:?} differ in size",
            a.dims(),
            b.dims()
        ));
    }
    let mut out: Vec<T> = Vec::with_capacity(len);
    with_slice::<T, _>(op, a, |xa| {
        with_slice::<T, _>(op, b, |xb| {
            out.spare_capacity_mut()[..len]
                .par_chunks_mut(CHUNK)
                .zip(xa.par_chunks(CHUNK).zip(xb.par_chunks(CHUNK)))
                .for_each(|(o, (a, b))| {
                    vectorized(|| {
                        for ((o, a), b) in o.iter_mut().zip(a).zip(b) {
                            o.write(f(*a, *b));
                        }
                    })
                });
            Ok(())
        })
    })?;
    // SAFETY: `xa` and `xb` hold `len` elements each, so the chunks above wrote every one of
    // the `len` slots.
    unsafe { out.set_len(len) };
    tensor(op, out, a.dims())
}

/// `out[i] = f(a[i])` over one CPU tensor of a float dtype, in parallel chunks, reading
/// the input once and writing the output once.
pub(crate) fn map<T: Float>(
    op: &'static str,
    a: &Tensor,
    f: impl Fn(T) -> T + Sync,
) -> Result<Tensor> {
    use rayon::prelude::*;
    let len = a.elem_count();
    let mut out: Vec<T> = Vec::with_capacity(len);
    with_slice::<T, _>(op, a, |xa| {
        out.spare_capacity_mut()[..len]
            .par_chunks_mut(CHUNK)
            .zip(xa.par_chunks(CHUNK))
            .for_each(|(o, a)| {
                vectorized(|| {
                    for (o, a) in o.iter_mut().zip(a) {
                        o.write(f(*a));
                    }
                })
            });
        Ok(())
    })?;
    // SAFETY: `xa` holds `len` elements, so the chunks above wrote every one of the `len` slots.
    unsafe { out.set_len(len) };
    tensor(op, out, a.dims())
}

/// `Σ f(v)` over `values` in f64, in eight interleaved partial sums added at the end: a
/// fixed order (the same bits on every machine and thread count) that vectorizes,
/// where one running sum is a chain of dependent additions.
#[inline(always)]
pub(crate) fn sum_f64<T: Copy>(values: &[T], f: impl Fn(T) -> f64) -> f64 {
    let mut acc = [0f64; 8];
    let mut blocks = values.chunks_exact(8);
    for b in &mut blocks {
        for (a, v) in acc.iter_mut().zip(b) {
            *a += f(*v);
        }
    }
    for (a, v) in acc.iter_mut().zip(blocks.remainder()) {
        *a += f(*v);
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// How many worker threads wick's CPU kernels split work across.
pub(crate) fn threads() -> usize {
    rayon::current_num_threads().max(1)
}

/// Writes `value` into every slot and returns the slots as initialised values.
pub(crate) fn fill_slots<T: Copy>(slots: &mut [std::mem::MaybeUninit<T>], value: T) -> &mut [T] {
    for s in slots.iter_mut() {
        s.write(value);
    }
    // SAFETY: every slot was just written; MaybeUninit<T> has T's layout.
    unsafe { &mut *(slots as *mut [std::mem::MaybeUninit<T>] as *mut [T]) }
}

/// `slots` as initialised values.
///
/// # Safety
/// Every slot must have been written.
pub(crate) unsafe fn assume_init_mut<T>(slots: &mut [std::mem::MaybeUninit<T>]) -> &mut [T] {
    // SAFETY: the caller guarantees every slot is initialised; MaybeUninit<T> has T's layout.
    unsafe { &mut *(slots as *mut [std::mem::MaybeUninit<T>] as *mut [T]) }
}
