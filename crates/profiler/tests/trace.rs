//! Issue #13: the Chrome/Perfetto trace of a real run, validated against the trace-event
//! rules: required keys per event type, monotonic timestamps per track, complete events
//! that nest, every flow start with its end, and counter values equal to the memory view.

/// The small residual net the graph tests train, shared with them.
#[path = "../../graph/tests/common/mod.rs"]
mod common;

use std::collections::HashMap;

use common::*;
use serde_json::Value;
use wick_graph::StepPart;
use wick_ops::SgdParams;
use wick_profiler::TimeProfiler;

/// The small net trained for `iterations` with real timings, the first skipped, its
/// steps' input wait, copy and read-back reported as a session would.
fn profiled(iterations: usize) -> wick_profiler::Profile {
    let sgd = SgdParams {
        lr: 0.01,
        momentum: 0.9,
        ..Default::default()
    };
    let mut exec = small_train_executor(8, sgd, 1.0);
    exec.add_hook(TimeProfiler::new(2, 1)).unwrap();
    for _ in 0..iterations {
        exec.report_step_part(StepPart::InputWait, 2e-4);
        exec.report_step_part(StepPart::HostToDevice, 1e-4);
        exec.run().unwrap();
        exec.report_step_part(StepPart::LossReadBack, 5e-5);
    }
    exec.hook::<TimeProfiler>().unwrap().profile()
}

fn f(e: &Value, key: &str) -> f64 {
    e[key].as_f64().unwrap_or_else(|| panic!("{key} in {e}"))
}

/// Checks every rule; returns the events.
fn validate(trace: &str, p: &wick_profiler::Profile) -> Vec<Value> {
    let v: Value = serde_json::from_str(trace).unwrap();
    let events = v["traceEvents"].as_array().unwrap().clone();
    // Required keys per event type.
    for e in &events {
        let ph = e["ph"].as_str().unwrap();
        let required: &[&str] = match ph {
            "X" => &["name", "ts", "dur", "pid", "tid"],
            "M" => &["name", "pid", "args"],
            "C" => &["name", "ts", "pid", "args"],
            "s" => &["name", "id", "ts", "pid", "tid"],
            "f" => &["name", "id", "ts", "pid", "tid", "bp"],
            "i" => &["name", "ts", "pid", "s"],
            other => panic!("unexpected event type {other}: {e}"),
        };
        for k in required {
            assert!(!e[*k].is_null(), "{ph} event lacks {k}: {e}");
        }
        if ph == "X" {
            assert!(f(e, "dur") >= 0.0, "{e}");
        }
    }
    // Monotonic timestamps per track: complete events per thread (start order), counters
    // per name.
    let mut last: HashMap<String, f64> = HashMap::new();
    for e in &events {
        let track = match e["ph"].as_str().unwrap() {
            "X" => format!("thread {}", e["tid"]),
            "C" => format!("counter {}", e["name"]),
            _ => continue,
        };
        // Phase spans start before their ops, so per thread compare spans with spans
        // and ops with ops.
        let track = format!("{track} {}", e["cat"]);
        let ts = f(e, "ts");
        let prev = last.insert(track.clone(), ts).unwrap_or(f64::MIN);
        assert!(ts >= prev, "{track}: {ts} after {prev}");
    }
    // Complete events nest per thread: each one ends before the enclosing one does, or
    // starts after it ended.
    let mut by_thread: HashMap<String, Vec<(f64, f64)>> = HashMap::new();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let (ts, dur) = (f(e, "ts"), f(e, "dur"));
        by_thread
            .entry(e["tid"].to_string())
            .or_default()
            .push((ts, ts + dur));
    }
    const EPS: f64 = 0.002; // µs: timestamps are rounded to the nanosecond
    for (tid, mut spans) in by_thread {
        spans.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut stack: Vec<(f64, f64)> = Vec::new();
        for s in spans {
            while stack.last().is_some_and(|top| s.0 >= top.1 - EPS) {
                stack.pop();
            }
            if let Some(top) = stack.last() {
                assert!(
                    s.1 <= top.1 + EPS,
                    "thread {tid}: {s:?} overlaps {top:?} without nesting"
                );
            }
            stack.push(s);
        }
    }
    // Every flow start has exactly one end, later.
    let mut starts: HashMap<u64, f64> = HashMap::new();
    let mut ends: HashMap<u64, f64> = HashMap::new();
    for e in &events {
        let id = e["id"].as_u64();
        match e["ph"].as_str().unwrap() {
            "s" => assert!(
                starts.insert(id.unwrap(), f(e, "ts")).is_none(),
                "flow {id:?} starts twice"
            ),
            "f" => assert!(
                ends.insert(id.unwrap(), f(e, "ts")).is_none(),
                "flow {id:?} ends twice"
            ),
            _ => {}
        }
    }
    assert!(!starts.is_empty(), "forward-to-backward flows");
    assert_eq!(starts.len(), ends.len());
    for (id, s) in &starts {
        assert!(ends[id] >= *s, "flow {id} ends before it starts");
    }
    // Counter values are the memory view's, op by op, every iteration.
    let live = &p.memory.as_ref().unwrap().live_after;
    let counters: Vec<f64> = events
        .iter()
        .filter(|e| e["ph"] == "C")
        .map(|e| f(&e["args"], "MiB"))
        .collect();
    assert_eq!(counters.len(), live.len() * p.timeline.len());
    for (i, c) in counters.iter().enumerate() {
        let expected = live[i % live.len()] as f64 / (1u64 << 20) as f64;
        assert!(
            (c - expected).abs() < 1e-12,
            "counter {i}: {c} vs {expected}"
        );
    }
    events
}

