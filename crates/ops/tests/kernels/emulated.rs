//! The CUDA kernels of `crates/ops/cuda`, run on the CPU by the emulator (feature
//! `emulate`, which wick-ops' tests turn on) with the launch configuration
//! [`wick_ops::gpu::Launch`] computes, against wick's CPU kernels. Every buffer has guard
//! zones either side that must come back untouched, so an index past the end fails too.
//! This file: the harness, element-wise kernels, global average pooling and
//! cross-entropy. The emulator's own checks, batch norm, the optimizers and the PyTorch
//! fixtures have their own files.

use candle_core::{DType, Device, Tensor};
use wick_ops::activation::{self, Activation};
use wick_ops::emulate;
use wick_ops::gpu::emulated::ffi;
use wick_ops::gpu::Launch;

/// Guard elements either side of a buffer: more than a whole optimizer chunk, so even a
/// chunk that runs past its tensor writes into the guard, not into other memory.
const GUARD: usize = wick_ops::gpu::CHUNK_LEN + 3;

/// Element types the buffers hold, with a canary bit pattern for the guard zones.
pub trait Elem: Copy + PartialEq + std::fmt::Debug {
    const CANARY: Self;
    fn same_bits(self, other: Self) -> bool;
}
impl Elem for f32 {
    const CANARY: f32 = f32::from_bits(0x7fc0_beef);
    fn same_bits(self, other: f32) -> bool {
        self.to_bits() == other.to_bits()
    }
}
impl Elem for f64 {
    const CANARY: f64 = f64::from_bits(0x7ff8_0000_dead_beef);
    fn same_bits(self, other: f64) -> bool {
        self.to_bits() == other.to_bits()
    }
}
impl Elem for i64 {
    const CANARY: i64 = 0x0dea_dbee_f0de_adbe;
    fn same_bits(self, other: i64) -> bool {
        self == other
    }
}
impl Elem for u32 {
    const CANARY: u32 = 0xdead_beef;
    fn same_bits(self, other: u32) -> bool {
        self == other
    }
}

/// A "device" buffer: its values between two guard zones of canaries.
pub struct Buf<T: Elem> {
    data: Vec<T>,
    len: usize,
    name: &'static str,
}

impl<T: Elem> Buf<T> {
    pub fn new(name: &'static str, values: &[T]) -> Buf<T> {
        let mut data = vec![T::CANARY; values.len() + 2 * GUARD];
        data[GUARD..GUARD + values.len()].copy_from_slice(values);
        Buf {
            data,
            len: values.len(),
            name,
        }
    }

    pub fn filled(name: &'static str, n: usize, value: T) -> Buf<T> {
        Buf::new(name, &vec![value; n])
    }

    pub fn ptr(&self) -> *const T {
        self.data[GUARD..].as_ptr()
    }

    pub fn mut_ptr(&mut self) -> *mut T {
        self.data[GUARD..].as_mut_ptr()
    }

    /// The values, after checking that nothing was written outside them.
    pub fn values(&self) -> Vec<T> {
        let (head, rest) = self.data.split_at(GUARD);
        let tail = &rest[self.len..];
        for (side, zone) in [("before", head), ("after", tail)] {
            if let Some(i) = zone.iter().position(|v| !v.same_bits(T::CANARY)) {
                panic!(
                    "{}: a kernel wrote {:?} {side} the buffer (guard element {i})",
                    self.name, zone[i]
                );
            }
        }
        rest[..self.len].to_vec()
    }
}

/// The values of a tensor (any shape) as f32 or f64.
pub fn host<T: candle_core::WithDType>(t: &Tensor) -> Vec<T> {
    t.flatten_all().unwrap().to_vec1::<T>().unwrap()
}

/// Deterministic values in [-scale, scale) (xorshift).
pub fn uniform(seed: u64, n: usize, scale: f64) -> Vec<f64> {
    wick_ops::compare::uniform(seed, n)
        .into_iter()
        .map(|v| v * scale)
        .collect()
}

pub fn f32s(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

pub fn tensor<T: candle_core::WithDType>(v: &[T], shape: &[usize]) -> Tensor {
    Tensor::from_slice(v, shape, &Device::Cpu).unwrap()
}

/// Asserts `actual` equals `expected` within `abs + rel * |expected|` per element, with
/// NaN where and only where `expected` has NaN.
pub fn assert_near<T: Into<f64> + Copy>(
    what: &str,
    actual: &[T],
    expected: &[T],
    rel: f64,
    abs: f64,
) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        let (a, e): (f64, f64) = (a.into(), e.into());
        let ok = if e.is_nan() {
            a.is_nan()
        } else if e.is_infinite() {
            a == e
        } else {
            (a - e).abs() <= abs + rel * e.abs()
        };
        assert!(ok, "{what}: element {i} is {a:e}, expected {e:e}");
    }
}

