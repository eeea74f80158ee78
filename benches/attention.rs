//! Scaled dot-product attention, forward + backward, f32, `[batch 2, heads 8, T, 64]`:
//! wick's fused kernel (`fused`: tiles and an online softmax, O(T) memory per head)
//! against the unfused ops (`unfused`: candle's matmul and softmax over the T×T scores,
//! the path `KernelPath::Generic` forces), plain and causal, at T = 256 and 1024
//! (`WICK_ATTENTION_T=4096` for others). `scripts/compare_pytorch.sh` runs it beside
//! PyTorch's `F.scaled_dot_product_attention` (cases `attention_t1024`, ...).
//!
//! `cargo bench --bench attention` (`-- '^attention/fused/causal'` to filter).

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
    let sizes = std::env::var("WICK_ATTENTION_T").unwrap_or_else(|_| "256,1024".into());
    let sizes: Vec<usize> = sizes
        .split(',')
        .map(|t| {
            t.trim()
                .parse()
                .expect("WICK_ATTENTION_T: comma-separated sequence lengths")
        })
        .collect();
    for t in sizes {
        let shape = (2, 8, t, 64);
        let r = || Tensor::randn(0f32, 1.0, shape, &Device::Cpu).expect("input");
        let (q, k, v, g) = (r(), r(), r(), r());
        for causal in [false, true] {
            let a = Attention {
                scale: 0.125,
                causal,
                dropout_p: 0.0,
                seed: 0,
                products: Default::default(),
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
