//! One graph's collectives, in order, on a communication thread: the gradient buckets'
//! all-reduces run there while the main thread goes on with backward (the overlap), and
//! every collective of the graph (the synchronised batch norms' too) goes through the
//! same queue, so every rank issues them in the same order whatever the timing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::communicator::Communicator;

/// How long a rank waits for a collective before it reports its peers as failed or hung
/// (`WICK_DIST_TIMEOUT_S` overrides it).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// One bucket's all-reduce in one iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketTiming {
    /// Seconds the engine spent on it (on the communication thread).
    pub comm_sec: f64,
    /// Seconds the main thread waited for it (`DistWait`): the part of `comm_sec` that
    /// computation did not hide.
    pub exposed_sec: f64,
}

struct Job {
    data: Vec<f32>,
    reply: Sender<Done>,
}

struct Done {
    result: Result<Vec<f32>, String>,
    comm_sec: f64,
}

/// A collective submitted to the queue, not yet waited for.
pub struct Pending {
    reply: Receiver<Done>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pending")
    }
}

/// A communicator's collectives for one graph, run in submission order on one thread.
pub struct CommQueue {
    comm: Arc<dyn Communicator>,
    jobs: Mutex<Option<Sender<Job>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    /// In-flight bucket all-reduces, by bucket.
    in_flight: Mutex<Vec<Option<Pending>>>,
    /// Per bucket, its timing in each iteration that waited for it.
    timings: Mutex<Vec<Vec<BucketTiming>>>,
    timeout: Duration,
    /// Collectives submitted and not finished by the engine.
    outstanding: Arc<AtomicUsize>,
}

impl std::fmt::Debug for CommQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CommQueue({:?}, timeout {:?})", self.comm, self.timeout)
    }
}

