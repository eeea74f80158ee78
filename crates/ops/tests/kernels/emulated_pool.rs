//! The windowed pooling kernels of `src/pool/kernels.cu` (max and average, forward and
//! backward), emulated, against wick's CPU kernels:
//! - f32 and f64: max pooling's values, indices and gradient bit for bit (the backward
//!   gathers each input's gradients in the order the CPU kernel adds them), average
//!   pooling within the summation order's rounding;
//! - bf16 and f16 (issue #43): max pooling picks the same element as the f32 kernel on the
//!   widened values, its gradient is the f32 kernel's rounded once, and average pooling is
//!   within one unit in the last place of the f32 kernel's.
//!
//! The cases cover padding, strides, non-square windows, overlapping windows, ties (values
//! on a coarse grid) and a NaN and -inf in a window.

use wick_ops::emulate;
use wick_ops::gpu::Launch;
use wick_ops::pool::{self, Pool2dParams, PoolKind};

use super::emulated::{host, tensor, uniform, Buf, Elem};
use super::emulated_low_precision::Half;

/// One dtype's four pooling kernels through the emulator, on one case.
trait PoolKernels {
    type Elem: Elem + Default;
    /// Max pooling's output and indices.
    fn max_forward(c: &Case, x: &[Self::Elem]) -> (Vec<Self::Elem>, Vec<u32>);
    /// Max pooling's input gradient from the output gradient `g` and the indices.
    fn max_backward(c: &Case, g: &[Self::Elem], idx: &[u32]) -> Vec<Self::Elem>;
    /// Average pooling forward (`backward == false`, from the input) or backward (from the
    /// output gradient).
    fn avg_pass(c: &Case, x: &[Self::Elem], backward: bool) -> Vec<Self::Elem>;
}

/// Implements [`PoolKernels`] for `$kernels` with the four emulated kernels of one dtype
/// (element type `$t`: u16 for bf16 and f16 bits). Every buffer holds what the kernel
/// indexes: the input's and the output's element counts of the case.
#[rustfmt::skip]
macro_rules! pool_kernels {
    ($kernels:ident, $t:ty, $max_fwd:ident, $max_bwd:ident, $avg_fwd:ident, $avg_bwd:ident) => {
        struct $kernels;
        impl PoolKernels for $kernels {
            type Elem = $t;
            fn max_forward(c: &Case, x: &[$t]) -> (Vec<$t>, Vec<u32>) {
                let (n, s) = (c.outputs(), c.sizes());
                let xb = Buf::new("x", x);
                let mut y = Buf::filled("y", n, <$t>::default());
                let mut idx = Buf::filled("idx", n, 0u32);
                let (yp, ip, len) = (y.mut_ptr(), idx.mut_ptr(), n as i64);
                emulate!($max_fwd(Launch::elementwise(n), xb.ptr(), yp, ip, len,
                    s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9])).unwrap();
                (y.values(), idx.values())
            }
            fn max_backward(c: &Case, g: &[$t], idx: &[u32]) -> Vec<$t> {
                let (n, s) = (c.inputs(), c.sizes());
                let (gb, ib) = (Buf::new("grad_y", g), Buf::new("indices", idx));
                let mut dx = Buf::filled("dx", n, <$t>::default());
                let (dp, len) = (dx.mut_ptr(), n as i64);
                emulate!($max_bwd(Launch::elementwise(n), gb.ptr(), ib.ptr(), dp, len,
                    s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9])).unwrap();
                dx.values()
            }
            fn avg_pass(c: &Case, x: &[$t], backward: bool) -> Vec<$t> {
                let (n, s) = (if backward { c.inputs() } else { c.outputs() }, c.sizes());
                let xb = Buf::new("x", x);
                let mut out = Buf::filled("out", n, <$t>::default());
                let (launch, xp, op, len) =
                    (Launch::elementwise(n), xb.ptr(), out.mut_ptr(), n as i64);
                match backward {
                    false => emulate!($avg_fwd(launch, xp, op, len,
                        s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9])),
                    true => emulate!($avg_bwd(launch, xp, op, len,
                        s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9])),
                }
                .unwrap();
                out.values()
            }
        }
    };
}
pool_kernels!(
    F32,
    f32,
    wick_emu_max_pool_fwd_f32,
    wick_emu_max_pool_bwd_f32,
    wick_emu_avg_pool_fwd_f32,
    wick_emu_avg_pool_bwd_f32
);
pool_kernels!(
    F64,
    f64,
    wick_emu_max_pool_fwd_f64,
    wick_emu_max_pool_bwd_f64,
    wick_emu_avg_pool_fwd_f64,
    wick_emu_avg_pool_bwd_f64
);
pool_kernels!(
    Bf16,
    u16,
    wick_emu_max_pool_fwd_bf16,
    wick_emu_max_pool_bwd_bf16,
    wick_emu_avg_pool_fwd_bf16,
    wick_emu_avg_pool_bwd_bf16
);
pool_kernels!(
    F16,
    u16,
    wick_emu_max_pool_fwd_f16,
    wick_emu_max_pool_bwd_f16,
    wick_emu_avg_pool_fwd_f16,
    wick_emu_avg_pool_bwd_f16
);

