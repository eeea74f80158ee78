//! The time profiler with an injected fake clock: skip semantics, averaging, phase times,
//! the SINGA line formats, the per-op-type table and the trace.

/// The small residual net the graph tests train, shared with them.
#[path = "../../../graph/tests/common/mod.rs"]
mod common;

use std::sync::{Arc, Mutex};

use common::*;
use wick_graph::{Executor, Phase};
use wick_ops::SgdParams;
use wick_profiler::views::float_format::cpp_float;
use wick_profiler::{Mark, SlotLayout};
use wick_profiler::{TimeProfiler, Timer};

/// A value the test shares with a hook (which the executor may call on another thread).
#[derive(Clone, Default)]
struct Shared<T>(Arc<Mutex<T>>);

impl<T: Copy> Shared<T> {
    fn new(value: T) -> Self {
        Shared(Arc::new(Mutex::new(value)))
    }
    fn get(&self) -> T {
        *self.0.lock().unwrap()
    }
    fn set(&self, value: T) {
        *self.0.lock().unwrap() = value;
    }
}

/// An inference graph of one ReLU on an `[n, 8]` input `x`, set to ones.
fn relu_inference(n: usize) -> Executor {
    use candle_core::{DType, Device, Tensor};
    use wick_graph::{GraphBuilder, Mode};
    let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    let x = b.input("x", &[n, 8], DType::F32).unwrap();
    let y = b.relu(x).unwrap();
    b.output(y);
    let mut exec = Executor::new(b.finish(), &Device::Cpu);
    let ones = Tensor::ones((n, 8), DType::F32, &Device::Cpu).unwrap();
    exec.set("x", &ones).unwrap();
    exec
}

/// A fake clock: the time of each mark is a function of the iteration (set by the test
/// before each run) and the mark's slot. It counts the marks it was asked for.
struct FakeTimer {
    iteration: Shared<usize>,
    marks: Shared<usize>,
    clock: Box<dyn Fn(usize, usize) -> f64 + Send>,
    recorded: Vec<f64>,
}

impl Timer for FakeTimer {
    fn method(&self) -> &'static str {
        "fake clock"
    }
    fn prepare(&mut self, slots: usize) -> wick_graph::Result<()> {
        self.recorded = vec![f64::NAN; slots];
        Ok(())
    }
    fn mark(&mut self, slot: usize) {
        self.marks.set(self.marks.get() + 1);
        self.recorded[slot] = (self.clock)(self.iteration.get(), slot);
    }
    fn read(&mut self, out: &mut [f64]) -> wick_graph::Result<()> {
        out.copy_from_slice(&self.recorded);
        Ok(())
    }
}

/// Added to the end marks of skipped iterations: were a skipped iteration timed, its
/// iteration, phase and op durations would all be about this long.
const SKIP_POISON: f64 = 1e6;

/// Durations chosen per iteration: op i takes (i+1) ms * (1 + iteration); each phase is
/// given a fixed length; skipped iterations would show huge times if they were timed.
fn clock(skip: usize, phase_len: [f64; 3]) -> impl Fn(usize, usize) -> f64 + Send {
    let layout = SlotLayout::new(1_000_000);
    move |it, slot| {
        let base = 1000.0 * it as f64;
        let poison = if it < skip { SKIP_POISON } else { 0.0 };
        match layout.mark(slot).expect("a profiler slot") {
            Mark::IterationStart => base,
            Mark::IterationEnd => base + 10.0 + poison,
            Mark::PhaseStart(p) => base + 1.0 + 3.0 * p as usize as f64,
            Mark::PhaseEnd(p) => {
                base + 1.0 + 3.0 * p as usize as f64 + phase_len[p as usize] + poison
            }
            Mark::OpStart(op) => base + 100.0 + op as f64,
            Mark::OpEnd(op) => base + 100.0 + op as f64 + op_secs(op, it) + poison,
        }
    }
}

/// The fake clock's duration of OP_ID `op` in iteration `it`.
fn op_secs(op: usize, it: usize) -> f64 {
    1e-3 * (op + 1) as f64 * (1 + it) as f64
}

struct Setup {
    exec: Executor,
    iteration: Shared<usize>,
    marks: Shared<usize>,
}

fn setup(verbosity: u8, skip: usize, phase_len: [f64; 3]) -> Setup {
    setup_with(verbosity, skip, phase_len, None)
}

fn setup_with(
    verbosity: u8,
    skip: usize,
    phase_len: [f64; 3],
    wall: Option<wick_profiler::WallClock>,
) -> Setup {
    let sgd = SgdParams {
        lr: 0.01,
        momentum: 0.9,
        ..Default::default()
    };
    let mut exec = small_train_executor(6, sgd, 0.0);
    let iteration = Shared::new(0);
    let marks = Shared::new(0);
    let timer = FakeTimer {
        iteration: iteration.clone(),
        marks: marks.clone(),
        clock: Box::new(clock(skip, phase_len)),
        recorded: vec![],
    };
    let mut profiler = TimeProfiler::new(verbosity, skip).with_timer(Box::new(timer));
    if let Some(wall) = wall {
        profiler = profiler.with_wall_clock(wall);
    }
    exec.add_hook(profiler).unwrap();
    Setup {
        exec,
        iteration,
        marks,
    }
}

fn run(s: &mut Setup, iterations: usize) {
    for it in 0..iterations {
        s.iteration.set(it);
        s.exec.run().unwrap();
    }
}

/// SINGA's lines, averaging and skipping, the per-op-type table, the timers.
mod singa_lines;
/// The views beyond SINGA's: per layer, the whole step (input-bound verdict), memory.
mod views;
