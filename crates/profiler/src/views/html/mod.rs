//! The HTML report (`wick-prof report`, `--report`): one self-contained file, no network,
//! inline SVG, that opens from disk. It shows the step breakdown (input included) and the
//! phase times, the data loader's stages per thread, the step time of every timed iteration with the schedule's cycles, the per-op-type chart and table, per-layer stacked forward/backward/
//! optimizer bars, a flame graph by module, the memory curve over OP_IDs with its peak, the roofline scatter, the
//! recommendations and, given a baseline, the diff. Every number shown carries its JSON
//! value in a `data-value` attribute, so a test can check the page against the file.

use std::fmt::Write as _;

use crate::compare::diff::Diff;
use crate::profile::data::Profile;
use crate::profile::layers::LayerLevel;
use crate::views::html::charts::{
    bars, esc, linear_axis, phase_color, phase_legend, stacked, type_phase, x_axis, Frame,
    OTHER_COLORS,
};
use crate::views::html::flame::flame_section;
use crate::views::html::iterations::iteration_section;
use crate::views::html::memory::memory_section;
use crate::views::html::roofline::roofline_section;
use wick_graph::ir::Phase;

pub mod charts;
mod flame;
mod input;
mod iterations;
mod memory;
mod roofline;

/// A number as shown (milliseconds, 3 decimals) with its exact JSON value (seconds).
fn ms(key: &str, sec: f64) -> String {
    format!(
        "<span class=\"num\" data-key=\"{}\" data-value=\"{sec}\">{:.3} ms</span>",
        esc(key),
        sec * 1e3
    )
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
         .verdict{{font-weight:bold}} .warn{{color:#a60}} pre{{white-space:pre-wrap}}\
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
    input::section(&mut b, p);
    iteration_section(&mut b, p);
    class_section(&mut b, p);
    op_type_section(&mut b, p);
    layer_section(&mut b, p);
    flame_section(&mut b, p);
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
    let (mean, median) = (
        ms("iteration_sec", p.iteration_sec),
        ms("iteration_median_sec", p.iteration_median_sec),
    );
    let (timed, phases) = (p.timed_iterations, phase_ms.join(", "));
    let _ = write!(
        b,
        "<h2>Step</h2><p>Iteration {mean} (mean of {timed} timed; median {median}); {phases}.</p>"
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
        let (wall, run) = (
            ms("step.wall_sec", s.wall_sec),
            ms("step.run_sec", s.run_sec),
        );
        let (intervals, waits) = (s.intervals, 100.0 * s.input_share());
        let _ = write!(
            b,
            "<p id=\"input-verdict\">Whole step {wall} (mean of the {intervals} timed iterations that the next step's start closes; over them the graph run is {run}): {waits:.1}% waits for data.</p>"
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

/// Op time per kernel class (matmul, attention, layer norm...), one bar each.
fn class_section(b: &mut String, p: &Profile) {
    let rows = p.by_class();
    if rows.is_empty() {
        return;
    }
    b.push_str("<h2>Kernel classes</h2>");
    let chart: Vec<(String, f64, &str)> = rows
        .iter()
        .map(|r| (r.class.name().to_string(), r.total_sec * 1e3, "#4c78a8"))
        .collect();
    b.push_str(&bars("kernel-classes", &chart, "ms per iteration"));
    b.push_str("<table id=\"kernel-class-table\"><tr><th>Class</th><th>Nodes</th><th>Total</th><th>Share</th><th>GFLOP/s</th><th>Kernels</th></tr>");
    for r in &rows {
        let kernels: Vec<&str> = r.kernels.iter().map(|(name, _)| name.as_str()).collect();
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.1}%</td><td>{:.1}</td><td>{}</td></tr>",
            esc(r.class.name()),
            r.nodes,
            ms(&format!("class.{}", r.class.name()), r.total_sec),
            100.0 * r.share,
            r.gflops(),
            esc(&kernels.join(", "))
        );
    }
    b.push_str("</table>");
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
        let gflops = r.gflops();
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
    let (ticks, top_tick) = linear_axis(max);
    let frame = Frame::new(200.0, 4.0, 640.0, 18.0 * top.len() as f64);
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
            per_image: None,
            machine_moved: None,
            one_sided: Vec::new(),
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
