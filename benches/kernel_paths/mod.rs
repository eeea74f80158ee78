//! What the benches that set wick's CPU kernels against candle's device-generic ops share.

use criterion::{BenchmarkId, Criterion, Throughput};
use wick::ops::KernelPath;

/// Times `op` on wick's CPU kernel (`wick`) and on candle's device-generic ops (`candle`,
/// the path `KernelPath::Generic` forces), in one group whose throughput is `elements` per
/// run.
pub fn wick_and_candle<T>(
    c: &mut Criterion,
    name: String,
    elements: u64,
    op: &dyn Fn() -> wick::ops::Result<T>,
) {
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(elements));
    group.bench_function(BenchmarkId::from_parameter("wick"), |b| {
        b.iter(|| op().expect("runs"))
    });
    group.bench_function(BenchmarkId::from_parameter("candle"), |b| {
        b.iter(|| KernelPath::Generic.scope(|| op().expect("runs")))
    });
    group.finish();
}
