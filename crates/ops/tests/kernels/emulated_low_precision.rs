//! Issue #43: the bf16 and f16 variants of the element-wise and global-pooling CUDA
//! kernels, emulated. They
//! read 16-bit values into float, compute as the f32 kernels do and round once, so:
//! - the conversions are exact: every one of the 65,536 bit patterns of each type comes
//!   back unchanged through ReLU (NaN made quiet), and the residual add of 16-bit values
//!   rounds their float sum as the `half` crate and wick's CPU rounding do, subnormals,
//!   overflow and ties included, and LeakyReLU's float products round into the
//!   subnormals bit for bit as the `half` crate rounds them;
//! - each activation, forward and backward, is within one unit in the last place of the
//!   type of wick's f32 CPU kernel (plus the f32 kernels' 1e-6 where a tail cancels);
//! - global average pooling sums in float (within one unit of the f32 kernel) and its
//!   gradient divides in float and rounds once, bit for bit.

use wick_ops::activation::{self, Activation};
use wick_ops::bf16::{bf16_to_f32, round_to_bf16};
use wick_ops::gpu::emulated::ffi;
use wick_ops::gpu::Launch;

use super::emulated::{host, tensor, uniform, Buf, Elem};

impl Elem for u16 {
    const CANARY: u16 = 0xbeef;
    fn same_bits(self, other: u16) -> bool {
        self == other
    }
}

/// A 16-bit forward kernel: (x, y, n, slope), values as their bits.
type Unary16 = unsafe extern "C" fn(
    *const Launch,
    *mut std::ffi::c_char,
    std::ffi::c_ulong,
    *const u16,
    *mut u16,
    i64,
    f32,
) -> i32;
/// A 16-bit backward kernel: (grad_y, saved, grad_x, n, slope).
type Backward16 = unsafe extern "C" fn(
    *const Launch,
    *mut std::ffi::c_char,
    std::ffi::c_ulong,
    *const u16,
    *const u16,
    *mut u16,
    i64,
    f32,
) -> i32;
/// A 16-bit binary kernel: (a, b, y, n).
type Binary16 = unsafe extern "C" fn(
    *const Launch,
    *mut std::ffi::c_char,
    std::ffi::c_ulong,
    *const u16,
    *const u16,
    *mut u16,
    i64,
) -> i32;

/// One of the two 16-bit types: its conversions and its kernels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Half {
    Bf16,
    F16,
}

impl Half {
    pub(super) fn round(self, x: f32) -> u16 {
        match self {
            Half::Bf16 => round_to_bf16(x),
            Half::F16 => half::f16::from_f32(x).to_bits(),
        }
    }

    pub(super) fn value(self, bits: u16) -> f32 {
        match self {
            Half::Bf16 => bf16_to_f32(bits),
            Half::F16 => half::f16::from_bits(bits).to_f32(),
        }
    }

    /// A NaN's bits as the kernels write it: quiet.
    fn quiet(self, bits: u16) -> u16 {
        match self {
            Half::Bf16 => bits | 0x0040,
            Half::F16 => bits | 0x0200,
        }
    }

    /// The spacing of the type's values at `x` (its unit in the last place), at least the
    /// smallest subnormal's.
    pub(super) fn ulp(self, x: f32) -> f32 {
        let (mantissa_bits, smallest) = match self {
            Half::Bf16 => (7, f32::from_bits(1 << 16)),
            Half::F16 => (10, 2f32.powi(-24)),
        };
        let e = x.abs().max(f32::MIN_POSITIVE).log2().floor();
        2f32.powf(e - mantissa_bits as f32).max(smallest)
    }

    fn relu(self) -> Unary16 {
        match self {
            Half::Bf16 => ffi::wick_emu_relu_forward_bf16,
            Half::F16 => ffi::wick_emu_relu_forward_f16,
        }
    }

    fn add(self) -> Binary16 {
        match self {
            Half::Bf16 => ffi::wick_emu_add_bf16,
            Half::F16 => ffi::wick_emu_add_f16,
        }
    }

