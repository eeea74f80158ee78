//! SINGA's lines at each verbosity, skip semantics and averaging, phases, the timers.

use super::*;

#[test]
fn skipped_iterations_leave_no_trace_and_every_figure_is_averaged() {
    let (skip, total) = (3, 7);
    let mut s = setup(2, skip, [0.0409127, 0.114813, 0.00148837]);
    run(&mut s, total);
    let p = s.exec.hook::<TimeProfiler>().unwrap().profile();
    assert_eq!(p.timed_iterations, total - skip);
    assert_eq!(p.skipped, Some(skip));
    // Op i takes (i+1) ms * (1+it) in iteration it: the mean over the timed iterations.
    let mean_factor = (skip..total).map(|it| (1 + it) as f64).sum::<f64>() / (total - skip) as f64;
    for op in &p.ops {
        let expected = 1e-3 * (op.op_id + 1) as f64 * mean_factor;
        assert!(
            (op.mean_sec - expected).abs() < 1e-9,
            "OP_ID{}: {} vs {expected}",
            op.op_id,
            op.mean_sec
        );
        assert!((op.min_sec - 1e-3 * (op.op_id + 1) as f64 * (1 + skip) as f64).abs() < 1e-9);
        assert!((op.max_sec - 1e-3 * (op.op_id + 1) as f64 * total as f64).abs() < 1e-9);
        assert!(op.max_sec < SKIP_POISON);
    }
    let phases = p.forward_sec + p.backward_sec + p.optimizer_sec;
    assert!(phases < 1.0 && p.iteration_max_sec < SKIP_POISON);
    assert!((p.forward_sec - 0.0409127).abs() < 1e-9);
    assert!((p.backward_sec - 0.114813).abs() < 1e-9);
    assert!((p.optimizer_sec - 0.00148837).abs() < 1e-9);
    assert!((p.iteration_sec - 10.0).abs() < 1e-9);
    for spread in [
        p.iteration_median_sec,
        p.iteration_min_sec,
        p.iteration_max_sec,
    ] {
        assert!((spread - 10.0).abs() < 1e-9, "{spread}");
    }
    assert!(p
        .to_string()
        .contains("Iteration spread : median 10 sec, min 10 sec, max 10 sec"));
}

#[test]
fn verbosity_one_prints_singa_lines_and_no_op_lines() {
    let mut s = setup(1, 2, [0.0409127, 0.114813, 0.00148837]);
    run(&mut s, 5);
    // Per timed iteration: 2 iteration marks, 2 per phase, 2 per op (for the op time
    // inside each phase; not reported per op at verbosity 1).
    let n = s.exec.node_infos().len();
    assert_eq!(s.marks.get(), 3 * SlotLayout::new(n).len());
    let text = s.exec.hook::<TimeProfiler>().unwrap().profile().to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        &lines[..4],
        &[
            "Time Profiling:",
            "Forward Propagation Time : 0.0409127 sec",
            "Backward Propagation Time : 0.114813 sec",
            "Optimizer Time : 0.00148837 sec"
        ]
    );
    assert!(
        text.contains("3 timed iterations after 2 skipped"),
        "{text}"
    );
    assert!(text.contains("fake clock"));
    // No per-op lines (the memory line may name the OP_ID of the predicted peak).
    assert!(!text.lines().any(|l| l.starts_with("OP_ID")), "{text}");
    assert!(!text.contains("Per-op-type summary"));
    assert!(!text.contains("Per-class summary"));
}

#[test]
fn op_time_and_overhead_inside_each_phase_at_verbosity_one() {
    let (skip, total) = (1, 4);
    let mut s = setup(1, skip, [0.5, 0.25, 0.125]);
    run(&mut s, total);
    let infos = s.exec.node_infos().to_vec();
    let p = s.exec.hook::<TimeProfiler>().unwrap().profile();
    assert!(p.ops.is_empty(), "no per-op figures at verbosity 1");
    assert_eq!(p.phases.len(), 3);
    for ph in &p.phases {
        let expected: f64 = infos
            .iter()
            .filter(|i| i.phase == ph.phase)
            .map(|i| (skip..total).map(|it| op_secs(i.op_id, it)).sum::<f64>())
            .sum::<f64>()
            / (total - skip) as f64;
        assert!((ph.ops_sec - expected).abs() < 1e-9, "{ph:?} vs {expected}");
        assert!((ph.overhead_sec() - (ph.sec - expected)).abs() < 1e-9);
    }
    let text = p.to_string();
    assert!(text.contains("forward 5.0% (ops "), "{text}");
    assert!(!text.contains("between phases"), "{text}");
    assert!(text.contains("overhead inside phases"), "{text}");
    assert!(text.contains("not feeding the batch nor reading the loss back"));
}

