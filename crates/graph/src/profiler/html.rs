//! The HTML report (`wick-prof report`, `--report`): one self-contained file, no network,
//! inline SVG, that opens from disk. It shows the step breakdown (input included) and the
//! phase times, the per-op-type chart and table, per-layer stacked forward/backward/
//! optimizer bars, the memory curve over OP_IDs with its peak, the roofline scatter, the
//! recommendations and, given a baseline, the diff. Every number shown carries its JSON
//! value in a `data-value` attribute, so a test can check the page against the file.

use std::fmt::Write as _;

use super::diff::Diff;
use super::layers::LayerLevel;
use super::profile::Profile;
use super::roofline::Bound;

const COLORS: [&str; 8] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f",
];

/// HTML-escapes `s`.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A number as shown (milliseconds, 3 decimals) with its exact JSON value (seconds).
fn ms(key: &str, sec: f64) -> String {
    format!(
        "<span class=\"num\" data-key=\"{}\" data-value=\"{sec}\">{:.3} ms</span>",
        esc(key),
        sec * 1e3
    )
}

/// A horizontal bar chart: one bar per (label, value), scaled to the largest.
fn bars(id: &str, rows: &[(String, f64)], unit: &str) -> String {
    let max = rows
        .iter()
        .map(|r| r.1)
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    let (row_h, width, label_w) = (18.0, 900.0, 260.0);
    let mut s = format!(
        "<svg id=\"{id}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{}\">",
        row_h * rows.len() as f64 + 4.0
    );
    for (i, (label, v)) in rows.iter().enumerate() {
        let y = i as f64 * row_h;
        let w = (width - label_w - 90.0) * v / max;
        let _ = write!(
            s,
            "<text x=\"0\" y=\"{:.1}\" font-size=\"12\">{}</text><rect x=\"{label_w}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">{v:.3} {unit}</text>",
            y + 13.0, esc(label), y + 2.0, row_h - 4.0, COLORS[0], label_w + w + 4.0, y + 13.0
        );
    }
    s.push_str("</svg>");
    s
}

/// One stacked bar of (label, seconds) parts across the full width, with a legend.
fn stacked(id: &str, parts: &[(&str, f64)]) -> String {
    let total: f64 = parts
        .iter()
        .map(|p| p.1)
        .sum::<f64>()
        .max(f64::MIN_POSITIVE);
    let width = 900.0;
    let mut s = format!(
        "<svg id=\"{id}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"60\">"
    );
    let mut x = 0.0;
    for (i, (label, v)) in parts.iter().enumerate() {
        let w = width * v / total;
        let _ = write!(
            s,
            "<rect x=\"{x:.1}\" y=\"0\" width=\"{w:.1}\" height=\"24\" fill=\"{}\"><title>{}: {:.1}%</title></rect>",
            COLORS[i % COLORS.len()], esc(label), 100.0 * v / total
        );
        x += w;
    }
    for (i, (label, v)) in parts.iter().enumerate() {
        let lx = (i % 4) as f64 * 225.0;
        let ly = 40.0 + (i / 4) as f64 * 14.0;
        let _ = write!(
            s,
            "<rect x=\"{lx}\" y=\"{:.0}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{:.0}\" y=\"{:.0}\" font-size=\"11\">{} {:.1}%</text>",
            ly - 9.0, COLORS[i % COLORS.len()], lx + 14.0, ly, esc(label), 100.0 * v / total
        );
    }
    s.push_str("</svg>");
    s
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
    b.push_str("</ul>");
    if let Some(d) = diff {
        diff_section(&mut b, d);
    }
    b.push_str("</body></html>\n");
    b
}

fn step_section(b: &mut String, p: &Profile) {
    let _ = write!(
        b,
        "<h2>Step</h2><p>Iteration {} (median {}); forward {}, backward {}, optimizer {}.</p>",
        ms("iteration_sec", p.iteration_sec),
        ms("iteration_median_sec", p.iteration_median_sec),
        ms("forward_sec", p.forward_sec),
        ms("backward_sec", p.backward_sec),
        ms("optimizer_sec", p.optimizer_sec)
    );
    let mut parts: Vec<(&str, f64)> = Vec::new();
    if let Some(s) = &p.step {
        parts.push(("input wait", s.input_wait_sec));
        parts.push(("copy to device", s.host_to_device_sec));
    }
    for ph in &p.phases {
        parts.push((ph.phase.as_str(), ph.ops_sec));
    }
    parts.push(("overhead in phases", p.overhead_in_phases_sec().max(0.0)));
    if let Some(s) = &p.step {
        parts.push(("loss read-back", s.loss_read_back_sec));
        parts.push((
            "loop and other",
            (s.wall_sec
                - s.input_wait_sec
                - s.host_to_device_sec
                - s.loss_read_back_sec
                - p.iteration_sec)
                .max(0.0),
        ));
    }
    b.push_str(&stacked("step-breakdown", &parts));
    if let Some(s) = &p.step {
        let _ = write!(
            b,
            "<p id=\"input-verdict\">Whole step {}: {:.1}% waits for data.</p>",
            ms("step.wall_sec", s.wall_sec),
            100.0 * s.input_share()
        );
    }
}

