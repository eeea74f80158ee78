//! Issue #43: the bf16 and f16 multi-tensor optimizer updates (crates/ops/cuda/optimizer.cu),
//! emulated: parameters, gradients and state are read into float, updated as wick's f32
//! per-tensor step updates them, and each stored value is rounded once, so each is within
//! one unit in the last place of the type of the f32 step's on the widened values. A
//! parameter is flagged non-finite when its stored value is: an f16 update past 65504.

use wick_ops::gpu::emulated::ffi;
use wick_ops::gpu::{ChunkTable, Launch, CHUNK_LEN};
use wick_ops::optim::{adam_step, sgd_step, AdamParams, SgdParams};

use super::emulated::{host, tensor, uniform, Buf};
use super::emulated_low_precision::{launch_with, Half};

/// Tensor sizes: one, one past a chunk, empty, several chunks.
const SIZES: [usize; 4] = [1, CHUNK_LEN + 1, 0, 2 * CHUNK_LEN + 5];

/// One role's tensors (parameters, gradients, a state) as 16-bit buffers.
struct Role {
    kind: Half,
    bufs: Vec<Buf<u16>>,
}

impl Role {
    /// `uniform(seed) * scale + shift` per tensor, rounded to `kind`.
    fn draw(kind: Half, name: &'static str, seed: u64, scale: f64, shift: f64) -> Role {
        let bufs = SIZES
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let v: Vec<u16> = uniform(seed + i as u64, n, scale)
                    .iter()
                    .map(|&x| kind.round((x + shift) as f32))
                    .collect();
                Buf::new(name, &v)
            })
            .collect();
        Role { kind, bufs }
    }

    fn pointers(&mut self) -> Vec<*mut u16> {
        self.bufs.iter_mut().map(|b| b.mut_ptr()).collect()
    }

    fn read_only(&mut self) -> Vec<*const u16> {
        self.pointers()
            .into_iter()
            .map(|p| p as *const u16)
            .collect()
    }

    /// Tensor `i`'s values, widened to f32, as a candle tensor.
    fn tensor(&self, i: usize) -> candle_core::Tensor {
        let v: Vec<f32> = self.bufs[i]
            .values()
            .iter()
            .map(|&b| self.kind.value(b))
            .collect();
        tensor(&v, &[v.len()])
    }

    /// Checks tensor `i` against the f32 values of `want`: within one unit of the type.
    fn check(&self, what: &str, i: usize, want: &candle_core::Tensor) {
        let want = host::<f32>(want);
        for (j, (&b, &w)) in self.bufs[i].values().iter().zip(&want).enumerate() {
            let v = self.kind.value(b);
            let ok = v == w || (v - w).abs() <= self.kind.ulp(w) + 1e-7;
            assert!(
                ok,
                "{:?} {what} tensor {i} element {j}: {v:e}, f32 {w:e}",
                self.kind
            );
        }
    }
}

#[test]
fn sixteen_bit_sgd_updates_in_float_and_rounds_each_value_once() {
    let table = ChunkTable::new("sgd", &SIZES, CHUNK_LEN).unwrap();
    let p = SgdParams {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 5e-4,
        dampening: 0.0,
        nesterov: true,
    };
    for kind in [Half::Bf16, Half::F16] {
        let mut w = Role::draw(kind, "params", 1, 1.0, 0.0);
        let mut g = Role::draw(kind, "grads", 10, 1.0, 0.0);
        let mut b = Role::draw(kind, "momentum", 20, 0.5, 0.0);
        let expected: Vec<_> = (0..SIZES.len())
            .map(|i| sgd_step(&w.tensor(i), &g.tensor(i), Some(&b.tensor(i)), &p).unwrap())
            .collect();
        let (wp, gp, bp) = (w.pointers(), g.read_only(), b.pointers());
        let mut flags = Buf::filled("non_finite", SIZES.len(), 0u32);
        let (lr, m, d, wd) = (
            p.lr as f32,
            p.momentum as f32,
            p.dampening as f32,
            p.weight_decay as f32,
        );
        let args = (
            table.sizes.as_ptr(),
            table.tensor.as_ptr(),
            table.start.as_ptr(),
        );
        let (launch, chunks, len, f) = (
            Launch::multi_tensor(&table),
            table.chunks(),
            table.chunk_len,
            flags.mut_ptr(),
        );
        let sgd = match kind {
            Half::Bf16 => ffi::wick_emu_sgd_multi_tensor_bf16,
            Half::F16 => ffi::wick_emu_sgd_multi_tensor_f16,
        };
        let (wp, gp, bp) = (wp.as_ptr(), gp.as_ptr(), bp.as_ptr());
        launch_with(launch, |l, e, n| unsafe {
            // SAFETY: the pointer tables name buffers of the table's sizes.
            sgd(
                l, e, n, wp, gp, bp, args.0, args.1, args.2, chunks, len, lr, m, d, wd, 1, 0, f,
            )
        });
        assert_eq!(flags.values(), vec![0; SIZES.len()]);
        g.bufs.iter().for_each(|b| drop(b.values()));
        for (i, (want_w, want_b)) in expected.iter().enumerate() {
            w.check("param", i, want_w);
            b.check("momentum", i, want_b.as_ref().unwrap());
        }
    }
}

