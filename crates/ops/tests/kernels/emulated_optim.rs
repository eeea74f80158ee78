//! The multi-tensor optimizer updates (crates/ops/cuda/optimizer.cu), emulated on the CPU
//! with the chunk table and launch wick computes, against wick's per-tensor updates.

use crate::emulated::{assert_near, f32s, host, tensor, uniform, Buf};
use candle_core::Tensor;
use wick_ops::emulate;
use wick_ops::gpu::{ChunkTable, Launch, CHUNK_LEN};
use wick_ops::optim::{adam_step, AdamParams};
use wick_ops::optim::{sgd_step, SgdParams};

/// Tensor sizes around the chunk length: 1, one short, exact, one past, empty, several.
const SIZES: [usize; 6] = [
    1,
    CHUNK_LEN - 1,
    CHUNK_LEN,
    CHUNK_LEN + 1,
    0,
    3 * CHUNK_LEN + 17,
];

/// Buffers per tensor, and the pointer table a launch takes.
struct Tensors {
    bufs: Vec<Buf<f32>>,
}

impl Tensors {
    fn new(name: &'static str, values: &[Vec<f32>]) -> Tensors {
        Tensors {
            bufs: values.iter().map(|v| Buf::new(name, v)).collect(),
        }
    }
    fn pointers(&mut self) -> Vec<*mut f32> {
        self.bufs.iter_mut().map(|b| b.mut_ptr()).collect()
    }
    fn values(&self) -> Vec<Vec<f32>> {
        self.bufs.iter().map(|b| b.values()).collect()
    }
}

fn draw(seed: u64, scale: f64) -> Vec<Vec<f32>> {
    SIZES
        .iter()
        .enumerate()
        .map(|(i, &n)| f32s(&uniform(seed + i as u64, n, scale)))
        .collect()
}

#[test]
fn emulated_sgd_updates_every_parameter_in_one_launch_as_the_per_tensor_step() {
    let table = ChunkTable::new("sgd", &SIZES, CHUNK_LEN).unwrap();
    let launch = Launch::multi_tensor(&table);
    for (momentum, nesterov, weight_decay, dampening) in [
        (0.0, false, 0.0, 0.0),
        (0.9, false, 1e-4, 0.0),
        (0.9, true, 5e-4, 0.0),
        (0.5, false, 0.0, 0.1),
    ] {
        let p = SgdParams {
            lr: 0.1,
            momentum,
            weight_decay,
            dampening,
            nesterov,
        };
        let (params, grads1, grads2) = (draw(1, 1.0), draw(10, 1.0), draw(20, 1.0));
        let mut pb = Tensors::new("params", &params);
        let mut bb = Tensors::new(
            "momentum",
            &SIZES.iter().map(|&n| vec![0f32; n]).collect::<Vec<_>>(),
        );
        let (tensor_of, start_of) = (table.tensor.clone(), table.start.clone());
        // Two steps: the first makes the momentum buffer, the second uses it.
        let mut expected: Vec<(Tensor, Option<Tensor>)> = params
            .iter()
            .map(|v| (tensor(v, &[v.len()]), None))
            .collect();
        for (step, grads) in [&grads1, &grads2].into_iter().enumerate() {
            let mut gb = Tensors::new("grads", grads);
            let (pp, bp) = (pb.pointers(), bb.pointers());
            let gp: Vec<*const f32> = gb.pointers().into_iter().map(|p| p as *const f32).collect();
            let mut flags = Buf::filled("non_finite", SIZES.len(), 0u32);
            emulate!(wick_emu_sgd_multi_tensor_f32(
                launch,
                pp.as_ptr(),
                gp.as_ptr(),
                bp.as_ptr(),
                table.sizes.as_ptr(),
                tensor_of.as_ptr(),
                start_of.as_ptr(),
                table.chunks(),
                table.chunk_len,
                p.lr as f32,
                p.momentum as f32,
                p.dampening as f32,
                p.weight_decay as f32,
                p.nesterov as i32,
                (step == 0) as i32,
                flags.mut_ptr()
            ))
            .unwrap();
            assert_eq!(flags.values(), vec![0; SIZES.len()]);
            gb.values();
            for (e, g) in expected.iter_mut().zip(grads.iter()) {
                let gt = tensor(g, &[g.len()]);
                let (w, b) = sgd_step(&e.0, &gt, e.1.as_ref(), &p).unwrap();
                *e = (w, b);
            }
        }
        for (i, (got, e)) in pb.values().iter().zip(&expected).enumerate() {
            let what = format!("param {i} ({} values), {p:?}", SIZES[i]);
            assert_near(&what, got, &host::<f32>(&e.0), 1e-6, 1e-7);
        }
        if momentum != 0.0 {
            for (i, (got, e)) in bb.values().iter().zip(&expected).enumerate() {
                assert_near(
                    &format!("buffer {i}, {p:?}"),
                    got,
                    &host::<f32>(e.1.as_ref().unwrap()),
                    1e-6,
                    1e-7,
                );
            }
        }
    }
}