#[test]
fn the_trace_of_every_timed_iteration_follows_the_trace_event_rules() {
    let p = profiled(4);
    assert_eq!(p.timeline.len(), 3, "every timed iteration");
    let events = validate(&p.chrome_trace().unwrap(), &p);
    let n = p.ops.len();
    let ops = events
        .iter()
        .filter(|e| e["args"]["op_id"].is_u64())
        .count();
    assert_eq!(ops, 3 * n);
    let named = |name: &str| events.iter().filter(|e| e["name"] == name).count();
    assert_eq!(named("iteration"), 3);
    assert_eq!(named("input wait"), 3);
    assert_eq!(named("copy to device"), 3);
    assert_eq!(named("loss read-back"), 3);
    assert_eq!(named("forward"), 3, "a phase span per iteration");
    // Flows: one per backward node that differentiates a forward node, per iteration.
    let backward = p
        .ops
        .iter()
        .filter(|o| o.origin.forward_op.is_some() && o.phase == wick_graph::Phase::Backward)
        .count();
    assert_eq!(
        events.iter().filter(|e| e["ph"] == "s").count(),
        3 * backward
    );
    // Op events carry what the issue asks for.
    let conv = events.iter().find(|e| e["name"] == "ConvForward").unwrap();
    for key in [
        "op_id", "layer", "kernel", "inputs", "outputs", "flops", "bytes",
    ] {
        assert!(!conv["args"][key].is_null(), "{key}: {conv}");
    }
}

#[test]
fn a_capped_trace_keeps_whole_iterations_and_says_so() {
    let p = profiled(5);
    let full = p.chrome_trace_capped(usize::MAX).unwrap();
    assert!(full.note.is_none());
    let per_iteration = (full.events - 5) / 4; // 5 metadata events, 4 timed iterations
    let capped = p.chrome_trace_capped(2 * per_iteration + 1).unwrap();
    let note = capped.note.clone().expect("the cap was hit");
    assert!(note.contains("2 of 4 timed iterations"), "{note}");
    assert!(capped.json.contains(&note), "the note is in the trace too");
    let events = validate_capped(&capped.json);
    assert_eq!(events, 2 * (p.ops.len()));
}

/// Op events in a capped trace.
fn validate_capped(trace: &str) -> usize {
    let v: Value = serde_json::from_str(trace).unwrap();
    v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["args"]["op_id"].is_u64())
        .count()
}
