//! Beyond SINGA: the per-layer rows, the whole-step split and its input-bound verdict,
//! the memory view.

use super::*;

/// Issue #12's per-layer view, on the fake clock: at every level the rows add up to the
/// phases' op time; backward time goes to the layer of the forward node it differentiates;
/// optimizer time and parameters to the parameter's layer.
#[test]
fn per_layer_rows_add_up_to_the_phase_totals() {
    use wick_profiler::{LayerLevel, LayerRow};
    let mut s = setup(2, 0, [1.0, 2.0, 3.0]);
    run(&mut s, 3);
    let p = s.exec.hook::<TimeProfiler>().unwrap().profile();
    let phase = |ph: Phase| p.phases.iter().find(|x| x.phase == ph).unwrap().ops_sec;
    // The fake clock subtracts large base times: equal to about 1e-11.
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1e-9);
    for level in [LayerLevel::Layer, LayerLevel::Block, LayerLevel::Stage] {
        let rows = p.by_layer(level);
        let sum = |f: fn(&LayerRow) -> f64| rows.iter().map(f).sum::<f64>();
        assert!(
            close(sum(|r| r.forward_sec), phase(Phase::Forward)),
            "{level:?}"
        );
        assert!(
            close(sum(|r| r.backward_sec), phase(Phase::Backward)),
            "{level:?}"
        );
        assert!(
            close(sum(|r| r.optimizer_sec), phase(Phase::Optimizer)),
            "{level:?}"
        );
        assert!(close(sum(|r| r.share), 1.0), "{level:?}");
        assert_eq!(rows.iter().map(|r| r.nodes).sum::<usize>(), p.ops.len());
    }
    // The fake clock gives OP_ID i (i + 1) ms in iteration 0, twice that in 1, thrice in
    // 2: a mean of 2 (i + 1) ms. The stem's forward is its conv, OP_ID 0.
    let layers = p.by_layer(LayerLevel::Layer);
    let stem = layers.iter().find(|r| r.name == "stem").unwrap();
    assert!(close(stem.forward_sec, 2e-3), "{}", stem.forward_sec);
    let expected_backward: f64 = p
        .ops
        .iter()
        .filter(|o| o.phase == Phase::Backward && o.origin.forward_op == Some(0))
        .map(|o| 2e-3 * (o.op_id + 1) as f64)
        .sum();
    assert!(expected_backward > 0.0 && close(stem.backward_sec, expected_backward));
    assert_eq!(stem.parameters, 6 * 3 * 3 * 3, "stem.weight");
    let no_layer = layers.iter().find(|r| r.name == "(no layer)").unwrap();
    assert_eq!(
        no_layer.nodes, 2,
        "flatten (recorded outside any layer) and its backward"
    );
    let stages = p.by_layer(LayerLevel::Stage);
    let block = stages.iter().find(|r| r.name == "block").unwrap();
    let in_block: usize = layers
        .iter()
        .filter(|r| r.name == "block" || r.name.starts_with("block."))
        .map(|r| r.nodes)
        .sum();
    assert_eq!(block.nodes, in_block);
    let text = p.to_string();
    assert_mentions(&text, &["Per-stage time", "Per-layer time"]);
    let json: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
    assert_eq!(json["layers"].as_array().unwrap().len(), layers.len());
    assert_eq!(json["stages"].as_array().unwrap().len(), stages.len());
}

/// A host clock that returns `times` in order, one per call.
fn scripted(times: Vec<f64>) -> wick_profiler::WallClock {
    let mut times = times.into_iter();
    Box::new(move || times.next().expect("the script covers every clock read"))
}