    fn activation(self, kind: Activation) -> (Unary16, Backward16) {
        use Activation::*;
        macro_rules! pair {
            ($f:ident, $b:ident) => {
                (ffi::$f as Unary16, ffi::$b as Backward16)
            };
        }
        match (kind, self) {
            (Sigmoid, Half::Bf16) => pair!(
                wick_emu_sigmoid_forward_bf16,
                wick_emu_sigmoid_backward_bf16
            ),
            (Sigmoid, Half::F16) => {
                pair!(wick_emu_sigmoid_forward_f16, wick_emu_sigmoid_backward_f16)
            }
            (Tanh, Half::Bf16) => pair!(wick_emu_tanh_forward_bf16, wick_emu_tanh_backward_bf16),
            (Tanh, Half::F16) => pair!(wick_emu_tanh_forward_f16, wick_emu_tanh_backward_f16),
            (Silu, Half::Bf16) => pair!(wick_emu_silu_forward_bf16, wick_emu_silu_backward_bf16),
            (Silu, Half::F16) => pair!(wick_emu_silu_forward_f16, wick_emu_silu_backward_f16),
            (Gelu, Half::Bf16) => pair!(wick_emu_gelu_forward_bf16, wick_emu_gelu_backward_bf16),
            (Gelu, Half::F16) => pair!(wick_emu_gelu_forward_f16, wick_emu_gelu_backward_f16),
            (GeluTanh, Half::Bf16) => pair!(
                wick_emu_gelu_tanh_forward_bf16,
                wick_emu_gelu_tanh_backward_bf16
            ),
            (GeluTanh, Half::F16) => pair!(
                wick_emu_gelu_tanh_forward_f16,
                wick_emu_gelu_tanh_backward_f16
            ),
            (Relu6, Half::Bf16) => pair!(wick_emu_relu6_forward_bf16, wick_emu_relu6_backward_bf16),
            (Relu6, Half::F16) => pair!(wick_emu_relu6_forward_f16, wick_emu_relu6_backward_f16),
            (Hardswish, Half::Bf16) => pair!(
                wick_emu_hardswish_forward_bf16,
                wick_emu_hardswish_backward_bf16
            ),
            (Hardswish, Half::F16) => pair!(
                wick_emu_hardswish_forward_f16,
                wick_emu_hardswish_backward_f16
            ),
            (Hardsigmoid, Half::Bf16) => pair!(
                wick_emu_hardsigmoid_forward_bf16,
                wick_emu_hardsigmoid_backward_bf16
            ),
            (Hardsigmoid, Half::F16) => pair!(
                wick_emu_hardsigmoid_forward_f16,
                wick_emu_hardsigmoid_backward_f16
            ),
            (LeakyRelu, Half::Bf16) => pair!(
                wick_emu_leaky_relu_forward_bf16,
                wick_emu_leaky_relu_backward_bf16
            ),
            (LeakyRelu, Half::F16) => pair!(
                wick_emu_leaky_relu_forward_f16,
                wick_emu_leaky_relu_backward_f16
            ),
        }
    }
}

/// Runs `call` with the element-wise launch over `n` elements; the emulator's error fails
/// the test.
fn launch(n: usize, call: impl FnOnce(&Launch, *mut std::ffi::c_char, std::ffi::c_ulong) -> i32) {
    launch_with(Launch::elementwise(n), call)
}

fn unary(f: Unary16, x: &[u16], slope: f32) -> Vec<u16> {
    let (n, xb, mut y) = (x.len(), Buf::new("x", x), Buf::filled("y", x.len(), 0u16));
    // SAFETY: both buffers hold n values, as the kernel indexes.
    launch(n, |l, e, len| unsafe {
        f(l, e, len, xb.ptr(), y.mut_ptr(), n as i64, slope)
    });
    y.values()
}

fn backward(f: Backward16, g: &[u16], saved: &[u16], slope: f32) -> Vec<u16> {
    let n = g.len();
    let (gb, sb, mut dx) = (
        Buf::new("g", g),
        Buf::new("s", saved),
        Buf::filled("dx", n, 0u16),
    );
    // SAFETY: all three buffers hold n values.
    launch(n, |l, e, len| unsafe {
        f(l, e, len, gb.ptr(), sb.ptr(), dx.mut_ptr(), n as i64, slope)
    });
    dx.values()
}

fn binary(f: Binary16, a: &[u16], b: &[u16]) -> Vec<u16> {
    let n = a.len();
    let (ab, bb, mut y) = (
        Buf::new("a", a),
        Buf::new("b", b),
        Buf::filled("y", n, 0u16),
    );
    // SAFETY: all three buffers hold n values.
    launch(n, |l, e, len| unsafe {
        f(l, e, len, ab.ptr(), bb.ptr(), y.mut_ptr(), n as i64)
    });
    y.values()
}