#[test]
fn changing_verbosity_mid_run_averages_each_op_over_the_iterations_that_timed_it() {
    let mut s = setup(1, 0, [1.0, 1.0, 1.0]);
    run(&mut s, 2);
    s.exec
        .hook_mut::<TimeProfiler>()
        .expect("attached")
        .set_level(wick_profiler::RecordLevel::PerOp);
    for it in 2..5 {
        s.iteration.set(it);
        s.exec.run().unwrap();
    }
    let p = s.exec.hook::<TimeProfiler>().unwrap().profile();
    assert_eq!(p.timed_iterations, 5);
    for op in &p.ops {
        let expected = (2..5).map(|it| op_secs(op.op_id, it)).sum::<f64>() / 3.0;
        assert!(
            (op.mean_sec - expected).abs() < 1e-12,
            "OP_ID{}: {} vs {expected} (averaged over iterations that did not time it?)",
            op.op_id,
            op.mean_sec
        );
    }
}

#[test]
fn verbosity_two_prints_one_line_per_op_id_in_order() {
    let mut s = setup(2, 1, [0.5, 0.25, 0.125]);
    run(&mut s, 3);
    let prof = s.exec.hook::<TimeProfiler>().unwrap();
    let p = prof.profile();
    let text = p.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "Time Profiling:");
    let n = s.exec.node_infos().len();
    for (i, info) in s.exec.node_infos().iter().enumerate() {
        let mean = 1e-3 * (i + 1) as f64 * 2.5; // iterations 1 and 2: factors 2 and 3
        assert_eq!(
            lines[1 + i],
            format!("OP_ID{i}. {} : {} sec", info.name, cpp_float(mean))
        );
    }
    assert_eq!(lines[1], "OP_ID0. ConvForward : 0.0025 sec");
    assert_eq!(lines[2], "OP_ID1. BatchNormForwardTraining : 0.005 sec");
    assert_eq!(lines[1 + n], "");
    assert_eq!(lines[2 + n], "Forward Propagation Time : 0.5 sec");
    // The per-op-type table: sorted by total, totals add up, ratios sum to 1.
    let rows = p.by_type();
    assert!(rows.windows(2).all(|w| w[0].total_sec >= w[1].total_sec));
    let total: f64 = rows.iter().map(|r| r.total_sec).sum();
    assert!((total - p.ops_sec()).abs() < 1e-12);
    assert!((rows.iter().map(|r| r.share).sum::<f64>() - 1.0).abs() < 1e-12);
    assert_eq!(rows.iter().map(|r| r.nodes).sum::<usize>(), n);
    let conv = rows.iter().find(|r| r.name == "ConvForward").unwrap();
    assert_eq!(conv.nodes, 3);
    assert!(text.contains("Per-op-type summary") && text.contains("ConvBackwardFilter"));
    // The class table sums to the same op time, and comes before the per-type table.
    let classes = p.by_class();
    assert!((classes.iter().map(|c| c.total_sec).sum::<f64>() - total).abs() < 1e-12);
    assert_eq!(classes.iter().map(|c| c.nodes).sum::<usize>(), n);
    let class_at = text.find("Per-class summary").expect("the class table");
    assert!(class_at < text.find("Per-op-type summary").unwrap());
    // The trace holds one complete event per node of every timed iteration.
    let trace: serde_json::Value =
        serde_json::from_str(&p.chrome_trace().expect("verbosity 2 has a trace")).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let op_events: Vec<_> = events
        .iter()
        .filter(|e| e["args"]["op_id"].is_u64())
        .collect();
    assert_eq!(op_events.len(), n * p.timed_iterations);
    // Each event names its layer (and, for backward nodes, its forward node).
    let first = op_events[0];
    assert_eq!(first["args"]["layer"], "stem");
    let backward = events.iter().find(|e| e["cat"] == "backward").unwrap();
    assert!(backward["args"]["forward_op"].is_u64(), "{backward}");
    let json: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
    assert_eq!(json["ops"].as_array().unwrap().len(), n);
    assert_eq!(json["ops"][0]["phase"], "forward");
    assert_eq!(json["ops"][0]["origin"]["layer"], "stem");
}

