//! Timers: how the profiler reads time. On the CPU a host clock is right (candle's CPU ops
//! run to completion before returning); on CUDA, events recorded on the stream and read
//! after one synchronisation per iteration. The trait lets tests inject a fake clock.

use std::time::Instant;

/// A set of numbered time marks, recorded during an iteration and read after it.
pub trait Timer: Send {
    /// How this timer measures, for reports (`host clock (std::time::Instant)`, `CUDA events`).
    fn method(&self) -> &'static str;
    /// Prepares `slots` marks; called once before the first timed iteration. A CUDA timer
    /// creates its events here, once, and reuses them every iteration.
    fn prepare(&mut self, slots: usize) -> wick_graph::Result<()>;
    /// Records the current time into mark `slot`.
    fn mark(&mut self, slot: usize);
    /// After an iteration: waits until every recorded mark is complete (one synchronisation)
    /// and writes each mark's time in seconds (from any fixed origin) into `out`.
    fn read(&mut self, out: &mut [f64]) -> wick_graph::Result<()>;
}

/// A host-clock timer: `Instant::now()` at each mark.
#[derive(Debug)]
pub struct HostTimer {
    origin: Instant,
    marks: Vec<f64>,
}

impl Default for HostTimer {
    fn default() -> Self {
        HostTimer {
            origin: Instant::now(),
            marks: Vec::new(),
        }
    }
}

impl Timer for HostTimer {
    fn method(&self) -> &'static str {
        "host clock (std::time::Instant)"
    }

    fn prepare(&mut self, slots: usize) -> wick_graph::Result<()> {
        self.marks = vec![0.0; slots];
        Ok(())
    }

    fn mark(&mut self, slot: usize) {
        if let Some(m) = self.marks.get_mut(slot) {
            *m = self.origin.elapsed().as_secs_f64();
        }
    }

    fn read(&mut self, out: &mut [f64]) -> wick_graph::Result<()> {
        let n = out.len().min(self.marks.len());
        out[..n].copy_from_slice(&self.marks[..n]);
        Ok(())
    }
}

/// A source of device events: what an [`EventTimer`] needs from a device. CUDA's is
/// `CudaEvents` (with the `cuda` feature); tests use a fake one.
pub trait EventSource: Send {
    /// One event.
    type Event: Send;
    /// The timing method's name for reports.
    fn method(&self) -> &'static str;
    /// Creates an event (once per mark, before the first timed iteration).
    fn create(&mut self) -> wick_graph::Result<Self::Event>;
    /// Records `event` on the stream: it completes when the work queued before it does.
    fn record(&mut self, event: &Self::Event) -> wick_graph::Result<()>;
    /// Waits for all queued work (once per iteration).
    fn synchronize(&mut self) -> wick_graph::Result<()>;
    /// Seconds between two completed events.
    fn elapsed(&mut self, start: &Self::Event, end: &Self::Event) -> wick_graph::Result<f64>;
}

/// A [`Timer`] on device events: one event per mark (so one start/stop pair per node),
/// created once and reused every iteration; marks only record events on the stream, and
/// [`read`](Timer::read) synchronises once and then reads every event.
pub struct EventTimer<S: EventSource> {
    source: S,
    events: Vec<S::Event>,
    recorded: Vec<bool>,
    error: Option<wick_graph::GraphError>,
}

impl<S: EventSource> EventTimer<S> {
    /// A timer on `source`; its events are created by [`prepare`](Timer::prepare).
    pub fn new(source: S) -> Self {
        EventTimer {
            source,
            events: Vec::new(),
            recorded: Vec::new(),
            error: None,
        }
    }

    /// The event source (for inspection).
    pub fn source(&self) -> &S {
        &self.source
    }
}

impl<S: EventSource> Timer for EventTimer<S> {
    fn method(&self) -> &'static str {
        self.source.method()
    }

    fn prepare(&mut self, slots: usize) -> wick_graph::Result<()> {
        if self.events.len() != slots {
            self.events = (0..slots)
                .map(|_| self.source.create())
                .collect::<wick_graph::Result<_>>()?;
        }
        self.recorded = vec![false; slots];
        Ok(())
    }

    fn mark(&mut self, slot: usize) {
        if let Some(e) = self.events.get(slot) {
            match self.source.record(e) {
                Ok(()) => self.recorded[slot] = true,
                Err(err) => self.error = Some(err),
            }
        }
    }

    fn read(&mut self, out: &mut [f64]) -> wick_graph::Result<()> {
        if let Some(err) = self.error.take() {
            return Err(err);
        }
        self.source.synchronize()?;
        let Some(origin) = self.recorded.iter().position(|r| *r) else {
            return Ok(());
        };
        for (slot, o) in out.iter_mut().enumerate().take(self.events.len()) {
            if self.recorded[slot] {
                *o = self
                    .source
                    .elapsed(&self.events[origin], &self.events[slot])?;
            }
        }
        self.recorded.iter_mut().for_each(|r| *r = false);
        Ok(())
    }
}

/// CUDA events on a candle CUDA device's stream.
#[cfg(feature = "cuda")]
pub struct CudaEvents {
    stream: std::sync::Arc<candle_core::cuda::cudarc::driver::CudaStream>,
}

#[cfg(feature = "cuda")]
impl CudaEvents {
    /// Events on `device`'s stream.
    pub fn new(device: &candle_core::CudaDevice) -> Self {
        CudaEvents {
            stream: device.cuda_stream(),
        }
    }
}

#[cfg(feature = "cuda")]
fn cuda_err(what: &'static str, e: impl std::fmt::Debug) -> wick_graph::GraphError {
    wick_graph::GraphError::Cuda {
        what,
        message: format!("{e:?}"),
    }
}

#[cfg(feature = "cuda")]
impl EventSource for CudaEvents {
    type Event = candle_core::cuda::cudarc::driver::CudaEvent;

    fn method(&self) -> &'static str {
        "CUDA events (one pair per node, created once; one stream synchronisation per iteration)"
    }

    fn create(&mut self) -> wick_graph::Result<Self::Event> {
        use candle_core::cuda::cudarc::driver::sys::CUevent_flags;
        self.stream
            .context()
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| cuda_err("creating an event", e))
    }

    fn record(&mut self, event: &Self::Event) -> wick_graph::Result<()> {
        event
            .record(&self.stream)
            .map_err(|e| cuda_err("recording an event", e))
    }

    fn synchronize(&mut self) -> wick_graph::Result<()> {
        self.stream
            .synchronize()
            .map_err(|e| cuda_err("synchronising the stream", e))
    }

    fn elapsed(&mut self, start: &Self::Event, end: &Self::Event) -> wick_graph::Result<f64> {
        start
            .elapsed_ms(end)
            .map(|ms| ms as f64 / 1e3)
            .map_err(|e| cuda_err("reading an event", e))
    }
}

/// The timer for `device`: the host clock on the CPU, CUDA events on a CUDA device.
pub(crate) fn default_timer(device: &candle_core::Device) -> wick_graph::Result<Box<dyn Timer>> {
    match device {
        candle_core::Device::Cpu => Ok(Box::new(HostTimer::default())),
        #[cfg(feature = "cuda")]
        candle_core::Device::Cuda(dev) => Ok(Box::new(EventTimer::new(
            CudaEvents::new(dev),
        ))),
        other => Err(wick_graph::GraphError::Usage(format!(
            "the time profiler has no timer for {:?}; build wick with the `cuda` feature for CUDA devices",
            other.location()
        ))),
    }
}