#[test]
fn every_16_bit_value_survives_the_kernels_conversions() {
    let all: Vec<u16> = (0..=u16::MAX).collect();
    for kind in [Half::Bf16, Half::F16] {
        let y = unary(kind.relu(), &all, 0.0);
        for (&x, &y) in all.iter().zip(&y) {
            let v = kind.value(x);
            let expected = if v.is_nan() {
                kind.quiet(x)
            } else if v > 0.0 {
                x
            } else {
                0
            };
            assert_eq!(y, expected, "{kind:?} relu of {x:#06x} ({v:e})");
        }
    }
}

#[test]
fn a_16_bit_sum_rounds_its_float_sum_to_nearest_even() {
    let n = 100_003;
    for kind in [Half::Bf16, Half::F16] {
        // Random bit patterns (every exponent, subnormals, infinities and NaNs), pairs of
        // nearby values (cancellation into the subnormals), and the largest finite values
        // (overflow to infinity).
        let bits = |seed: u64| -> Vec<u16> {
            uniform(seed, n, 1.0)
                .iter()
                .map(|u| ((u + 1.0) * 32767.5) as u16)
                .collect()
        };
        let (mut a, mut b) = (bits(1), bits(2));
        for i in 0..n / 4 {
            b[i] = (a[i] ^ 0x8000).wrapping_add((i % 7) as u16);
        }
        let largest = kind.round(match kind {
            Half::Bf16 => f32::MAX,
            Half::F16 => 65504.0,
        });
        a[n - 1] = largest;
        b[n - 1] = largest;
        let y = binary(kind.add(), &a, &b);
        for i in 0..n {
            let sum = kind.value(a[i]) + kind.value(b[i]);
            let expected = if sum.is_nan() {
                kind.quiet(kind.round(sum))
            } else {
                kind.round(sum)
            };
            let same = y[i] == expected || (sum.is_nan() && kind.value(y[i]).is_nan());
            assert!(
                same,
                "{kind:?}: {:#06x} + {:#06x} gave {:#06x}, expected {expected:#06x}",
                a[i], b[i], y[i]
            );
        }
        assert!(kind.value(y[n - 1]).is_infinite(), "{kind:?}: overflow");
    }
}

#[test]
fn each_16_bit_activation_is_within_one_unit_of_the_f32_kernel() {
    let n = 4099;
    let slope = 0.01;
    for kind in [Half::Bf16, Half::F16] {
        let x: Vec<u16> = uniform(11, n, 8.0)
            .iter()
            .map(|&v| kind.round(v as f32))
            .collect();
        let g: Vec<u16> = uniform(12, n, 1.0)
            .iter()
            .map(|&v| kind.round(v as f32))
            .collect();
        let (xf, gf): (Vec<f32>, Vec<f32>) = (
            x.iter().map(|&b| kind.value(b)).collect(),
            g.iter().map(|&b| kind.value(b)).collect(),
        );
        for act in Activation::ALL {
            let (fwd, bwd) = kind.activation(act);
            let y = unary(fwd, &x, slope as f32);
            let expected =
                host::<f32>(&activation::forward(act, slope, &tensor(&xf, &[n])).unwrap());
            let within = |what: &str, got: &[u16], want: &[f32]| {
                for (i, (&b, &w)) in got.iter().zip(want).enumerate() {
                    let v = kind.value(b);
                    // One unit, plus the f32 kernels' own 1e-6 where a tail cancels in
                    // float (GELU's 1 + erf(x) below x = -4), as their test allows.
                    let ok = (v - w).abs() <= kind.ulp(w) + 1e-6 || (v.is_nan() && w.is_nan());
                    assert!(
                        ok,
                        "{kind:?} {act:?} {what}: element {i} is {v:e}, f32 kernel {w:e}"
                    );
                }
            };
            within("forward", &y, &expected);
            // The saved tensor as the graph keeps it: the 16-bit output or input.
            let saved = if act.backward_reads_output() { &y } else { &x };
            let saved_f: Vec<f32> = saved.iter().map(|&b| kind.value(b)).collect();
            let dx = backward(bwd, &g, saved, slope as f32);
            let expected = host::<f32>(
                &activation::backward(act, slope, &tensor(&gf, &[n]), &tensor(&saved_f, &[n]))
                    .unwrap(),
            );
            within("backward", &dx, &expected);
        }
    }
}