/// Six steps on a scripted host clock: the loop waits `input_wait` for each batch, the
/// copy takes 1 ms, the graph 50 ms, the loss read-back 1 ms, the non-finite check
/// 0.5 ms, the metrics 0.25 ms, the loop's own work 2 ms. The first step is skipped.
fn whole_step(input_wait: f64) -> wick_profiler::StepProfile {
    use wick_graph::StepPart;
    let (copy, run, read_back, other) = (1e-3, 50e-3, 1e-3, 2e-3);
    let (check, metrics) = (0.5e-3, 0.25e-3);
    let period = input_wait + copy + run + read_back + check + metrics + other;
    let steps = 6;
    // The profiler reads the clock as each iteration starts and ends.
    let times = (0..steps)
        .flat_map(|k| {
            let start = 1.0 + k as f64 * period;
            [start, start + run]
        })
        .collect();
    let mut s = setup_with(1, 1, [1.0, 1.0, 1.0], Some(scripted(times)));
    for k in 0..steps {
        s.iteration.set(k);
        s.exec.report_step_part(StepPart::InputWait, input_wait);
        s.exec.report_step_part(StepPart::HostToDevice, copy);
        s.exec.run().unwrap();
        s.exec.report_step_part(StepPart::LossReadBack, read_back);
        s.exec.report_step_part(StepPart::NonFiniteCheck, check);
        s.exec.report_step_part(StepPart::Metrics, metrics);
    }
    let p = s.exec.hook::<TimeProfiler>().unwrap().profile();
    let step = p.step.expect("parts were reported");
    // Intervals start at timed iterations 1..=4 (the last one has no next start).
    assert_eq!(step.intervals, 4);
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(close(step.wall_sec, period), "{step:?}");
    assert!(close(step.input_wait_sec, input_wait) && close(step.run_sec, run));
    assert!(close(step.host_to_device_sec, copy) && close(step.loss_read_back_sec, read_back));
    assert!(
        close(step.other_sec, other),
        "the rest is the loop's own work: {step:?}"
    );
    assert!(close(step.non_finite_check_sec, check) && close(step.metrics_sec, metrics));
    assert_eq!(step.checkpoint_sec, 0.0);
    let parts = step.input_wait_sec
        + step.host_to_device_sec
        + step.run_sec
        + step.loss_read_back_sec
        + step.non_finite_check_sec
        + step.metrics_sec
        + step.other_sec;
    assert!(close(parts, step.wall_sec), "the parts add up to the step");
    // The named parts are what the text and the HTML show, and they add up too.
    let named: f64 = step.parts().iter().map(|(_, sec)| sec).sum();
    assert!(close(named, step.wall_sec));
    let names: Vec<&str> = step.parts().iter().map(|(n, _)| *n).collect();
    assert!(names.contains(&"non-finite check") && !names.contains(&"checkpoints"));
    assert!(p.to_string().contains(&step.lines()));
    step
}

/// Issue #12: a slow loader makes the input-bound verdict fire, a prefetching one does not.
#[test]
fn a_slow_loader_is_input_bound_and_a_prefetching_one_is_not() {
    use wick_profiler::InputVerdict;
    let slow = whole_step(0.100);
    assert_eq!(slow.verdict(), InputVerdict::InputBound);
    assert!(
        slow.lines()
            .contains("input-bound: 64.6% of the step waits for data"),
        "{}",
        slow.lines()
    );
    let partly = whole_step(0.005);
    assert_eq!(partly.verdict(), InputVerdict::PartlyInputBound);
    let prefetched = whole_step(0.0005);
    assert_eq!(prefetched.verdict(), InputVerdict::NotInputBound);
    assert!(
        prefetched.lines().contains("not input-bound: 0.9%"),
        "{}",
        prefetched.lines()
    );
}

#[test]
fn without_reported_parts_there_is_no_whole_step_figure() {
    let mut s = setup(1, 0, [1.0, 1.0, 1.0]);
    run(&mut s, 3);
    let p = s.exec.hook::<TimeProfiler>().unwrap().profile();
    assert!(p.step.is_none());
    assert!(!p.to_string().contains("Whole step"));
}

/// A memory counter whose peak the test scripts; it counts its resets.
struct FakeCounter {
    peak: Shared<u64>,
    resets: Shared<usize>,
}

impl wick_profiler::MemoryCounter for FakeCounter {
    fn reset_peak(&self) {
        self.resets.set(self.resets.get() + 1);
    }
    fn peak_bytes(&self) -> u64 {
        self.peak.get()
    }
    fn live_bytes(&self) -> u64 {
        0
    }
}