/// One pooling case: input shape and window settings.
struct Case {
    shape: [usize; 4],
    p: Pool2dParams,
}

impl Case {
    fn new(shape: [usize; 4], kernel: [usize; 2], stride: [usize; 2], padding: [usize; 2]) -> Case {
        Case {
            shape,
            p: Pool2dParams {
                kernel,
                stride,
                padding,
            },
        }
    }

    fn inputs(&self) -> usize {
        self.shape.iter().product()
    }

    fn output_shape(&self) -> [usize; 4] {
        self.p.output_shape(PoolKind::Max, &self.shape).unwrap()
    }

    fn outputs(&self) -> usize {
        self.output_shape().iter().product()
    }

    /// The ten `int` sizes the kernels take after their own arguments: H, W, OH, OW, kh,
    /// kw, sh, sw, ph, pw.
    fn sizes(&self) -> [i32; 10] {
        let ([_, _, h, w], [_, _, oh, ow], p) = (self.shape, self.output_shape(), &self.p);
        let v = [
            h,
            w,
            oh,
            ow,
            p.kernel[0],
            p.kernel[1],
            p.stride[0],
            p.stride[1],
        ];
        let [a, b, c, d, e, f, g, k] = v.map(|x| x as i32);
        [
            a,
            b,
            c,
            d,
            e,
            f,
            g,
            k,
            p.padding[0] as i32,
            p.padding[1] as i32,
        ]
    }
}

fn cases() -> Vec<Case> {
    vec![
        // ResNet's stem pool: 3x3, stride 2, padding 1, odd sizes.
        Case::new([2, 3, 7, 9], [3, 3], [2, 2], [1, 1]),
        Case::new([1, 2, 8, 8], [2, 2], [2, 2], [0, 0]),
        // Overlapping windows: every input in up to nine of them.
        Case::new([2, 2, 5, 6], [3, 3], [1, 1], [1, 1]),
        // A non-square window, stride and padding.
        Case::new([1, 3, 6, 11], [2, 3], [1, 2], [1, 1]),
        Case::new([3, 4, 13, 11], [3, 3], [2, 2], [0, 0]),
        Case::new([1, 1, 4, 4], [4, 4], [4, 4], [2, 2]),
    ]
}

/// Inputs on a grid of quarters in [-2, 2), so that windows hold ties; with `specials`, a
/// NaN and a -inf in the first plane.
fn pool_inputs(n: usize, seed: u64, specials: bool) -> Vec<f32> {
    let mut v: Vec<f32> = uniform(seed, n, 2.0)
        .iter()
        .map(|&x| ((x * 4.0).floor() / 4.0) as f32)
        .collect();
    if specials && n > 6 {
        v[3] = f32::NAN;
        v[6] = f32::NEG_INFINITY;
    }
    v
}

/// wick's CPU kernels on `x` (f32 or f64): max output, indices, max input gradient from
/// `g`, average output, average input gradient from `g`.
struct Cpu<T> {
    max: Vec<T>,
    indices: Vec<u32>,
    max_grad: Vec<T>,
    avg: Vec<T>,
    avg_grad: Vec<T>,
}

fn cpu<T: candle_core::WithDType>(c: &Case, x: &[T], g: &[T]) -> Cpu<T> {
    let (xt, gt) = (tensor(x, &c.shape), tensor(g, &c.output_shape()));
    let m = pool::max_pool2d(&xt, &c.p).unwrap();
    let max_grad = pool::max_pool2d_backward(&gt, &m.indices, &c.shape, &c.p).unwrap();
    Cpu {
        max: host(&m.y),
        indices: host(&m.indices),
        max_grad: host(&max_grad),
        avg: host(&pool::avg_pool2d(&xt, &c.p).unwrap()),
        avg_grad: host(&pool::avg_pool2d_backward(&gt, &c.shape, &c.p).unwrap()),
    }
}

