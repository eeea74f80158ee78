//! Ranks in threads for the data-parallel tests: a `Communicator` that sums through shared
//! memory between barriers, a test double for the engines (MPI, NCCL).

use std::sync::{Arc, Barrier, Mutex};

use wick_graph::collective::Communicator;

/// `size` ranks in threads, summing into shared memory between barriers.
#[derive(Debug)]
pub struct ThreadComm {
    pub rank: usize,
    shared: Arc<Shared>,
}

#[derive(Debug)]
pub struct Shared {
    size: usize,
    sum: Mutex<Vec<f32>>,
    barrier: Barrier,
}

impl ThreadComm {
    fn group(size: usize) -> Vec<ThreadComm> {
        let shared = Arc::new(Shared {
            size,
            sum: Mutex::new(Vec::new()),
            barrier: Barrier::new(size),
        });
        (0..size)
            .map(|rank| ThreadComm {
                rank,
                shared: shared.clone(),
            })
            .collect()
    }
}

impl Communicator for ThreadComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.shared.size
    }
    fn engine(&self) -> &'static str {
        "threads (test double)"
    }
    fn all_reduce_sum(&self, data: &mut [f32]) -> Result<(), String> {
        {
            let mut sum = self.shared.sum.lock().unwrap();
            if sum.is_empty() {
                sum.resize(data.len(), 0.0);
            }
            sum.iter_mut().zip(data.iter()).for_each(|(s, v)| *s += v);
        }
        self.shared.barrier.wait();
        data.copy_from_slice(&self.shared.sum.lock().unwrap());
        if self.shared.barrier.wait().is_leader() {
            self.shared.sum.lock().unwrap().clear();
        }
        self.shared.barrier.wait();
        Ok(())
    }
}

/// Runs `replica` on 2 ranks, each in a thread with its [`ThreadComm`]; their results by rank.
pub fn on_two_ranks<R: Send>(replica: impl Fn(ThreadComm) -> R + Sync) -> Vec<R> {
    std::thread::scope(|s| {
        let handles: Vec<_> = ThreadComm::group(2)
            .into_iter()
            .map(|comm| s.spawn(|| replica(comm)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}