/// Issue #12's memory view: the graph's predicted peak (where, and what it is made of)
/// beside the counting allocator's peak over the timed iterations.
#[test]
fn memory_prediction_and_measured_peak() {
    let (peak, resets) = (Shared::new(0u64), Shared::new(0usize));
    let counter = FakeCounter {
        peak: peak.clone(),
        resets: resets.clone(),
    };
    let momentum = SgdParams {
        momentum: 0.9,
        ..Default::default()
    };
    let mut exec = small_train_executor(6, momentum, 0.0);
    let plan = exec.graph().memory_plan();
    let profiler = TimeProfiler::new(1, 1).with_memory_counter(Box::new(counter));
    exec.add_hook(profiler).unwrap();
    for measured in [900u64, 700, 1200, 800] {
        peak.set(measured);
        exec.run().unwrap();
    }
    let p = exec.hook::<TimeProfiler>().unwrap().profile();
    let m = p
        .memory
        .clone()
        .expect("timed iterations have a memory view");
    assert_eq!(
        resets.get(),
        3,
        "the peak restarts at each timed iteration (verbosity 1: not per op)"
    );
    assert_eq!(
        m.measured_peak_bytes,
        Some(1200),
        "the largest over timed iterations"
    );
    assert_eq!(m.predicted_peak_bytes, plan.peak_bytes);
    assert_eq!(m.live_after.len(), exec.graph().nodes().len());
    assert_eq!(m.live_after.iter().max(), Some(&m.predicted_peak_bytes));
    assert_eq!(
        m.split.total(),
        m.predicted_peak_bytes,
        "the split adds up to the peak"
    );
    // Parameters and their momentum buffers are the same size; the peak is in backward,
    // where activations are still kept for it.
    assert_eq!(m.split.parameters, m.split.optimizer_state);
    assert!(
        m.split.saved_for_backward > 0 && m.split.gradients > 0,
        "{m:?}"
    );
    let at = m.peak_op.unwrap();
    assert_eq!(exec.graph().nodes()[at].phase, Phase::Backward);
    assert!(p.to_string().contains(&m.lines()));
}

#[test]
fn a_pytorch_schedule_times_its_active_iterations_and_is_recorded_in_the_json() {
    use wick_profiler::{RecordLevel, Schedule};
    let sgd = SgdParams {
        lr: 0.01,
        ..Default::default()
    };
    let mut exec = small_train_executor(6, sgd, 0.0);
    // Two cycles of: 1 waiting, 1 warm-up, 2 timed; the 9th and 10th iterations are past
    // the last cycle.
    let schedule = Schedule::new(1, 1, 2, 2);
    exec.add_hook(TimeProfiler::with_schedule(schedule, RecordLevel::Phases))
        .unwrap();
    for _ in 0..10 {
        exec.run().unwrap();
    }
    let p = exec.hook::<TimeProfiler>().unwrap().profile();
    assert_eq!(p.timed_iterations, 4);
    assert_eq!(p.skipped, Some(6));
    assert!(p.ops.is_empty(), "RecordLevel::Phases times no op");
    assert_eq!(p.verbosity, 1);
    let back = wick_profiler::Profile::from_json(&p.to_json()).unwrap();
    assert_eq!(back.schedule, schedule);
    let json: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
    assert_eq!(json["schedule"]["active"], 2);
    assert_eq!(json["schedule"]["repeat"], 2);
}

/// Issue #40: with a bounded schedule of several cycles, the peaks are probed when the
/// profiler is attached and again between the cycles, in the untimed iterations.
#[test]
fn peaks_are_probed_between_the_schedule_cycles() {
    use wick_profiler::{RecordLevel, Schedule, TimeProfiler};

    let mut exec = relu_inference(8);
    // wait=1, active=1, repeat=2: the second and fourth iterations timed, a probe after
    // the second.
    let schedule = Schedule::new(1, 0, 1, 2);
    let profiler = TimeProfiler::with_schedule(schedule, RecordLevel::Phases).with_peak_probes();
    exec.add_hook(profiler).unwrap();
    let probes = |exec: &Executor| exec.hook::<TimeProfiler>().unwrap().peak_probes_taken();
    assert_eq!(probes(&exec), 1, "when attached");
    let mut seen = Vec::new();
    for _ in 0..4 {
        exec.run().unwrap();
        seen.push(probes(&exec));
    }
    assert_eq!(seen, [1, 2, 2, 2]);
    let p = exec
        .hook::<TimeProfiler>()
        .unwrap()
        .profile_with_peaks()
        .unwrap();
    let machine = p.machine.unwrap();
    let [lo, hi] = machine.flops_range.unwrap();
    assert!(lo <= hi && hi == machine.flops_per_sec);
    assert_eq!(p.timed_iterations, 2);
}