#[test]
fn products_round_to_nearest_even_into_the_subnormals() {
    // LeakyReLU's `x * slope` for every negative 16-bit x: float products of any bits,
    // scaled by powers of two into the type's subnormals (where ties are common) or not.
    let negative: Vec<u16> = (0x8001..=0xffff).collect();
    for kind in [Half::Bf16, Half::F16] {
        let (fwd, _) = kind.activation(Activation::LeakyRelu);
        for slope in [2f32.powi(-11), 2f32.powi(-13), 2f32.powi(-120), 3.0e-5, 0.3] {
            let y = unary(fwd, &negative, slope);
            for (&x, &y) in negative.iter().zip(&y) {
                let v = kind.value(x);
                let expected = if v.is_nan() {
                    kind.quiet(x)
                } else {
                    kind.round(v * slope)
                };
                assert_eq!(y, expected, "{kind:?}: {x:#06x} ({v:e}) times {slope:e}");
            }
        }
    }
}

#[test]
fn global_average_pooling_sums_16_bit_planes_in_float() {
    for kind in [Half::Bf16, Half::F16] {
        let (fwd, bwd) = match kind {
            Half::Bf16 => (
                ffi::wick_emu_global_avg_pool_forward_bf16 as Pool16,
                ffi::wick_emu_global_avg_pool_backward_bf16 as Pool16Backward,
            ),
            Half::F16 => (
                ffi::wick_emu_global_avg_pool_forward_f16 as Pool16,
                ffi::wick_emu_global_avg_pool_backward_f16 as Pool16Backward,
            ),
        };
        for shape in [[1, 1, 1, 1], [2, 3, 7, 7], [3, 5, 33, 31], [1, 2048, 7, 7]] {
            let n: usize = shape.iter().product();
            let (planes, hw) = (shape[0] * shape[1], shape[2] * shape[3]);
            let x: Vec<u16> = uniform(21, n, 3.0)
                .iter()
                .map(|&v| kind.round(v as f32))
                .collect();
            let xf: Vec<f32> = x.iter().map(|&b| kind.value(b)).collect();
            let (xb, mut y) = (Buf::new("x", &x), Buf::filled("y", planes, 0u16));
            launch_with(Launch::global_avg_pool(planes), |l, e, len| unsafe {
                // SAFETY: x holds planes * hw values and y planes, as the kernel indexes.
                fwd(l, e, len, xb.ptr(), y.mut_ptr(), planes as i64, hw as i32)
            });
            let expected =
                host::<f32>(&wick_ops::pool::global_avg_pool(&tensor(&xf, &shape)).unwrap());
            for (i, (&b, &w)) in y.values().iter().zip(&expected).enumerate() {
                let v = kind.value(b);
                assert!(
                    (v - w).abs() <= kind.ulp(w),
                    "{kind:?} {shape:?} plane {i}: {v:e}, f32 {w:e}"
                );
            }
            // Backward: each gradient over its plane, divided in float and rounded once.
            let g: Vec<u16> = uniform(22, planes, 1.0)
                .iter()
                .map(|&v| kind.round(v as f32))
                .collect();
            let (gb, mut dx) = (Buf::new("g", &g), Buf::filled("dx", n, 0u16));
            launch_with(Launch::elementwise(n), |l, e, len| unsafe {
                // SAFETY: g holds planes values and dx n, as the kernel indexes.
                bwd(l, e, len, gb.ptr(), dx.mut_ptr(), n as i64, hw as i32)
            });
            for (i, &b) in dx.values().iter().enumerate() {
                let expected = kind.round(kind.value(g[i / hw]) / hw as f32);
                assert_eq!(b, expected, "{kind:?} {shape:?} backward element {i}");
            }
        }
    }
}

/// A 16-bit global pooling kernel: forward (x, y, planes, hw), backward (grad_y, grad_x,
/// total, hw).
type Pool16 = unsafe extern "C" fn(
    *const Launch,
    *mut std::ffi::c_char,
    std::ffi::c_ulong,
    *const u16,
    *mut u16,
    i64,
    i32,
) -> i32;
type Pool16Backward = Pool16;

/// Runs `call` with `launch`; the emulator's error fails the test.
pub(super) fn launch_with(
    launch: Launch,
    call: impl FnOnce(&Launch, *mut std::ffi::c_char, std::ffi::c_ulong) -> i32,
) {
    let mut error = [0 as std::ffi::c_char; wick_ops::gpu::emulated::ERROR_LEN];
    let code = call(&launch, error.as_mut_ptr(), error.len() as _);
    wick_ops::gpu::emulated::result(code, &error).unwrap();
}