impl CommQueue {
    /// A queue over `comm` for a graph with `buckets` gradient buckets, with
    /// [`DEFAULT_TIMEOUT`] or `WICK_DIST_TIMEOUT_S`.
    pub fn new(comm: Arc<dyn Communicator>, buckets: usize) -> Self {
        let timeout = std::env::var("WICK_DIST_TIMEOUT_S")
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0)
            .map(Duration::from_secs_f64)
            .unwrap_or(DEFAULT_TIMEOUT);
        CommQueue {
            comm,
            jobs: Mutex::new(None),
            worker: Mutex::new(None),
            in_flight: Mutex::new((0..buckets).map(|_| None).collect()),
            timings: Mutex::new(vec![Vec::new(); buckets]),
            timeout,
            outstanding: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The communicator.
    pub fn comm(&self) -> &Arc<dyn Communicator> {
        &self.comm
    }

    /// "rank R of N (engine)", for messages.
    pub fn who(&self) -> String {
        format!(
            "rank {} of {} ({})",
            self.comm.rank(),
            self.comm.size(),
            self.comm.engine()
        )
    }

    /// Starts summing `data` over the ranks on the communication thread.
    pub fn submit(&self, data: Vec<f32>) -> Result<Pending, String> {
        let mut jobs = self.jobs.lock().map_err(|_| "the queue lock is poisoned")?;
        if jobs.is_none() {
            let (tx, rx) = mpsc::channel::<Job>();
            let comm = self.comm.clone();
            let outstanding = self.outstanding.clone();
            let handle = std::thread::Builder::new()
                .name(format!("wick-comm-{}", self.comm.rank()))
                .spawn(move || {
                    for mut job in rx {
                        let start = Instant::now();
                        let result = comm.all_reduce_sum(&mut job.data).map(|()| job.data);
                        let comm_sec = start.elapsed().as_secs_f64();
                        outstanding.fetch_sub(1, Ordering::SeqCst);
                        // The waiter may have given up (timeout); nothing to tell then.
                        let _ = job.reply.send(Done { result, comm_sec });
                    }
                })
                .map_err(|e| format!("cannot start the communication thread: {e}"))?;
            *self
                .worker
                .lock()
                .map_err(|_| "the queue lock is poisoned")? = Some(handle);
            *jobs = Some(tx);
        }
        let (reply, rx) = mpsc::channel();
        self.outstanding.fetch_add(1, Ordering::SeqCst);
        jobs.as_ref()
            .expect("started above")
            .send(Job { data, reply })
            .map_err(|_| "the communication thread has ended".to_string())?;
        Ok(Pending { reply: rx })
    }

    /// Waits for a submitted collective: its result, the engine's seconds on it and the
    /// seconds this call waited. An error after the timeout.
    pub fn wait(&self, pending: Pending, what: &str) -> Result<(Vec<f32>, BucketTiming), String> {
        let start = Instant::now();
        let done = match pending.reply.recv_timeout(self.timeout) {
            Ok(done) => done,
            Err(RecvTimeoutError::Timeout) => {
                return Err(format!(
                    "{what} did not finish within {:.0} s (WICK_DIST_TIMEOUT_S): another rank failed or hangs",
                    self.timeout.as_secs_f64()
                ))
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(format!("{what}: the communication thread has ended"))
            }
        };
        let exposed_sec = start.elapsed().as_secs_f64();
        let data = done.result.map_err(|e| format!("{what}: {e}"))?;
        Ok((
            data,
            BucketTiming {
                comm_sec: done.comm_sec,
                exposed_sec,
            },
        ))
    }

    /// Sums `data` over the ranks now (in queue order), for small collectives such as
    /// synchronised batch-norm statistics.
    pub fn all_reduce_now(&self, data: &mut [f32], what: &str) -> Result<(), String> {
        let pending = self.submit(data.to_vec())?;
        let (sum, _) = self.wait(pending, what)?;
        data.copy_from_slice(&sum);
        Ok(())
    }

    /// Starts bucket `bucket`'s all-reduce. An error if it is in flight already.
    pub fn start_bucket(&self, bucket: usize, data: Vec<f32>) -> Result<(), String> {
        let pending = self.submit(data)?;
        let mut in_flight = self
            .in_flight
            .lock()
            .map_err(|_| "the queue lock is poisoned")?;
        let slot = in_flight
            .get_mut(bucket)
            .ok_or_else(|| format!("bucket {bucket} does not exist"))?;
        if slot.is_some() {
            return Err(format!("bucket {bucket}'s all-reduce is in flight already"));
        }
        *slot = Some(pending);
        Ok(())
    }

    /// Waits for bucket `bucket`'s all-reduce and records its timing.
    pub fn finish_bucket(&self, bucket: usize) -> Result<Vec<f32>, String> {
        let pending = self
            .in_flight
            .lock()
            .map_err(|_| "the queue lock is poisoned")?
            .get_mut(bucket)
            .and_then(Option::take)
            .ok_or_else(|| format!("bucket {bucket}'s all-reduce was not started"))?;
        let (data, timing) = self.wait(pending, &format!("the all-reduce of bucket {bucket}"))?;
        if let Some(t) = self
            .timings
            .lock()
            .map_err(|_| "the queue lock is poisoned")?
            .get_mut(bucket)
        {
            t.push(timing);
        }
        Ok(data)
    }

    /// Per bucket, its timing in every iteration so far.
    pub fn timings(&self) -> Vec<Vec<BucketTiming>> {
        self.timings.lock().map(|t| t.clone()).unwrap_or_default()
    }
}

impl Drop for CommQueue {
    fn drop(&mut self) {
        // Closing the channel ends the thread once its queue is empty.
        if let Ok(mut jobs) = self.jobs.lock() {
            jobs.take();
        }
        // A collective still in the engine is blocked on a failed or hung peer (the
        // graph gave up waiting): leave its thread to the process's end (the caller
        // aborts the job) rather than wait for it forever.
        if self.outstanding.load(Ordering::SeqCst) > 0 {
            return;
        }
        if let Ok(mut worker) = self.worker.lock() {
            if let Some(w) = worker.take() {
                let _ = w.join();
            }
        }
    }
}