// ---- element-wise ----

/// An activation's forward kernel in element type `T`: (x, y, n, slope).
pub type Unary<T> = unsafe extern "C" fn(
    *const Launch,
    *mut std::ffi::c_char,
    std::ffi::c_ulong,
    *const T,
    *mut T,
    i64,
    T,
) -> i32;
/// An activation's backward kernel: (grad_y, saved, grad_x, n, slope).
pub type Backward<T> = unsafe extern "C" fn(
    *const Launch,
    *mut std::ffi::c_char,
    std::ffi::c_ulong,
    *const T,
    *const T,
    *mut T,
    i64,
    T,
) -> i32;
type Unary32 = Unary<f32>;
type Backward32 = Backward<f32>;

fn kernels_of(kind: Activation) -> (Unary32, Backward32) {
    match kind {
        Activation::Sigmoid => (
            ffi::wick_emu_sigmoid_forward_f32,
            ffi::wick_emu_sigmoid_backward_f32,
        ),
        Activation::Tanh => (
            ffi::wick_emu_tanh_forward_f32,
            ffi::wick_emu_tanh_backward_f32,
        ),
        Activation::Silu => (
            ffi::wick_emu_silu_forward_f32,
            ffi::wick_emu_silu_backward_f32,
        ),
        Activation::Gelu => (
            ffi::wick_emu_gelu_forward_f32,
            ffi::wick_emu_gelu_backward_f32,
        ),
        Activation::GeluTanh => (
            ffi::wick_emu_gelu_tanh_forward_f32,
            ffi::wick_emu_gelu_tanh_backward_f32,
        ),
        Activation::Relu6 => (
            ffi::wick_emu_relu6_forward_f32,
            ffi::wick_emu_relu6_backward_f32,
        ),
        Activation::Hardswish => (
            ffi::wick_emu_hardswish_forward_f32,
            ffi::wick_emu_hardswish_backward_f32,
        ),
        Activation::Hardsigmoid => (
            ffi::wick_emu_hardsigmoid_forward_f32,
            ffi::wick_emu_hardsigmoid_backward_f32,
        ),
        Activation::LeakyRelu => (
            ffi::wick_emu_leaky_relu_forward_f32,
            ffi::wick_emu_leaky_relu_backward_f32,
        ),
    }
}

/// Runs one emulated kernel over `n` elements with the element-wise launch: `call` gets
/// the launch and the error buffer and returns the kernel's status.
fn run_elementwise(
    n: usize,
    call: impl FnOnce(&Launch, *mut std::ffi::c_char, std::ffi::c_ulong) -> i32,
) {
    let mut error = [0 as std::ffi::c_char; wick_ops::gpu::emulated::ERROR_LEN];
    let code = call(
        &Launch::elementwise(n),
        error.as_mut_ptr(),
        error.len() as _,
    );
    wick_ops::gpu::emulated::result(code, &error).unwrap();
}

/// Runs an activation's forward kernel on `x` with the element-wise launch.
pub fn call_unary<T: Elem + Default>(f: Unary<T>, x: &[T], slope: T) -> Vec<T> {
    let (xb, mut y) = (Buf::new("x", x), Buf::filled("y", x.len(), T::default()));
    let n = x.len();
    // SAFETY: both buffers hold n values, as the kernel indexes.
    run_elementwise(n, |l, e, len| unsafe {
        f(l, e, len, xb.ptr(), y.mut_ptr(), n as i64, slope)
    });
    y.values()
}

/// Runs an activation's backward kernel with the element-wise launch.
pub fn call_backward<T: Elem + Default>(f: Backward<T>, g: &[T], saved: &[T], slope: T) -> Vec<T> {
    let n = g.len();
    let (gb, sb, mut dx) = (
        Buf::new("g", g),
        Buf::new("saved", saved),
        Buf::filled("dx", n, T::default()),
    );
    // SAFETY: all three buffers hold n values.
    run_elementwise(n, |l, e, len| unsafe {
        f(l, e, len, gb.ptr(), sb.ptr(), dx.mut_ptr(), n as i64, slope)
    });
    dx.values()
}

/// Inputs with the kinks and specials of every activation, then uniform values.
fn activation_inputs(n: usize, seed: u64) -> Vec<f32> {
    let special = [
        0.0,
        -0.0,
        -3.0,
        3.0,
        6.0,
        -6.0,
        1e-30,
        f32::NAN,
        30.0,
        -30.0,
    ];
    let mut v = f32s(&uniform(seed, n, 8.0));
    for (slot, s) in v.iter_mut().zip(special) {
        *slot = s;
    }
    v
}