#[test]
fn verbosity_zero_records_nothing() {
    let mut s = setup(0, 0, [1.0, 1.0, 1.0]);
    run(&mut s, 3);
    assert_eq!(s.marks.get(), 0);
    let p = s.exec.hook::<TimeProfiler>().unwrap().profile();
    assert_eq!(p.timed_iterations, 0);
    assert!(p
        .to_string()
        .starts_with("Time Profiling: nothing was timed"));
    assert!(p.chrome_trace().is_none(), "no trace to write");
    let json: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
    assert!(
        json["method"].is_null() && json["skipped"].is_null(),
        "{json}"
    );
}

#[test]
fn phases_come_from_the_nodes_not_from_kernel_names() {
    let s = setup(2, 0, [1.0, 1.0, 1.0]);
    let infos = s.exec.node_infos();
    let first_backward = infos
        .iter()
        .position(|i| i.phase == Phase::Backward)
        .unwrap();
    // SINGA ends "forward" at the first op whose name contains "Backward"; here the loss
    // gradient (SoftmaxCrossEntropyBackward) opens the backward phase by its tag.
    assert_eq!(infos[first_backward].name, "SoftmaxCrossEntropyBackward");
    assert!(infos[..first_backward]
        .iter()
        .all(|i| i.phase == Phase::Forward));
    assert!(infos
        .iter()
        .filter(|i| i.name == "SgdUpdate")
        .all(|i| i.phase == Phase::Optimizer));
}

#[test]
fn host_timer_measures_real_runs() {
    let mut exec = small_train_executor(6, SgdParams::default(), 1.0);
    exec.add_hook(TimeProfiler::new(2, 1)).unwrap();
    for _ in 0..3 {
        exec.run().unwrap();
    }
    let p = exec.hook::<TimeProfiler>().unwrap().profile();
    assert_eq!(p.timed_iterations, 2);
    assert!(p.method.as_deref().unwrap().contains("host clock"));
    assert!(p
        .ops
        .iter()
        .all(|o| o.mean_sec > 0.0 && o.min_sec <= o.max_sec));
    let phases = p.forward_sec + p.backward_sec + p.optimizer_sec;
    assert!(p.ops_sec() <= phases + 1e-9 && phases <= p.iteration_sec + 1e-9);
}

/// A fake device-event source: each record stamps the event with a clock that advances
/// 1 ms per record. Counts creations, records and synchronisations.
#[derive(Default)]
struct FakeEvents {
    times: Vec<f64>,
    clock: f64,
    creates: usize,
    records: usize,
    syncs: usize,
}

impl wick_profiler::EventSource for FakeEvents {
    type Event = usize;
    fn method(&self) -> &'static str {
        "fake events"
    }
    fn create(&mut self) -> wick_graph::Result<usize> {
        self.creates += 1;
        self.times.push(f64::NAN);
        Ok(self.times.len() - 1)
    }
    fn record(&mut self, e: &usize) -> wick_graph::Result<()> {
        self.records += 1;
        self.clock += 1e-3;
        self.times[*e] = self.clock;
        Ok(())
    }
    fn synchronize(&mut self) -> wick_graph::Result<()> {
        self.syncs += 1;
        Ok(())
    }
    fn elapsed(&mut self, start: &usize, end: &usize) -> wick_graph::Result<f64> {
        Ok(self.times[*end] - self.times[*start])
    }
}

/// A timer that shares its event source with the test, to count calls after the run.
struct SharedEventTimer(Arc<Mutex<wick_profiler::EventTimer<FakeEvents>>>);

impl Timer for SharedEventTimer {
    fn method(&self) -> &'static str {
        "fake events"
    }
    fn prepare(&mut self, slots: usize) -> wick_graph::Result<()> {
        self.0.lock().unwrap().prepare(slots)
    }
    fn mark(&mut self, slot: usize) {
        self.0.lock().unwrap().mark(slot)
    }
    fn read(&mut self, out: &mut [f64]) -> wick_graph::Result<()> {
        self.0.lock().unwrap().read(out)
    }
}

