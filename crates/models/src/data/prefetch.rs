//! Batches prepared on background threads.

use std::sync::mpsc;
use std::thread;
use std::time::Instant;

use wick_graph::LoaderWork;

use super::{Batch, BatchSource};
use crate::error::{ModelError, Result};

/// Makes a fresh data source (one per loader thread).
pub type SourceFactory = Box<dyn Fn() -> Result<Box<dyn BatchSource>> + Send + Sync>;

/// Prepares batches on background threads, a few ahead of the training loop. With
/// several threads each prepares every n-th batch of its own copy of the source (seeked
/// there), and the batches come out in order: the same stream as one thread gives.
pub struct Prefetcher {
    channels: Vec<mpsc::Receiver<Prepared>>,
    next: std::cell::Cell<usize>,
    _workers: Vec<thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Prefetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prefetcher")
            .field("threads", &self.channels.len())
            .finish()
    }
}

/// The calling thread's CPU time in seconds (`CLOCK_THREAD_CPUTIME_ID`); `None` where the
/// clock cannot be read.
fn thread_cpu_sec() -> Option<f64> {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } == 0;
    ok.then_some(t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9)
}

/// A batch as a loader thread hands it over, with what preparing it took.
type Prepared = (Result<Batch>, Option<LoaderWork>);

/// Prepares the next batch of `source` on loader thread `thread`, timing its stages when
/// the source reports them.
fn prepare(source: &mut dyn BatchSource, thread: usize) -> Prepared {
    let (started, cpu) = (Instant::now(), thread_cpu_sec());
    let batch = source.next_batch();
    let cpu_sec = thread_cpu_sec().zip(cpu).map(|(end, start)| end - start);
    let work = source.take_stages().map(|r| LoaderWork {
        thread,
        started,
        stages: r.stages,
        images: r.images,
        skipped: r.skipped,
        cpu_sec,
    });
    (batch, work)
}

/// Starts a loader thread named `wick-loader-{index}`, the name `top -H`, `perf` and
/// `renice` users find it by.
fn loader_thread(index: usize, body: impl FnOnce() + Send + 'static) -> thread::JoinHandle<()> {
    thread::Builder::new()
        .name(format!("wick-loader-{index}"))
        .spawn(body)
        .expect("the OS refused to start a data loader thread")
}

impl Prefetcher {
    /// Starts one thread that keeps up to `depth` batches of `source` ready.
    pub fn new(mut source: Box<dyn BatchSource>, depth: usize) -> Self {
        let (tx, rx) = mpsc::sync_channel(depth.max(1));
        let worker = loader_thread(0, move || loop {
            let prepared = prepare(source.as_mut(), 0);
            let failed = prepared.0.is_err();
            if tx.send(prepared).is_err() || failed {
                break;
            }
        });
        Prefetcher {
            channels: vec![rx],
            next: std::cell::Cell::new(0),
            _workers: vec![worker],
        }
    }

    /// Starts `threads` threads, each with its own source from `make`, that together
    /// yield batches `start`, `start + 1`, ... in order, each keeping up to `depth` ready.
    pub fn ordered(make: SourceFactory, threads: usize, depth: usize, start: u64) -> Self {
        let threads = threads.max(1);
        let make = std::sync::Arc::new(make);
        let (mut channels, mut workers) = (Vec::new(), Vec::new());
        for w in 0..threads {
            let (tx, rx) = mpsc::sync_channel(depth.max(1));
            let make = make.clone();
            workers.push(loader_thread(w, move || {
                let mut source = match make() {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = tx.send((Err(e), None));
                        return;
                    }
                };
                for k in 0.. {
                    let index = start + w as u64 + k * threads as u64;
                    let prepared = match source.seek(index) {
                        Ok(()) => prepare(source.as_mut(), w),
                        Err(e) => (Err(e), None),
                    };
                    let failed = prepared.0.is_err();
                    if tx.send(prepared).is_err() || failed {
                        break;
                    }
                }
            }));
            channels.push(rx);
        }
        Prefetcher {
            channels,
            next: std::cell::Cell::new(0),
            _workers: workers,
        }
    }

    /// The next batch (waits if its thread is behind).
    pub fn next_batch(&self) -> Result<Batch> {
        self.next_batch_timed().map(|(batch, _)| batch)
    }

    /// The next batch, and what preparing it took on its loader thread when the source
    /// times its stages (for [`Session::report_loader_work`](crate::Session::report_loader_work)).
    pub fn next_batch_timed(&self) -> Result<(Batch, Option<LoaderWork>)> {
        let i = self.next.get();
        self.next.set(i + 1);
        let (batch, work) = self.channels[i % self.channels.len()]
            .recv()
            .map_err(|_| ModelError::State("the batch-preparing thread stopped".into()))?;
        Ok((batch?, work))
    }
}