#[test]
fn emulated_activations_match_the_cpu_kernels() {
    // 1 element, one short of a block, a block, one past, and a grid of many blocks.
    for n in [1, 255, 256, 257, 100_003] {
        let x = activation_inputs(n, n as u64);
        let xt = tensor(&x, &[n]);
        let g = f32s(&uniform(7 + n as u64, n, 1.0));
        let gt = tensor(&g, &[n]);
        for kind in Activation::ALL {
            let slope = 0.01;
            let (fwd, bwd) = kernels_of(kind);
            let y = call_unary(fwd, &x, slope as f32);
            let expected = host::<f32>(&activation::forward(kind, slope, &xt).unwrap());
            // In float, as PyTorch's CUDA kernels: within a few ulp of the f64 value, and
            // 1e-6 absolute where a tail cancels (GELU-tanh's gradient near -4).
            assert_near(
                &format!("{kind:?} forward, n {n}"),
                &y,
                &expected,
                4e-6,
                1e-6,
            );
            let saved = if kind.backward_reads_output() { &y } else { &x };
            let saved_t = tensor(saved, &[n]);
            let dx = call_backward(bwd, &g, saved, slope as f32);
            let expected = host::<f32>(&activation::backward(kind, slope, &gt, &saved_t).unwrap());
            assert_near(
                &format!("{kind:?} backward, n {n}"),
                &dx,
                &expected,
                4e-6,
                1e-6,
            );
        }
        let y = call_unary(ffi::wick_emu_relu_forward_f32, &x, 0.0);
        assert_eq!(
            y.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            host::<f32>(&wick_ops::relu(&xt).unwrap())
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>(),
            "relu forward, n {n}"
        );
        let dx = call_backward(ffi::wick_emu_relu_backward_f32, &g, &x, 0.0);
        assert_eq!(
            dx,
            host::<f32>(&wick_ops::relu_backward(&gt, &xt).unwrap()),
            "relu backward, n {n}"
        );
    }
}

#[test]
fn emulated_add_and_add_relu_match_the_cpu_kernels() {
    for n in [1, 257, 70_001] {
        let (a, b) = (activation_inputs(n, 3), f32s(&uniform(4, n, 2.0)));
        let (at, bt) = (tensor(&a, &[n]), tensor(&b, &[n]));
        for (relu, expected) in [
            (false, wick_ops::add(&at, &bt).unwrap()),
            (true, wick_ops::elementwise::add_relu(&at, &bt).unwrap()),
        ] {
            let (ab, bb, mut y) = (
                Buf::new("a", &a),
                Buf::new("b", &b),
                Buf::filled("y", n, 0f32),
            );
            let launch = Launch::elementwise(n);
            let (a, b, y_ptr) = (ab.ptr(), bb.ptr(), y.mut_ptr());
            let result = if relu {
                emulate!(wick_emu_add_relu_f32(launch, a, b, y_ptr, n as i64))
            } else {
                emulate!(wick_emu_add_f32(launch, a, b, y_ptr, n as i64))
            };
            result.unwrap();
            let expected = host::<f32>(&expected);
            assert_eq!(
                y.values().iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                expected.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "add (relu {relu}), n {n}"
            );
        }
    }
}

// ---- global average pooling ----

#[test]
fn emulated_global_avg_pool_matches_the_cpu_kernel() {
    // A 1x1 plane, 7x7 planes, 1000+ channels, a plane wider than a warp, batch 1.
    for shape in [
        [1, 1, 1, 1],
        [2, 3, 7, 7],
        [1, 1001, 1, 1],
        [3, 5, 33, 31],
        [1, 2048, 7, 7],
    ] {
        let n: usize = shape.iter().product();
        let planes = shape[0] * shape[1];
        let hw = shape[2] * shape[3];
        let x = f32s(&uniform(11, n, 3.0));
        let xt = tensor(&x, &shape);
        let (xb, mut y) = (Buf::new("x", &x), Buf::filled("y", planes, 0f32));
        let launch = Launch::global_avg_pool(planes);
        emulate!(wick_emu_global_avg_pool_forward_f32(
            launch,
            xb.ptr(),
            y.mut_ptr(),
            planes as i64,
            hw as i32
        ))
        .unwrap();
        let expected = host::<f32>(&wick_ops::pool::global_avg_pool(&xt).unwrap());
        assert_near(
            &format!("forward {shape:?}"),
            &y.values(),
            &expected,
            2e-6,
            1e-7,
        );
        let g = f32s(&uniform(12, planes, 1.0));
        let gt = tensor(&g, &[shape[0], shape[1], 1, 1]);
        let (gb, mut dx) = (Buf::new("g", &g), Buf::filled("dx", n, 0f32));
        emulate!(wick_emu_global_avg_pool_backward_f32(
            Launch::elementwise(n),
            gb.ptr(),
            dx.mut_ptr(),
            n as i64,
            hw as i32
        ))
        .unwrap();
        let expected = host::<f32>(&wick_ops::pool::global_avg_pool_backward(&gt, &shape).unwrap());
        assert_near(
            &format!("backward {shape:?}"),
            &dx.values(),
            &expected,
            1e-6,
            0.0,
        );
    }
}