#[test]
fn emulated_sgd_flags_only_the_parameter_that_became_non_finite() {
    let table = ChunkTable::new("sgd", &SIZES, CHUNK_LEN).unwrap();
    let mut params = draw(1, 1.0);
    params[3][CHUNK_LEN] = f32::MAX; // in the second chunk of tensor 3
    let mut grads = draw(2, 1.0);
    grads[3][CHUNK_LEN] = -f32::MAX;
    let (mut pb, mut gb) = (
        Tensors::new("params", &params),
        Tensors::new("grads", &grads),
    );
    let pp = pb.pointers();
    let gp: Vec<*const f32> = gb.pointers().into_iter().map(|p| p as *const f32).collect();
    let mut flags = Buf::filled("non_finite", SIZES.len(), 0u32);
    emulate!(wick_emu_sgd_multi_tensor_f32(
        Launch::multi_tensor(&table),
        pp.as_ptr(),
        gp.as_ptr(),
        std::ptr::null(),
        table.sizes.as_ptr(),
        table.tensor.as_ptr(),
        table.start.as_ptr(),
        table.chunks(),
        table.chunk_len,
        1.0,
        0.0,
        0.0,
        0.0,
        0,
        1,
        flags.mut_ptr()
    ))
    .unwrap();
    assert_eq!(flags.values(), [0, 0, 0, 1, 0, 0]);
    assert!(pb.values()[3][CHUNK_LEN].is_infinite());
}

#[test]
fn emulated_adam_and_adamw_update_every_parameter_in_one_launch_as_the_per_tensor_step() {
    let table = ChunkTable::new("adam", &SIZES, CHUNK_LEN).unwrap();
    let launch = Launch::multi_tensor(&table);
    for p in [
        AdamParams::adam(1e-2),
        AdamParams::adam(1e-2).with_weight_decay(1e-2),
        AdamParams::adamw(1e-2),
    ] {
        let params = draw(1, 1.0);
        let zeros: Vec<Vec<f32>> = SIZES.iter().map(|&n| vec![0f32; n]).collect();
        let (mut pb, mut mb, mut vb) = (
            Tensors::new("params", &params),
            Tensors::new("exp_avg", &zeros),
            Tensors::new("exp_avg_sq", &zeros),
        );
        let mut expected: Vec<(Tensor, Option<Tensor>, Option<Tensor>)> = params
            .iter()
            .map(|v| (tensor(v, &[v.len()]), None, None))
            .collect();
        for step in 1..=3u64 {
            let grads = draw(10 * step, 1.0);
            let mut gb = Tensors::new("grads", &grads);
            let (pp, mp, vp) = (pb.pointers(), mb.pointers(), vb.pointers());
            let gp: Vec<*const f32> = gb.pointers().into_iter().map(|p| p as *const f32).collect();
            let k = p.step_constants(step);
            let mut flags = Buf::filled("non_finite", SIZES.len(), 0u32);
            emulate!(wick_emu_adam_multi_tensor_f32(
                launch,
                pp.as_ptr(),
                gp.as_ptr(),
                mp.as_ptr(),
                vp.as_ptr(),
                table.sizes.as_ptr(),
                table.tensor.as_ptr(),
                table.start.as_ptr(),
                table.chunks(),
                table.chunk_len,
                k.decay as f32,
                k.decoupled as i32,
                k.beta2 as f32,
                k.one_minus_beta1 as f32,
                k.one_minus_beta2 as f32,
                k.eps as f32,
                k.step_size as f32,
                k.bias2_sqrt as f32,
                flags.mut_ptr()
            ))
            .unwrap();
            assert_eq!(flags.values(), vec![0; SIZES.len()]);
            for (e, g) in expected.iter_mut().zip(&grads) {
                let gt = tensor(g, &[g.len()]);
                let (w, m, v) = adam_step(&e.0, &gt, e.1.as_ref(), e.2.as_ref(), step, &p).unwrap();
                *e = (w, Some(m), Some(v));
            }
        }
        for (i, ((got, m), e)) in pb
            .values()
            .iter()
            .zip(mb.values())
            .zip(&expected)
            .enumerate()
        {
            let what = format!("tensor {i} ({} values), {p:?}", SIZES[i]);
            // The same constants and the same operations in the same order as the CPU
            // kernel: equal to rounding (the emulator's sqrt and division are the host's).
            assert_near(&what, got, &host::<f32>(&e.0), 1e-7, 1e-7);
            assert_near(&what, &m, &host::<f32>(e.1.as_ref().unwrap()), 1e-7, 1e-7);
        }
    }
}
