//! Scaled dot-product attention, forward + backward, f32, `[batch 2, heads 8, T, 64]`:
//! wick's fused kernel (`fused`: tiles and an online softmax, O(T) memory per head)
//! against the unfused ops (`unfused`: candle's matmul and softmax over the T×T scores,
//! the path `KernelPath::Generic` forces), plain and causal. The side-by-side with
//! PyTorch's `F.scaled_dot_product_attention` is `scripts/compare_attention.sh`.
//!
//! `cargo bench --bench attention` (`-- fused/causal` to filter).

use std::time::Duration;

use candle_core::{Device, Tensor};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use wick::ops::attention::{
    scaled_dot_product_attention, scaled_dot_product_attention_backward, Attention,
};
use wick::ops::KernelPath;

/// Transparent huge pages under every big block (see `wick::allocator`).
#[global_allocator]
static ALLOC: wick::allocator::HugePageAlloc = wick::allocator::HugePageAlloc;

fn step(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    g: &Tensor,
    a: &Attention,
) -> wick::ops::Result<Tensor> {
    let y = scaled_dot_product_attention(q, k, v, None, a, 0)?;
    Ok(scaled_dot_product_attention_backward(q, k, v, &y, g, None, a, 0)?.q)
}

fn bench(c: &mut Criterion) {
    wick::allocator::keep_freed_memory();
    let mut group = c.benchmark_group("attention");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1));
    for t in [256usize, 1024] {
        let shape = (2, 8, t, 64);
        let r = |seed: u64| {
            let _ = seed;
            Tensor::randn(0f32, 1.0, shape, &Device::Cpu).expect("input")
        };
        let (q, k, v, g) = (r(0), r(1), r(2), r(3));
        for causal in [false, true] {
            let a = Attention {
                scale: 0.125,
                causal,
                dropout_p: 0.0,
                seed: 0,
            };
            let mask = if causal { "causal" } else { "plain" };
            for (name, path) in [
                ("fused", KernelPath::Auto),
                ("unfused", KernelPath::Generic),
            ] {
                group.bench_with_input(
                    BenchmarkId::new(format!("{name}/{mask}"), t),
                    &t,
                    |bch, _| {
                        bch.iter(|| path.scope(|| step(&q, &k, &v, &g, &a)).expect("attention"))
                    },
                );
            }
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