#[test]
fn sixteen_bit_adam_updates_in_float_and_rounds_each_value_once() {
    let table = ChunkTable::new("adam", &SIZES, CHUNK_LEN).unwrap();
    let step = 3;
    for p in [AdamParams::adam(1e-2), AdamParams::adamw(1e-2)] {
        let k = p.step_constants(step);
        for kind in [Half::Bf16, Half::F16] {
            let mut w = Role::draw(kind, "params", 1, 1.0, 0.0);
            let mut g = Role::draw(kind, "grads", 10, 1.0, 0.0);
            let mut m = Role::draw(kind, "exp_avg", 20, 0.3, 0.0);
            // A second moment holds squares: positive.
            let mut v = Role::draw(kind, "exp_avg_sq", 30, 0.1, 0.2);
            let expected: Vec<_> = (0..SIZES.len())
                .map(|i| {
                    let (mi, vi) = (m.tensor(i), v.tensor(i));
                    adam_step(&w.tensor(i), &g.tensor(i), Some(&mi), Some(&vi), step, &p).unwrap()
                })
                .collect();
            let (wp, gp, mp, vp) = (w.pointers(), g.read_only(), m.pointers(), v.pointers());
            let mut flags = Buf::filled("non_finite", SIZES.len(), 0u32);
            let args = (
                table.sizes.as_ptr(),
                table.tensor.as_ptr(),
                table.start.as_ptr(),
            );
            let (launch, chunks, len) = (
                Launch::multi_tensor(&table),
                table.chunks(),
                table.chunk_len,
            );
            let (decay, decoupled, b2) = (k.decay as f32, k.decoupled as i32, k.beta2 as f32);
            let (omb1, omb2, eps) = (
                k.one_minus_beta1 as f32,
                k.one_minus_beta2 as f32,
                k.eps as f32,
            );
            let (ss, b2s, f) = (k.step_size as f32, k.bias2_sqrt as f32, flags.mut_ptr());
            let adam = match kind {
                Half::Bf16 => ffi::wick_emu_adam_multi_tensor_bf16,
                Half::F16 => ffi::wick_emu_adam_multi_tensor_f16,
            };
            let (wp, gp, mp, vp) = (wp.as_ptr(), gp.as_ptr(), mp.as_ptr(), vp.as_ptr());
            let constants = (decay, decoupled, b2, omb1, omb2, eps, ss, b2s);
            launch_with(launch, |l, e, n| unsafe {
                // SAFETY: the pointer tables name buffers of the table's sizes.
                let (d, dc, b2, o1, o2, eps, ss, b2s) = constants;
                let tables = (args.0, args.1, args.2);
                adam(
                    l, e, n, wp, gp, mp, vp, tables.0, tables.1, tables.2, chunks, len, d, dc, b2,
                    o1, o2, eps, ss, b2s, f,
                )
            });
            assert_eq!(flags.values(), vec![0; SIZES.len()]);
            for (i, (want_w, want_m, want_v)) in expected.iter().enumerate() {
                w.check(&format!("{p:?} param"), i, want_w);
                m.check(&format!("{p:?} exp_avg"), i, want_m);
                v.check(&format!("{p:?} exp_avg_sq"), i, want_v);
            }
        }
    }
}

#[test]
fn an_f16_parameter_rounded_past_65504_is_flagged() {
    // 65000 + 1000 is finite in float and infinite in f16.
    let sizes = [2usize, 3];
    let table = ChunkTable::new("sgd", &sizes, CHUNK_LEN).unwrap();
    let h = |x: f32| half::f16::from_f32(x).to_bits();
    let (mut w0, mut w1) = (
        Buf::new("w0", &[h(1.0), h(2.0)]),
        Buf::new("w1", &[h(1.0), h(65000.0), h(3.0)]),
    );
    let (g0, g1) = (
        Buf::new("g0", &[h(0.5), h(0.5)]),
        Buf::new("g1", &[h(0.5), h(-1000.0), h(0.5)]),
    );
    let wp = [w0.mut_ptr(), w1.mut_ptr()];
    let gp = [g0.ptr(), g1.ptr()];
    let mut flags = Buf::filled("non_finite", 2, 0u32);
    let args = (
        table.sizes.as_ptr(),
        table.tensor.as_ptr(),
        table.start.as_ptr(),
    );
    let (sgd, null) = (ffi::wick_emu_sgd_multi_tensor_f16, std::ptr::null());
    let (wp, gp, f) = (wp.as_ptr(), gp.as_ptr(), flags.mut_ptr());
    let (chunks, len) = (table.chunks(), table.chunk_len);
    launch_with(Launch::multi_tensor(&table), |l, e, n| unsafe {
        // SAFETY: the pointer tables name the two buffers of `sizes`; no momentum buffer.
        sgd(
            l, e, n, wp, gp, null, args.0, args.1, args.2, chunks, len, 1.0, 0., 0., 0., 0, 1, f,
        )
    });
    assert_eq!(flags.values(), [0, 1]);
    assert_eq!(w1.values()[1], h(f32::INFINITY));
    assert_eq!(w0.values(), [h(0.5), h(1.5)]);
}
