//! The emulator itself (crates/ops/cuda/emulator), on the deliberately wrong kernels of
//! `selftest.cu`: barriers every thread must reach, a missing barrier that shows, warps
//! that must be whole, CUDA's launch limits, per-block shared memory and real atomics.

use crate::emulated::Buf;
use wick_ops::emulate;
use wick_ops::gpu::{Launch, BLOCK};

#[test]
fn emulated_barriers_and_shuffles_are_enforced() {
    let mut out = Buf::<f32>::filled("out", 64, 0.0);
    let one_block = |threads| Launch {
        grid: [1, 1, 1],
        block: [threads, 1, 1],
    };
    // Half the block returns while the other half waits at __syncthreads.
    let err = emulate!(wick_emu_selftest_return_before_barrier(
        one_block(64),
        out.mut_ptr(),
        32
    ))
    .unwrap_err();
    assert!(
        err.contains("__syncthreads waits for thread (32,0,0)"),
        "{err}"
    );
    // When all reach it, the barrier publishes the writes.
    emulate!(wick_emu_selftest_return_before_barrier(
        one_block(64),
        out.mut_ptr(),
        64
    ))
    .unwrap();
    let v = out.values();
    assert!((0..64).all(|i| v[i] == ((i + 1) % 64) as f32));
    let (mut count, mut sums) = (
        Buf::<u32>::filled("count", 1, 0),
        Buf::<f32>::filled("sums", 1, 0.0),
    );
    let too_big = Launch {
        grid: [1, 70_000, 1],
        block: [32, 1, 1],
    };
    for (launch, refusal) in [
        // A block of 48 threads has an incomplete warp: shuffles there are refused.
        (one_block(48), "whole warps only"),
        // Launches past CUDA's limits are refused.
        (too_big, "past CUDA's limits"),
        (one_block(2048), "1024 threads"),
    ] {
        let err = emulate!(wick_emu_selftest_count(
            launch,
            count.mut_ptr(),
            sums.mut_ptr()
        ))
        .unwrap_err();
        assert!(err.contains(refusal), "{err}");
    }
}

#[test]
fn emulated_shared_memory_is_per_block_and_a_missing_barrier_shows() {
    let launch = Launch {
        grid: [8, 1, 1],
        block: [64, 1, 1],
    };
    let run = |barrier| {
        let mut out = Buf::<f32>::filled("out", 8 * 64, 0.0);
        emulate!(wick_emu_selftest_neighbour(launch, out.mut_ptr(), barrier)).unwrap();
        out.values()
    };
    let expected: Vec<f32> = (0..8 * 64)
        .map(|i| ((i / 64) * 1000 + (i % 64 + 1) % 64 + 1) as f32)
        .collect();
    assert_eq!(run(1), expected);
    // Without the barrier some thread reads its neighbour's slot before it is written.
    assert_ne!(run(0), expected);
}

#[test]
fn emulated_atomics_and_block_sums_are_exact_across_concurrent_blocks() {
    let blocks = 300u32;
    let (mut count, mut sums) = (
        Buf::<u32>::filled("count", 1, 0),
        Buf::<f32>::filled("sums", blocks as usize, 0.0),
    );
    let launch = Launch {
        grid: [blocks, 1, 1],
        block: [BLOCK, 1, 1],
    };
    emulate!(wick_emu_selftest_count(
        launch,
        count.mut_ptr(),
        sums.mut_ptr()
    ))
    .unwrap();
    assert_eq!(count.values(), [blocks * BLOCK]);
    let per_block = (0..BLOCK).sum::<u32>() as f32;
    assert!(sums.values().iter().all(|&s| s == per_block));
}