// ---- cross-entropy ----

/// Defines `$name(logits, labels, classes, grad_loss) -> (loss, grad_logits)`: the
/// forward (row losses, their mean) and backward by the emulated kernels of one dtype, with
/// the launches wick computes. `$t` is the tensors' element type (u16 for bf16 and f16
/// bits); the row losses and log-sum-exps take the kernels' accumulator type.
macro_rules! cross_entropy_kernels {
    ($name:ident, $t:ty, $rows:ident, $mean:ident, $backward:ident) => {
        pub fn $name(logits: &[$t], labels: &[u32], classes: usize, grad: $t) -> ($t, Vec<$t>) {
            let rows = labels.len();
            let (lb, yb) = (Buf::new("logits", logits), Buf::new("labels", labels));
            let mut row_loss = Buf::filled("row_loss", rows, Default::default());
            let mut lse = Buf::filled("lse", rows, Default::default());
            let (n, k) = (rows as i32, classes as i32);
            let launch = Launch::cross_entropy_rows(rows, classes);
            let (l, y) = (lb.ptr(), yb.ptr());
            emulate!($rows(launch, l, y, row_loss.mut_ptr(), lse.mut_ptr(), n, k)).unwrap();
            let mut loss = Buf::filled("loss", 1, <$t>::default());
            let one = Launch::single_block();
            emulate!($mean(one, row_loss.ptr(), loss.mut_ptr(), n)).unwrap();
            let gb = Buf::new("grad_loss", &[grad]);
            let mut dx = Buf::filled("dx", logits.len(), <$t>::default());
            let (each, g, d) = (Launch::elementwise(logits.len()), gb.ptr(), dx.mut_ptr());
            emulate!($backward(each, l, y, lse.ptr(), g, d, n, k)).unwrap();
            row_loss.values();
            (loss.values()[0], dx.values())
        }
    };
}
pub(crate) use cross_entropy_kernels;
cross_entropy_kernels!(
    cross_entropy_emulated,
    f32,
    wick_emu_cross_entropy_rows_f32,
    wick_emu_cross_entropy_mean_f32,
    wick_emu_cross_entropy_backward_f32
);
cross_entropy_kernels!(
    cross_entropy_emulated_f64,
    f64,
    wick_emu_cross_entropy_rows_f64,
    wick_emu_cross_entropy_mean_f64,
    wick_emu_cross_entropy_backward_f64
);

#[test]
fn emulated_cross_entropy_matches_the_cpu() {
    // One class, ten, 1000 and 1001 (past one block's threads), batch 1 to 9000 rows
    // (past the grid's 4096 blocks, so blocks take several rows).
    for (rows, classes) in [(1, 1), (3, 10), (2, 1000), (5, 1001), (9_000, 4)] {
        let logits = f32s(&uniform(21, rows * classes, 6.0));
        let labels: Vec<u32> = (0..rows).map(|i| ((i * 7919) % classes) as u32).collect();
        let (lt, yt) = (tensor(&logits, &[rows, classes]), tensor(&labels, &[rows]));
        let (loss, dx) = cross_entropy_emulated(&logits, &labels, classes, 0.75);
        let expected = wick_ops::cross_entropy(&lt, &yt)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert_near(
            &format!("loss {rows}x{classes}"),
            &[loss],
            &[expected],
            2e-6,
            1e-7,
        );
        let grad = Tensor::new(0.75f32, &Device::Cpu).unwrap();
        let expected = host::<f32>(&wick_ops::cross_entropy_backward(&grad, &lt, &yt).unwrap());
        assert_near(
            &format!("gradient {rows}x{classes}"),
            &dx,
            &expected,
            2e-5,
            1e-9,
        );
    }
}

#[test]
fn emulated_cross_entropy_never_reads_past_a_row_for_a_bad_label() {
    let logits = f32s(&uniform(5, 2 * 3, 1.0));
    let (loss, dx) = cross_entropy_emulated(&logits, &[1, 3], 3, 1.0);
    assert!(
        loss.is_nan(),
        "a label outside 0..3 makes the loss NaN, got {loss}"
    );
    // The bad row's gradient is its softmax over 2 (no one-hot), the good row's sums to 0.
    let row: f32 = dx[3..].iter().sum();
    assert!((row - 0.5).abs() < 1e-6, "{dx:?}");
    assert!(dx[..3].iter().sum::<f32>().abs() < 1e-6, "{dx:?}");
    let _ = DType::F32;
}
