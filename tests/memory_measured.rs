//! Issue #29: the profiler's measured memory per op, with wick's counting allocator as
//! this test binary's global allocator (one test in the file, so no other test thread
//! allocates while it runs).

use candle_core::{DType, Device, Tensor};
use wick::graph::{Executor, GraphBuilder, Mode};
use wick::ops::Conv2dParams;
use wick::profiler::TimeProfiler;
use wick::profiler::{RecordLevel, Schedule};

#[global_allocator]
static ALLOC: wick::allocator::HugePageAlloc = wick::allocator::HugePageAlloc;

#[test]
fn each_op_has_its_measured_entry_peak_and_exit_and_the_trace_draws_them() {
    // One worker thread: GEMM libraries keep a per-thread packing buffer that a thread
    // allocates on its first GEMM. With several threads, a worker that first joins in a
    // timed iteration would show that buffer as memory the op kept; with one, the skipped
    // iterations make it.
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap()
        .install(measure_two_ops);
}

fn measure_two_ops() {
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let x = b.input("x", &[1, 16, 64, 64], DType::F32).unwrap();
    let w = b.param("w", &[16, 16, 3, 3]).unwrap();
    let params = Conv2dParams {
        padding: [1, 1],
        ..Default::default()
    };
    let y = b
        .in_layer("conv", |b| b.conv2d(x, w, None, params))
        .unwrap();
    let y = b.in_layer("act", |b| b.relu(y)).unwrap();
    b.output(y);
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    let schedule = Schedule::skip(2);
    exec.add_hook(
        TimeProfiler::with_schedule(schedule, RecordLevel::PerOp)
            .with_memory_counter(Box::new(wick::allocator::Counter)),
    )
    .unwrap();
    exec.set(
        "x",
        &Tensor::ones((1, 16, 64, 64), DType::F32, &Device::Cpu).unwrap(),
    )
    .unwrap();
    exec.set(
        "w",
        &Tensor::ones((16, 16, 3, 3), DType::F32, &Device::Cpu).unwrap(),
    )
    .unwrap();
    for _ in 0..4 {
        exec.run().unwrap();
    }
    let p = exec.hook::<TimeProfiler>().unwrap().profile();
    let activation = 16 * 64 * 64 * 4u64;
    let (conv, relu) = (p.ops[0].memory.unwrap(), p.ops[1].memory.unwrap());
    // Each op leaves its output allocated: one activation more than at its start, plus
    // the few hundred bytes of the tensor's own bookkeeping (the ReLU's input is still
    // live: the graph frees it after the op).
    for m in [conv, relu] {
        let grew = m.exit_bytes - m.entry_bytes;
        assert!((activation..activation + 4096).contains(&grew), "{m:?}");
    }
    // The 3x3 convolution unfolds its input (im2col): a workspace above both ends.
    assert!(conv.workspace_bytes() > 0, "{conv:?}");
    assert!(relu.peak_bytes >= relu.exit_bytes);
    let m = p.memory.clone().unwrap();
    assert_eq!(m.ops.len(), 2);
    let categories = m.categories();
    assert_eq!(categories.len(), 3);
    assert_eq!(categories[2].measured, conv.workspace_bytes());
    assert!(m.measured_peak_bytes.unwrap() >= conv.peak_bytes);
    let text = p.to_string();
    assert!(
        text.contains("Memory prediction against measurement"),
        "{text}"
    );
    let trace = p.chrome_trace().unwrap();
    assert_eq!(
        trace.matches("live memory (measured)").count(),
        2 * 2 * 2,
        "two ops, two timed iterations, two marks each"
    );
}