fn op_type_section(b: &mut String, p: &Profile) {
    let rows = p.by_type();
    if rows.is_empty() {
        b.push_str("<h2>Op types</h2><p>No per-op timings (verbosity 2 records them).</p>");
        return;
    }
    let _ = write!(b, "<h2>Op types</h2>");
    let chart: Vec<(String, f64)> = rows
        .iter()
        .map(|r| (r.name.clone(), r.total_sec * 1e3))
        .collect();
    b.push_str(&bars("op-types", &chart, "ms"));
    b.push_str("<table id=\"op-type-table\"><tr><th>Kernel</th><th>Nodes</th><th>Total</th><th>Share</th><th>GFLOP/s</th></tr>");
    for r in &rows {
        let gflops = if r.total_sec > 0.0 {
            r.flops as f64 / r.total_sec / 1e9
        } else {
            0.0
        };
        let _ = write!(
            b,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.1}%</td><td>{gflops:.1}</td></tr>",
            esc(&r.name),
            r.nodes,
            ms(&format!("op_type.{}", r.name), r.total_sec),
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
    let _ = write!(
        b,
        "<h2>Layers (top 20)</h2><p class=\"meta\"><span style=\"color:{}\">&#9632; forward</span> <span style=\"color:{}\">&#9632; backward</span> <span style=\"color:{}\">&#9632; optimizer</span></p>",
        COLORS[1], COLORS[2], COLORS[3]
    );
    let top: Vec<_> = rows.iter().take(20).collect();
    let max = top
        .iter()
        .map(|r| r.total_sec)
        .fold(0.0, f64::max)
        .max(f64::MIN_POSITIVE);
    let (row_h, label_w, scale) = (18.0, 200.0, 600.0 / max);
    let _ = write!(
        b,
        "<svg id=\"layers\" xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"{}\">",
        row_h * top.len() as f64 + 20.0
    );
    for (i, r) in top.iter().enumerate() {
        let y = i as f64 * row_h;
        let _ = write!(
            b,
            "<text x=\"0\" y=\"{:.1}\" font-size=\"12\">{}</text>",
            y + 13.0,
            esc(&r.name)
        );
        let mut x = label_w;
        for (j, v) in [r.forward_sec, r.backward_sec, r.optimizer_sec]
            .iter()
            .enumerate()
        {
            let w = v * scale;
            let _ = write!(
                b,
                "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"{}\"/>",
                y + 2.0,
                row_h - 4.0,
                COLORS[j + 1]
            );
            x += w;
        }
        let _ = write!(
            b,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">{:.3} ms</text>",
            x + 4.0,
            y + 13.0,
            r.total_sec * 1e3
        );
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
    let _ = write!(b, "<h2>Memory</h2><p>Predicted peak <span class=\"num\" data-key=\"memory.predicted_peak_bytes\" data-value=\"{}\">{:.1} MiB</span>{}{}</p>",
        m.predicted_peak_bytes, mib(m.predicted_peak_bytes),
        m.peak_op.map(|op| format!(" after OP_ID{op}")).unwrap_or_default(),
        m.measured_peak_bytes.map(|v| format!("; measured (counting allocator) {:.1} MiB", mib(v))).unwrap_or_default());
    let n = m.live_after.len().max(2);
    let max = m.live_after.iter().copied().max().unwrap_or(1).max(1) as f64;
    let (w, h) = (900.0, 200.0);
    let points: Vec<String> = m
        .live_after
        .iter()
        .enumerate()
        .map(|(i, v)| {
            format!(
                "{:.1},{:.1}",
                w * i as f64 / (n - 1) as f64,
                h - h * *v as f64 / max
            )
        })
        .collect();
    let _ = write!(b, "<svg id=\"memory\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{}\"><polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" points=\"{}\"/>",
        h + 20.0, COLORS[0], points.join(" "));
    if let Some(op) = m.peak_op {
        let _ = write!(b, "<circle id=\"memory-peak\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"5\" fill=\"{}\"><title>peak after OP_ID{op}</title></circle>",
            w * op as f64 / (n - 1) as f64, h - h * m.predicted_peak_bytes as f64 / max, COLORS[3]);
    }
    let _ = write!(b, "<text x=\"0\" y=\"{:.0}\" font-size=\"11\">OP_ID 0 .. {} (live bytes after each op)</text></svg>", h + 16.0, n - 1);
}

fn roofline_section(b: &mut String, p: &Profile) {
    let Some(machine) = &p.machine else {
        b.push_str("<h2>Roofline</h2><p>No machine peaks were measured for this profile.</p>");
        return;
    };
    let rows = p.roofline(machine);
    let _ = write!(b, "<h2>Roofline</h2><p>Machine: GEMM <span class=\"num\" data-key=\"machine.flops_per_sec\" data-value=\"{}\">{:.1} GFLOP/s</span>, copy {:.1} GB/s.</p>",
        machine.flops_per_sec, machine.flops_per_sec / 1e9, machine.bytes_per_sec / 1e9);
    let (w, h) = (900.0, 360.0);
    // log10 axes: intensity 0.01..1000 FLOP/byte, performance 0.01..10 x peak.
    let x = |i: f64| w * ((i.max(1e-2)).log10() + 2.0) / 5.0;
    let y = |g: f64| {
        h - h
            * ((g.max(1e-2 * machine.flops_per_sec / 1e9)).log10()
                - (1e-2 * machine.flops_per_sec / 1e9).log10())
            / 3.0
    };
    let _ = write!(
        b,
        "<svg id=\"roofline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{}\">",
        h + 20.0
    );
    let ridge = machine.ridge();
    let peak = machine.flops_per_sec / 1e9;
    let bw = machine.bytes_per_sec / 1e9;
    let _ = write!(b, "<polyline fill=\"none\" stroke=\"#888\" stroke-width=\"2\" points=\"{:.1},{:.1} {:.1},{:.1} {:.1},{:.1}\"/>",
        x(1e-2), y(bw * 1e-2), x(ridge), y(peak), x(1000.0), y(peak));
    for (i, r) in rows.iter().filter(|r| r.flops > 0).enumerate() {
        let color = if r.bound == Bound::Compute {
            COLORS[2]
        } else {
            COLORS[1]
        };
        let _ = write!(b, "<circle class=\"op-point\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"{:.1}\" fill=\"{color}\" opacity=\"0.8\"><title>{}: {:.2} FLOP/B, {:.1} GFLOP/s, {:.0}% of roof</title></circle>",
            x(r.intensity), y(r.gflops_per_sec), 3.0 + 12.0 * r.share.sqrt(), esc(&r.name), r.intensity, r.gflops_per_sec, 100.0 * r.roofline_share);
        if i < 6 {
            let _ = write!(
                b,
                "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\">{}</text>",
                x(r.intensity) + 6.0,
                y(r.gflops_per_sec) - 6.0,
                esc(&r.name)
            );
        }
    }
    let _ = write!(b, "<text x=\"0\" y=\"{:.0}\" font-size=\"11\">arithmetic intensity (FLOP/byte, log) vs achieved GFLOP/s (log); grey: the machine's roof</text></svg>", h + 16.0);
}

fn diff_section(b: &mut String, d: &Diff) {
    let _ = write!(b, "<h2>Diff against the baseline</h2><table id=\"diff\"><tr><th>Kind</th><th>Name</th><th>Baseline</th><th>This</th><th>Ratio</th><th>{:.0}% interval</th></tr>", 100.0 * d.confidence);
    for r in d.rows.iter().filter(|r| r.kind != "layer" || r.flagged) {
        let class = if r.flagged { " class=\"flag\"" } else { "" };
        let _ = write!(b, "<tr{class}><td>{}</td><td>{}</td><td>{:.3} ms</td><td>{:.3} ms</td><td>{:.3}</td><td>[{:.3}, {:.3}]</td></tr>",
            r.kind, esc(&r.name), r.a_sec * 1e3, r.b_sec * 1e3, r.ratio, r.low, r.high);
    }
    b.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profiler::diff::DiffRow;

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
            }],
            threshold: 0.05,
            min_share: 0.02,
            confidence: 0.95,
            runs: (1, 1),
        };
        let page = report(&p, Some(&d));
        assert!(page.contains("id=\"diff\"") && page.contains("class=\"flag\""));
        assert!(page.contains("ReLU&lt;x&gt;"), "names are escaped");
    }
}