/// Bit patterns equal, NaN matching NaN.
fn same_values<T: Into<f64> + Copy>(what: &str, actual: &[T], expected: &[T]) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        let (a, e): (f64, f64) = (a.into(), e.into());
        let same = (a.is_nan() && e.is_nan()) || a.to_bits() == e.to_bits();
        assert!(same, "{what}: element {i} is {a:e}, expected {e:e}");
    }
}

fn check_float<K: PoolKernels>(to: fn(f32) -> K::Elem, avg_rel: f64)
where
    K::Elem: Into<f64> + candle_core::WithDType,
{
    for (ci, c) in cases().iter().enumerate() {
        let name = format!("{:?} {:?}", c.shape, c.p);
        let x: Vec<K::Elem> = pool_inputs(c.inputs(), 40 + ci as u64, ci == 0)
            .into_iter()
            .map(to)
            .collect();
        let g: Vec<K::Elem> = pool_inputs(c.outputs(), 60 + ci as u64, false)
            .into_iter()
            .map(to)
            .collect();
        let want = cpu(c, &x, &g);
        let (y, idx) = K::max_forward(c, &x);
        same_values(&format!("max {name}"), &y, &want.max);
        assert_eq!(idx, want.indices, "max indices {name}");
        let dx = K::max_backward(c, &g, &idx);
        same_values(&format!("max grad {name}"), &dx, &want.max_grad);
        // Average pooling sums before dividing where the CPU kernel divides each term: the
        // two differ by rounding, relative to the inputs' scale (2) where terms cancel.
        let avg = K::avg_pass(c, &x, false);
        super::emulated::assert_near(
            &format!("avg {name}"),
            &avg,
            &want.avg,
            avg_rel,
            2.0 * avg_rel,
        );
        let avg_grad = K::avg_pass(c, &g, true);
        let what = format!("avg grad {name}");
        super::emulated::assert_near(&what, &avg_grad, &want.avg_grad, avg_rel, 2.0 * avg_rel);
    }
}

#[test]
fn emulated_windowed_pools_match_the_cpu_kernels() {
    check_float::<F32>(|v| v, 1e-6);
    check_float::<F64>(|v| v as f64, 1e-14);
}

/// The 16-bit kernels `K` of `kind` against the f32 CPU kernels on the widened values.
fn check_half<K: PoolKernels<Elem = u16>>(kind: Half) {
    for (ci, c) in cases().iter().enumerate() {
        let name = format!("{kind:?} {:?} {:?}", c.shape, c.p);
        let bits = |v: Vec<f32>| -> Vec<u16> { v.iter().map(|&x| kind.round(x * 1.37)).collect() };
        let x = bits(pool_inputs(c.inputs(), 80 + ci as u64, ci == 0));
        let g = bits(pool_inputs(c.outputs(), 90 + ci as u64, false));
        let widen = |b: &[u16]| -> Vec<f32> { b.iter().map(|&h| kind.value(h)).collect() };
        let want = cpu(c, &widen(&x), &widen(&g));
        // Max pooling copies an element: the f32 kernel's choice, exactly.
        let (y, idx) = K::max_forward(c, &x);
        same_values(&format!("max {name}"), &widen(&y), &want.max);
        assert_eq!(idx, want.indices, "max indices {name}");
        // Its gradient: the same float sums, rounded once.
        let dx = K::max_backward(c, &g, &idx);
        let rounded: Vec<u16> = want.max_grad.iter().map(|&v| kind.round(v)).collect();
        assert_eq!(dx, rounded, "max grad {name}");
        for (what, got, f32s) in [
            ("avg", K::avg_pass(c, &x, false), &want.avg),
            ("avg grad", K::avg_pass(c, &g, true), &want.avg_grad),
        ] {
            for (i, (&b, &w)) in got.iter().zip(f32s.iter()).enumerate() {
                // One unit of the type, plus the f32 reference's own rounding where terms
                // of the inputs' scale (2.74) cancel.
                let v = kind.value(b);
                let bound = kind.ulp(w) + 1e-6 * 2.74;
                let ok = (v.is_nan() && w.is_nan()) || v == w || (v - w).abs() <= bound;
                assert!(ok, "{what} {name} element {i}: {v:e}, f32 {w:e}");
            }
        }
    }
}

#[test]
fn sixteen_bit_pools_compare_and_sum_in_float() {
    check_half::<Bf16>(Half::Bf16);
    check_half::<F16>(Half::F16);
}
