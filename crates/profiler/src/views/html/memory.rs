//! The HTML report's memory section: the predicted live memory over OP_IDs with its peak,
//! beside each op's measured peak, and the prediction's error per category.

use std::fmt::Write as _;

use crate::profile::data::Profile;
use crate::profile::memory::MemoryProfile;
use crate::views::html::charts::{
    esc, legend, linear_axis, linear_ticks, phase_color, x_axis, y_axis, Frame,
};

fn mib(v: u64) -> f64 {
    v as f64 / (1u64 << 20) as f64
}

/// The memory section: the headline, the chart and the categories.
pub(crate) fn memory_section(b: &mut String, p: &Profile) {
    let Some(m) = &p.memory else { return };
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
    if let Some(line) = crate::views::memory::attention_line(p) {
        let _ = write!(b, "<p id=\"attention-memory\">{}</p>", esc(line.trim_end()));
    }
    memory_chart(b, p, m);
    memory_categories(b, m);
}

/// The live-memory curves over OP_IDs, each op's phase as a band behind them.
fn memory_chart(b: &mut String, p: &Profile, m: &MemoryProfile) {
    let n = m.live_after.len().max(2);
    let measured_max = m.ops.iter().map(|o| o.peak_bytes).max().unwrap_or(0);
    let max = m
        .live_after
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(measured_max);
    let (ticks, top_tick) = linear_axis(mib(max));
    let frame = Frame::new(70.0, 8.0, 800.0, 200.0);
    let x = |op: f64| frame.left + frame.width * op / (n - 1) as f64;
    let y = |v: f64| frame.bottom() - frame.height * v / top_tick;
    let _ = write!(
        b,
        "<svg id=\"memory\" xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"{:.0}\">",
        frame.bottom() + 60.0
    );
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
}

/// The prediction against the measurement per category, when measured per op.
fn memory_categories(b: &mut String, m: &MemoryProfile) {
    let categories = m.categories();
    if categories.is_empty() {
        return;
    }
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
