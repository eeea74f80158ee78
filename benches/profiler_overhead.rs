//! The profiler's cost per training step, by CPU time and wall time. One session runs
//! blocks of steps with no profiler, with one at verbosity 1, at verbosity 2 (with the
//! memory counter), and with none again (the noise floor), the profiler attached before
//! its block and removed after it; the order rotates every round, and the medians of the
//! per-step costs are compared. One session in one process: neither the drift between
//! processes nor the placement of separate sessions' buffers (both several percent on a
//! shared machine) enters.
//!
//! `cargo bench --bench profiler_overhead` (`-- ROUNDS` to change the 9 rounds)

use std::time::Instant;

use candle_core::{Device, Tensor};
use wick::models::data::{BatchSource, SyntheticImages};
use wick::models::{ModelConfig, Session, Stem, TrainOptions, WeightInit};
use wick::ops::SgdParams;
use wick::profiler::{RecordLevel, Schedule, TimeProfiler};

/// Huge pages and the allocation counter the verbosity-2 profiler reads.
#[global_allocator]
static ALLOC: wick::allocator::HugePageAlloc = wick::allocator::HugePageAlloc;

/// This process's CPU seconds (user and system, every thread).
fn cpu_sec() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6;
    t(u.ru_utime) + t(u.ru_stime)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A training session of `config`.
fn session(config: ModelConfig, batch: usize, size: usize) -> Session {
    let sgd = SgdParams {
        lr: 0.01,
        momentum: 0.9,
        weight_decay: 5e-4,
        dampening: 0.0,
        nesterov: false,
    };
    let mut s = Session::training(config, batch, size, TrainOptions::from(sgd), &Device::Cpu)
        .expect("session");
    s.init_weights(WeightInit::Torchvision(0)).expect("init");
    s
}

/// Attaches a profiler at `verbosity` (0: none) to `s`.
fn attach(s: &mut Session, verbosity: u8) {
    if verbosity > 0 {
        let level = RecordLevel::from_verbosity(verbosity);
        let p = TimeProfiler::with_schedule(Schedule::skip(0), level)
            .with_memory_counter(Box::new(wick::allocator::Counter));
        s.executor_mut().add_hook(p).expect("hook");
    }
}

fn measure(
    name: &str,
    config: ModelConfig,
    batch: usize,
    size: usize,
    block: usize,
    rounds: usize,
) {
    let (x, y): (Tensor, Tensor) = SyntheticImages::new(10, batch, size, 0)
        .and_then(|mut s| s.next_batch())
        .expect("batch");
    // The settings' verbosities: the last is the first again, the A/A control.
    let settings = [0u8, 1, 2, 0];
    let n = settings.len();
    let mut s = session(config, batch, size);
    for _ in 0..2 {
        s.step(&x, &y).expect("warm-up step");
    }
    let (mut cpu, mut wall) = (vec![Vec::new(); n], vec![Vec::new(); n]);
    for round in 0..rounds {
        for k in 0..n {
            let v = (k + round) % n;
            attach(&mut s, settings[v]);
            // One untimed step: the profiler's first iteration prepares its timer.
            s.step(&x, &y).expect("step");
            let (c0, w0) = (cpu_sec(), Instant::now());
            for _ in 0..block {
                s.step(&x, &y).expect("step");
            }
            cpu[v].push((cpu_sec() - c0) / block as f64);
            wall[v].push(w0.elapsed().as_secs_f64() / block as f64);
            s.executor_mut().remove_hook::<TimeProfiler>();
        }
    }
    let (c0, w0) = (median(cpu[0].clone()), median(wall[0].clone()));
    println!("{name}: {rounds} rounds of {block} steps per setting, rotating; medians per step");
    for (v, verbosity) in settings.iter().enumerate() {
        let (c, w) = (median(cpu[v].clone()), median(wall[v].clone()));
        let label = if v == n - 1 { " (again)" } else { "" };
        println!(
            "  verbosity {verbosity}{label}: CPU {:.3} ms ({:+.1}%), wall {:.3} ms ({:+.1}%)",
            1e3 * c,
            100.0 * (c / c0 - 1.0),
            1e3 * w,
            100.0 * (w / w0 - 1.0)
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a number among the arguments sets the rounds.
    let rounds = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(9);
    println!(
        "load average {}; {} kernel threads",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim(),
        rayon::current_num_threads()
    );
    let resnet18 = |stem| ModelConfig::by_name("resnet18", stem, Some(10)).expect("resnet18");
    measure(
        "small: ResNet-18 (CIFAR stem), batch 1, 16x16",
        resnet18(Stem::Cifar),
        1,
        16,
        20,
        rounds,
    );
    measure(
        "realistic: ResNet-18, batch 8, 64x64",
        resnet18(Stem::ImageNet),
        8,
        64,
        6,
        rounds,
    );
}
