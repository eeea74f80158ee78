//! The HTML report (`wick-prof report`, `--report`): one self-contained file, no network,
//! inline SVG, that opens from disk. It shows the step breakdown (input included) and the
//! phase times, the per-op-type chart and table, per-layer stacked forward/backward/
//! optimizer bars, the memory curve over OP_IDs with its peak, the roofline scatter, the
//! recommendations and, given a baseline, the diff. Every number shown carries its JSON
//! value in a `data-value` attribute, so a test can check the page against the file.

use std::fmt::Write as _;

use crate::compare::diff::Diff;
use crate::profile::data::Profile;
use crate::profile::layers::LayerLevel;
use crate::views::html_charts::{
    bars, esc, legend, linear_ticks, phase_color, stacked, x_axis, y_axis, Frame, LabelPlacer,
    OTHER_COLORS,
};
use crate::views::roofline::beyond_roof_note;
use wick_graph::ir::Phase;

/// A number as shown (milliseconds, 3 decimals) with its exact JSON value (seconds).
fn ms(key: &str, sec: f64) -> String {
    format!(
        "<span class=\"num\" data-key=\"{}\" data-value=\"{sec}\">{:.3} ms</span>",
        esc(key),
        sec * 1e3
    )
}

/// The legend of the three phases, as every chart colours them.
fn phase_legend(b: &mut String, p: &Profile) {
    b.push_str("<p class=\"meta\">");
    for ph in Phase::ALL.iter().filter(|ph| p.has_phase(**ph)) {
        let _ = write!(
            b,
            "<span style=\"color:{}\">&#9632; {}</span> ",
            phase_color(*ph),
            ph.as_str()
        );
    }
    b.push_str("</p>");
}