#[test]
fn event_timer_creates_events_once_and_synchronises_once_per_iteration() {
    let mut s = setup(2, 2, [1.0, 1.0, 1.0]);
    let nodes = s.exec.node_infos().len();
    let _ = s.exec.remove_hook::<TimeProfiler>().unwrap();
    let timer = Arc::new(Mutex::new(wick_profiler::EventTimer::new(
        FakeEvents::default(),
    )));
    s.exec
        .add_hook(TimeProfiler::new(2, 2).with_timer(Box::new(SharedEventTimer(timer.clone()))))
        .unwrap();
    run(&mut s, 6);
    let t = timer.lock().unwrap();
    let src = t.source();
    let slots = SlotLayout::new(nodes).len();
    assert_eq!(src.creates, slots, "one event per mark, created once");
    assert_eq!(src.syncs, 4, "one synchronisation per timed iteration");
    assert_eq!(
        src.records,
        4 * slots,
        "every mark recorded once per timed iteration"
    );
    // Each op's stop is the record right after its start: 1 ms per op, averaged.
    let p = s.exec.hook::<TimeProfiler>().unwrap().profile();
    assert!(
        p.ops.iter().all(|o| (o.mean_sec - 1e-3).abs() < 1e-9),
        "{:?}",
        p.ops[0]
    );
    assert_eq!(p.method.as_deref(), Some("fake events"));
}

/// Issue #29: an inference graph prints only what it ran (the forward line, an iteration
/// of forward nodes); verbosity 3 without communication ops says why it lists no op.
#[test]
fn inference_prints_only_its_phase_and_verbosity_three_explains_an_empty_list() {
    let mut exec = relu_inference(4);
    exec.add_hook(TimeProfiler::new(1, 0)).unwrap();
    exec.run().unwrap();
    let text = exec.hook::<TimeProfiler>().unwrap().profile().to_string();
    assert!(text.contains("Forward Propagation Time : "), "{text}");
    assert!(
        !text.contains("Backward Propagation Time") && !text.contains("Optimizer Time"),
        "{text}"
    );
    assert!(
        text.contains("Iteration covers : every node (forward) and the executor's work between them; not feeding the batch nor reading the outputs back"),
        "{text}"
    );

    // Verbosity 3 on a graph without Dist* ops: SINGA's lines stay exactly its own, and
    // a note follows them, after the phase lines.
    let mut s = setup(3, 0, [1.0, 1.0, 1.0]);
    run(&mut s, 2);
    let p = s.exec.hook::<TimeProfiler>().unwrap().profile();
    assert_eq!(p.singa_lines(), "Time Profiling:\n");
    let text = p.to_string();
    assert!(
        text.starts_with("Time Profiling:\n\nForward Propagation Time : "),
        "{text}"
    );
    let note = text
        .find(wick_profiler::views::singa::VERBOSITY_3_NOTE)
        .expect("the note");
    let optimizer_line = text.find("Optimizer Time : ").expect("the optimizer line");
    let after_it = optimizer_line + text[optimizer_line..].find('\n').unwrap() + 1;
    assert_eq!(note, after_it, "{text}");
    // Recording every op but reporting at verbosity 1 prints what verbosity 1 prints.
    let mut s = setup(2, 0, [1.0, 1.0, 1.0]);
    run(&mut s, 2);
    let p = s.exec.hook::<TimeProfiler>().unwrap().profile();
    assert!(!p.ops.is_empty());
    let two = p.to_string();
    let one = wick_profiler::Profile { verbosity: 1, ..p }.to_string();
    assert_mentions(&two, &["OP_ID0.", "Per-op-type summary"]);
    assert!(
        one.starts_with("Time Profiling:\nForward Propagation Time : ")
            && !one.contains("OP_ID0.")
            && !one.contains("Per-op-type summary")
            && !one.contains("Per-class summary"),
        "{one}"
    );
    // Training graphs keep all three lines.
    let mut s = setup(1, 0, [1.0, 1.0, 1.0]);
    run(&mut s, 1);
    let text = s.exec.hook::<TimeProfiler>().unwrap().profile().to_string();
    assert!(text.contains("Backward Propagation Time") && text.contains("Optimizer Time"));
    assert!(
        text.contains("every node (forward, backward, optimizer)"),
        "{text}"
    );
}