/// The page for `p`, with the diff view when `diff` is given.
pub fn report(p: &Profile, diff: Option<&Diff>) -> String {
    let mut b = String::new();
    let title = format!(
        "wick profile: {} (batch {}, {})",
        p.run.model, p.run.batch, p.run.image_size
    );
    let _ = write!(
        b,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{}</title><style>\
         body{{font-family:sans-serif;margin:24px;color:#222}} h2{{margin-top:28px;border-bottom:1px solid #ccc}}\
         table{{border-collapse:collapse;font-size:12px}} td,th{{border:1px solid #ddd;padding:2px 6px;text-align:right}}\
         td:first-child,th:first-child{{text-align:left}} .flag{{color:#c00;font-weight:bold}} .meta{{color:#555;font-size:12px}}\
         .verdict{{font-weight:bold}} .warn{{color:#a60}}\
         </style></head><body><h1>{}</h1>",
        esc(&title),
        esc(&title)
    );
    let _ = write!(
        b,
        "<p class=\"meta\">device {} &middot; CPU {} &middot; {} threads &middot; {} &middot; wick {} &middot; graph {} &middot; {} timed iterations after {} skipped</p>",
        esc(&p.device), esc(&p.run.cpu_model), p.run.threads, esc(p.method.as_deref().unwrap_or("no timer")),
        esc(&p.run.wick_version), esc(&p.graph_hash), p.timed_iterations, p.skipped.unwrap_or(0)
    );
    if let Some(c) = &p.cpu_contention {
        let class = if c.is_contended() { "warn" } else { "meta" };
        let _ = write!(
            b,
            "<p class=\"{class}\" id=\"contention\">{}</p>",
            esc(c.line().trim_end())
        );
    }
    if let Some(d) = diff {
        diff_section(&mut b, d);
    }
    step_section(&mut b, p);
    op_type_section(&mut b, p);
    layer_section(&mut b, p);
    memory_section(&mut b, p);
    roofline_section(&mut b, p);
    let _ = write!(b, "<h2>Recommendations</h2><ul id=\"recommendations\">");
    let fired = p.recommendations();
    if fired.is_empty() {
        b.push_str("<li>None: no rule's measured trigger reached its threshold.</li>");
    }
    for r in fired {
        let _ = write!(
            b,
            "<li><b>[{}]</b> {} &rarr; {}</li>",
            r.rule,
            esc(&r.figure),
            esc(&r.advice)
        );
    }
    b.push_str("</ul></body></html>\n");
    b
}

fn step_section(b: &mut String, p: &Profile) {
    let phase_ms: Vec<String> = Phase::ALL
        .iter()
        .filter(|ph| p.has_phase(**ph))
        .map(|ph| {
            let sec = match ph {
                Phase::Forward => p.forward_sec,
                Phase::Backward => p.backward_sec,
                Phase::Optimizer => p.optimizer_sec,
            };
            format!(
                "{} {}",
                ph.as_str(),
                ms(&format!("{}_sec", ph.as_str()), sec)
            )
        })
        .collect();
    let _ = write!(
        b,
        "<h2>Step</h2><p>Iteration {} (mean of {} timed; median {}); {}.</p>",
        ms("iteration_sec", p.iteration_sec),
        p.timed_iterations,
        ms("iteration_median_sec", p.iteration_median_sec),
        phase_ms.join(", ")
    );
    // The whole step, with the text report's parts and shares.
    if let Some(s) = &p.step {
        let mut other = OTHER_COLORS.iter();
        let parts: Vec<(&str, f64, &str)> = s
            .parts()
            .into_iter()
            .map(|(name, sec)| {
                let color = if name == "graph run" {
                    "#555"
                } else {
                    other.next().copied().unwrap_or("#bab0ac")
                };
                (name, sec, color)
            })
            .collect();
        let _ = write!(
            b,
            "<p id=\"input-verdict\">Whole step {} (mean of the {} timed iterations that the next step's start closes; over them the graph run is {}): {:.1}% waits for data.</p>",
            ms("step.wall_sec", s.wall_sec),
            s.intervals,
            ms("step.run_sec", s.run_sec),
            100.0 * s.input_share()
        );
        b.push_str(&stacked("step-breakdown", &parts, "% of the whole step"));
    }
    // The iteration by phase: each phase's share as the text's step breakdown gives it.
    let mut parts: Vec<(&str, f64, &str)> = p
        .phases
        .iter()
        .map(|ph| (ph.phase.as_str(), ph.sec, phase_color(ph.phase)))
        .collect();
    let phases: f64 = p.phases.iter().map(|ph| ph.sec).sum();
    parts.push((
        "between phases",
        (p.iteration_sec - phases).max(0.0),
        "#bab0ac",
    ));
    b.push_str(
        "<p>The iteration by phase (the phase's first op's start to its last op's end):</p>",
    );
    b.push_str(&stacked(
        "iteration-breakdown",
        &parts,
        "% of the iteration",
    ));
    let cycles = p.cycle_lines();
    if !cycles.is_empty() {
        let _ = write!(b, "<pre id=\"cycles\">{}</pre>", esc(&cycles));
    }
}

/// The phase most of an op type's time is in.
fn type_phase(p: &Profile, name: &str) -> Phase {
    let mut by_phase = [0.0; 3];
    for o in p.ops.iter().filter(|o| o.name == name) {
        by_phase[o.phase as usize] += o.mean_sec;
    }
    let i = (0..3)
        .max_by(|a, b| by_phase[*a].total_cmp(&by_phase[*b]))
        .unwrap_or(0);
    Phase::ALL[i]
}

fn op_type_section(b: &mut String, p: &Profile) {
    let rows = p.by_type();
    if rows.is_empty() {
        b.push_str("<h2>Op types</h2><p>No per-op timings (verbosity 2 records them).</p>");
        return;
    }
    b.push_str("<h2>Op types</h2>");
    phase_legend(b, p);
    let chart: Vec<(String, f64, &str)> = rows
        .iter()
        .map(|r| {
            (
                r.name.clone(),
                r.total_sec * 1e3,
                phase_color(type_phase(p, &r.name)),
            )
        })
        .collect();
    b.push_str(&bars("op-types", &chart, "ms per iteration"));
    b.push_str("<table id=\"op-type-table\"><tr><th>Kernel</th><th>Nodes</th><th>Total</th><th>Median node</th><th>Share</th><th>GFLOP/s</th></tr>");
    for r in &rows {
        let gflops = if r.total_sec > 0.0 {
            r.flops as f64 / r.total_sec / 1e9
        } else {
            0.0
        };
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.3} ms</td><td>{:.1}%</td><td>{gflops:.1}</td></tr>",
            esc(&r.name),
            r.nodes,
            ms(&format!("op_type.{}", r.name), r.total_sec),
            r.median_sec * 1e3,
            100.0 * r.share
        );
    }
    b.push_str("</table>");
}

fn layer_section(b: &mut String, p: &Profile) {
    let rows = p.by_layer(LayerLevel::Layer);
    if rows.is_empty() {
        return;
    }
    b.push_str("<h2>Layers (top 20)</h2>");
    phase_legend(b, p);
    let top: Vec<_> = rows.iter().take(20).collect();
    let max = top.iter().map(|r| r.total_sec * 1e3).fold(0.0, f64::max);
    let ticks = linear_ticks(max);
    let top_tick = *ticks.last().unwrap_or(&1.0);
    let frame = Frame {
        left: 200.0,
        top: 4.0,
        width: 640.0,
        height: 18.0 * top.len() as f64,
    };
    let x = |v: f64| frame.left + frame.width * v / top_tick;
    let _ = write!(
        b,
        "<svg id=\"layers\" xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"{:.0}\">",
        frame.bottom() + 40.0
    );
    x_axis(b, frame, &ticks, &x, "ms per iteration");
    for (i, r) in top.iter().enumerate() {
        let y = frame.top + i as f64 * 18.0;
        let _ = write!(
            b,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"end\">{}</text>",
            frame.left - 6.0,
            y + 13.0,
            esc(&r.name)
        );
        let mut at = 0.0;
        for (ph, v) in [
            (Phase::Forward, r.forward_sec),
            (Phase::Backward, r.backward_sec),
            (Phase::Optimizer, r.optimizer_sec),
        ] {
            let v = v * 1e3;
            let _ = write!(
                b,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"14\" fill=\"{}\"><title>{} {}: {v:.3} ms</title></rect>",
                x(at),
                y + 2.0,
                x(at + v) - x(at),
                phase_color(ph),
                esc(&r.name),
                ph.as_str()
            );
            at += v;
        }
    }
    b.push_str("</svg><table id=\"layer-table\"><tr><th>Layer</th><th>Forward</th><th>Backward</th><th>Optimizer</th><th>Total</th></tr>");
    for r in &top {
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.name),
            ms(&format!("layer.{}.forward", r.name), r.forward_sec),
            ms(&format!("layer.{}.backward", r.name), r.backward_sec),
            ms(&format!("layer.{}.optimizer", r.name), r.optimizer_sec),
            ms(&format!("layer.{}.total", r.name), r.total_sec)
        );
    }
    b.push_str("</table>");
}

fn memory_section(b: &mut String, p: &Profile) {
    let Some(m) = &p.memory else { return };
    let mib = |v: u64| v as f64 / (1u64 << 20) as f64;
    let _ = write!(
        b,
        "<h2>Memory</h2><p>Predicted peak <span class=\"num\" data-key=\"memory.predicted_peak_bytes\" data-value=\"{}\">{:.1} MiB</span>{}{}</p>",
        m.predicted_peak_bytes,
        mib(m.predicted_peak_bytes),
        m.peak_op.map(|op| format!(" after OP_ID{op}")).unwrap_or_default(),
        m.measured_peak_bytes
            .map(|v| format!("; measured (counting allocator) {:.1} MiB", mib(v)))
            .unwrap_or_default()
    );
    let n = m.live_after.len().max(2);
    let measured_max = m.ops.iter().map(|o| o.peak_bytes).max().unwrap_or(0);
    let max = m
        .live_after
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(measured_max);
    let ticks = linear_ticks(mib(max));
    let top_tick = *ticks.last().unwrap_or(&1.0);
    let frame = Frame {
        left: 70.0,
        top: 8.0,
        width: 800.0,
        height: 200.0,
    };
    let x = |op: f64| frame.left + frame.width * op / (n - 1) as f64;
    let y = |v: f64| frame.bottom() - frame.height * v / top_tick;
    let _ = write!(
        b,
        "<svg id=\"memory\" xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"{:.0}\">",
        frame.bottom() + 60.0
    );
    // Each op's phase as a light band behind the curves.
    for (i, op) in p.ops.iter().enumerate() {
        let _ = write!(
            b,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.2}\" height=\"{:.1}\" fill=\"{}\" opacity=\"0.12\"/>",
            x(i as f64 - 0.5).max(frame.left),
            frame.top,
            frame.width / (n - 1) as f64,
            frame.height,
            phase_color(op.phase)
        );
    }
    let op_ticks: Vec<f64> = linear_ticks((n - 1) as f64)
        .into_iter()
        .filter(|t| *t <= (n - 1) as f64)
        .collect();
    x_axis(b, frame, &op_ticks, &x, "OP_ID (execution order)");
    y_axis(b, frame, &ticks, &y, "live memory (MiB)");
    let line = |values: &mut dyn Iterator<Item = (usize, u64)>| -> String {
        values
            .map(|(i, v)| format!("{:.1},{:.1}", x(i as f64), y(mib(v))))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let _ = write!(
        b,
        "<polyline id=\"memory-predicted\" fill=\"none\" stroke=\"#333\" stroke-width=\"1.5\" points=\"{}\"/>",
        line(&mut m.live_after.iter().copied().enumerate())
    );
    if !m.ops.is_empty() {
        let _ = write!(
            b,
            "<polyline id=\"memory-measured\" fill=\"none\" stroke=\"#e15759\" stroke-width=\"1.5\" stroke-dasharray=\"4 2\" points=\"{}\"/>",
            line(&mut m.ops.iter().map(|o| o.peak_bytes).enumerate())
        );
    }
    if let Some(op) = m.peak_op {
        let _ = write!(
            b,
            "<circle id=\"memory-peak\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"5\" fill=\"#333\"><title>predicted peak after OP_ID{op}</title></circle>",
            x(op as f64),
            y(mib(m.predicted_peak_bytes))
        );
    }
    let mut items = vec![("predicted live after each op", "#333")];
    if !m.ops.is_empty() {
        items.push(("measured: each op's peak while it runs", "#e15759"));
    }
    legend(b, frame.left, frame.bottom() + 52.0, &items);
    b.push_str("</svg>");
    let categories = m.categories();
    if !categories.is_empty() {
        b.push_str("<table id=\"memory-categories\"><tr><th>Category</th><th>Predicted (MiB)</th><th>Measured (MiB)</th><th>Error (MiB)</th></tr>");
        for c in &categories {
            let _ = write!(
                b,
                "<tr><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:+.1}</td></tr>",
                esc(c.name),
                mib(c.predicted),
                mib(c.measured),
                mib(c.measured) - mib(c.predicted)
            );
        }
        b.push_str("</table>");
    }
}

fn roofline_section(b: &mut String, p: &Profile) {
    let Some(machine) = &p.machine else {
        b.push_str("<h2>Roofline</h2><p>No machine peaks were measured for this profile.</p>");
        return;
    };
    let rows: Vec<_> = p
        .roofline(machine)
        .into_iter()
        .filter(|r| r.flops > 0 && r.bytes > 0)
        .collect();
    let _ = write!(
        b,
        "<h2>Roofline</h2><p id=\"roof-headline\" class=\"verdict\">{}</p><p>Machine: GEMM <span class=\"num\" data-key=\"machine.flops_per_sec\" data-value=\"{}\">{:.1} GFLOP/s</span>, copy {:.1} GB/s.</p>",
        esc(&p.roof_headline(machine)),
        machine.flops_per_sec,
        machine.flops_per_sec / 1e9,
        machine.bytes_per_sec / 1e9
    );
    phase_legend(b, p);
    let peak = machine.flops_per_sec / 1e9;
    let bw = machine.bytes_per_sec / 1e9;
    // Decades that hold every point and both roofs.
    let decade = |v: f64, up: bool| {
        let l = v.max(1e-9).log10();
        if up {
            l.ceil()
        } else {
            l.floor()
        }
    };
    let (mut x0, mut x1) = (-2.0f64, 3.0f64);
    let (mut y0, mut y1) = (decade(peak, false) - 3.0, decade(peak * 1.5, true));
    for r in &rows {
        x0 = x0.min(decade(r.intensity, false));
        x1 = x1.max(decade(r.intensity, true));
        y0 = y0.min(decade(r.gflops_per_sec, false));
        y1 = y1.max(decade(r.gflops_per_sec, true));
    }
    let frame = Frame {
        left: 70.0,
        top: 10.0,
        width: 780.0,
        height: 380.0,
    };
    let x = |i: f64| frame.left + frame.width * (i.log10() - x0) / (x1 - x0);
    let y = |g: f64| frame.bottom() - frame.height * (g.log10() - y0) / (y1 - y0);
    let _ = write!(
        b,
        "<svg id=\"roofline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"{:.0}\">",
        frame.bottom() + 45.0
    );
    let xt: Vec<f64> = (x0 as i32..=x1 as i32).map(|e| 10f64.powi(e)).collect();
    let yt: Vec<f64> = (y0 as i32..=y1 as i32).map(|e| 10f64.powi(e)).collect();
    x_axis(
        b,
        frame,
        &xt,
        &x,
        "arithmetic intensity (FLOP/byte, log scale)",
    );
    y_axis(b, frame, &yt, &y, "achieved GFLOP/s (log scale)");
    // The memory roof (GFLOP/s = GB/s x intensity) from where it enters the plot to the
    // ridge point, then the compute roof.
    let ridge = machine.ridge();
    let enter = (10f64.powf(x0)).max(10f64.powf(y0) / bw);
    let _ = write!(
        b,
        "<line id=\"memory-roof\" data-gbytes-per-sec=\"{bw}\" x1=\"{:.2}\" y1=\"{:.2}\" x2=\"{:.2}\" y2=\"{:.2}\" stroke=\"#888\" stroke-width=\"2\"/><line id=\"compute-roof\" data-gflops-per-sec=\"{peak}\" x1=\"{:.2}\" y1=\"{:.2}\" x2=\"{:.2}\" y2=\"{:.2}\" stroke=\"#888\" stroke-width=\"2\"/>",
        x(enter), y(bw * enter), x(ridge), y(peak),
        x(ridge), y(peak), x(10f64.powf(x1)), y(peak)
    );
    let mut placer = LabelPlacer::new(frame);
    let points: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r,
                x(r.intensity),
                y(r.gflops_per_sec),
                3.0 + 12.0 * r.share.sqrt(),
            )
        })
        .collect();
    for (_, px, py, rad) in &points {
        placer.reserve([px - rad, py - rad, px + rad, py + rad]);
    }
    let mut unlabelled = Vec::new();
    for (r, px, py, rad) in &points {
        let _ = write!(
            b,
            "<circle class=\"op-point\" data-name=\"{}\" data-intensity=\"{}\" data-gflops=\"{}\" data-roof-share=\"{}\" cx=\"{px:.2}\" cy=\"{py:.2}\" r=\"{rad:.1}\" fill=\"{}\" opacity=\"0.8\"><title>{}: {:.2} FLOP/B, {:.1} GFLOP/s, {:.0}% of roof</title></circle>",
            esc(&r.name), r.intensity, r.gflops_per_sec, r.roofline_share,
            phase_color(type_phase(p, &r.name)), esc(&r.name), r.intensity, r.gflops_per_sec, 100.0 * r.roofline_share
        );
    }
    for (r, px, py, rad) in &points {
        match placer.place(&r.name, *px, *py, *rad) {
            Some((tx, ty, anchor)) => {
                let _ = write!(
                    b,
                    "<text class=\"point-label\" x=\"{tx:.1}\" y=\"{ty:.1}\" font-size=\"10\" text-anchor=\"{anchor}\">{}</text>",
                    esc(&r.name)
                );
            }
            None => unlabelled.push(r.name.as_str()),
        }
    }
    b.push_str("</svg>");
    if !unlabelled.is_empty() {
        let _ = write!(
            b,
            "<p class=\"meta\">Not labelled (no free space; hover for their figures): {}</p>",
            esc(&unlabelled.join(", "))
        );
    }
    if let Some(note) = beyond_roof_note(&rows) {
        let _ = write!(b, "<p class=\"meta\">{}</p>", esc(&note));
    }
}

fn diff_section(b: &mut String, d: &Diff) {
    let _ = write!(
        b,
        "<h2>Diff against the baseline</h2><p id=\"diff-verdict\" class=\"verdict\">{}</p>",
        esc(&d.verdict())
    );
    for w in &d.warnings {
        let _ = write!(b, "<p class=\"warn\">warning: {}</p>", esc(w));
    }
    let _ = write!(b, "<table id=\"diff\"><tr><th>Kind</th><th>Name</th><th>Baseline</th><th>This</th><th>Ratio</th><th>{:.0}% interval</th><th>Detectable</th></tr>", 100.0 * d.confidence);
    for r in d.rows.iter().filter(|r| r.kind != "layer" || r.flagged) {
        let class = if r.flagged { " class=\"flag\"" } else { "" };
        let _ = write!(b, "<tr{class}><td>{}</td><td>{}</td><td>{:.3} ms</td><td>{:.3} ms</td><td>{:.3}</td><td>[{:.3}, {:.3}]</td><td>x{:.3} / x{:.3}</td></tr>",
            r.kind, if r.kind == r.name { String::new() } else { esc(&r.name) }, r.a_sec * 1e3, r.b_sec * 1e3, r.ratio, r.low, r.high, r.detectable_slower, r.detectable_faster);
    }
    b.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::diff::DiffRow;

    #[test]
    fn the_page_is_self_contained_and_shows_the_diff_when_given_one() {
        let p = Profile {
            iteration_sec: 0.25,
            ..Default::default()
        };
        let page = report(&p, None);
        assert!(page.starts_with("<!DOCTYPE html>") && page.trim_end().ends_with("</html>"));
        assert!(
            !page.contains("http://") || !page.contains("src=\"http"),
            "no network"
        );
        assert!(!page.contains("<script src"), "no external scripts");
        assert!(page.contains("data-key=\"iteration_sec\" data-value=\"0.25\">250.000 ms"));
        assert!(!page.contains("id=\"diff\""));
        let d = Diff {
            same_graph: true,
            rows: vec![DiffRow {
                kind: "op type",
                name: "ReLU<x>".into(),
                a_sec: 0.001,
                b_sec: 0.0013,
                ratio: 1.3,
                low: 1.2,
                high: 1.4,
                flagged: true,
                detectable_slower: 1.1,
                detectable_faster: 0.9,
            }],
            warnings: vec!["threads differs: A 1, B 2".into()],
            normalized: false,
            threshold: 0.05,
            min_share: 0.02,
            confidence: 0.95,
            runs: (1, 1),
        };
        let page = report(&p, Some(&d));
        assert!(page.contains("id=\"diff\"") && page.contains("class=\"flag\""));
        assert!(page.contains("id=\"diff-verdict\" class=\"verdict\">Verdict: SLOWER"));
        assert!(page.contains("warning: threads differs"));
        assert!(
            page.find("diff-verdict") < page.find("id=\"diff\""),
            "the verdict comes first"
        );
        assert!(page.contains("ReLU&lt;x&gt;"), "names are escaped");
    }
}
