//! The HTML report's charts as inline SVG: every chart has axes with ticks, numbers and
//! units, and every phase keeps one colour across the page ([`phase_color`]). Geometry is
//! left in attributes (`data-value` and the pixel position `data-at` on ticks, the roofs as `<line>`s, each point's
//! figures on its `<circle>`), so a test can check what is drawn against the numbers.

use std::fmt::Write as _;

use wick_graph::ir::Phase;

use crate::profile::data::Profile;

/// One colour per phase, everywhere in the report.
pub fn phase_color(phase: Phase) -> &'static str {
    match phase {
        Phase::Forward => "#4e79a7",
        Phase::Backward => "#f28e2b",
        Phase::Optimizer => "#59a14f",
    }
}

/// Colours for parts of a step that are not a phase (input wait, copy, ...).
pub const OTHER_COLORS: [&str; 6] = [
    "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#9c755f", "#bab0ac",
];

/// HTML-escapes `s`.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// [`linear_ticks`] up to `max`, with the last tick: the top of the axis.
pub fn linear_axis(max: f64) -> (Vec<f64>, f64) {
    let ticks = linear_ticks(max);
    let top = *ticks.last().unwrap_or(&1.0);
    (ticks, top)
}

/// Ticks for a linear axis from 0 to at least `max`: 1, 2 or 5 times a power of ten,
/// four to eight of them.
pub fn linear_ticks(max: f64) -> Vec<f64> {
    let max = if max > 0.0 && max.is_finite() {
        max
    } else {
        1.0
    };
    let exponent = (max / 5.0).log10().floor() as i32;
    // i * m * 10^exponent, computed so that 0.6 is 6 / 10, not 3 * 0.2.
    let value = |units: f64| {
        if exponent < 0 {
            units / 10f64.powi(-exponent)
        } else {
            units * 10f64.powi(exponent)
        }
    };
    let m = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .find(|m| max / value(*m) <= 8.0)
        .unwrap_or(10.0);
    let n = (max / value(m)).ceil() as usize;
    (0..=n).map(|i| value(i as f64 * m)).collect()
}

/// A tick's number as shown: no trailing zeros, thousands without exponent.
pub fn tick_label(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    if v.abs() >= 1.0 {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        let digits = (-v.abs().log10().floor()) as usize + 1;
        let s = format!("{v:.digits$}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A plot area inside an SVG: margins for the axes, and the data-to-pixel maps.
#[derive(Debug, Clone, Copy)]
pub struct Frame {
    /// Left edge of the plot area (after the y axis's labels).
    pub left: f64,
    /// Top edge.
    pub top: f64,
    /// Width of the plot area.
    pub width: f64,
    /// Height of the plot area.
    pub height: f64,
}

impl Frame {
    /// The plot area with its left and top edges, width and height.
    pub fn new(left: f64, top: f64, width: f64, height: f64) -> Self {
        Frame {
            left,
            top,
            width,
            height,
        }
    }

    /// The bottom edge.
    pub fn bottom(&self) -> f64 {
        self.top + self.height
    }
}

/// A horizontal axis under `frame` with a tick at each of `ticks` (data values, drawn
/// at `x(value)`), their numbers, and the axis `label` (name and unit).
pub fn x_axis(s: &mut String, frame: Frame, ticks: &[f64], x: &dyn Fn(f64) -> f64, label: &str) {
    let y = frame.bottom();
    let _ = write!(
        s,
        "<line class=\"axis\" x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#444\"/>",
        frame.left,
        frame.left + frame.width
    );
    for &t in ticks {
        let px = x(t);
        let _ = write!(
            s,
            "<line x1=\"{px:.1}\" y1=\"{:.1}\" x2=\"{px:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/><line x1=\"{px:.1}\" y1=\"{y:.1}\" x2=\"{px:.1}\" y2=\"{:.1}\" stroke=\"#444\"/><text class=\"tick x\" data-value=\"{t}\" data-at=\"{px}\" x=\"{px:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"middle\">{}</text>",
            frame.top,
            y,
            y + 4.0,
            y + 15.0,
            tick_label(t)
        );
    }
    let _ = write!(
        s,
        "<text class=\"axis-label x\" x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"middle\">{}</text>",
        frame.left + frame.width / 2.0,
        y + 30.0,
        esc(label)
    );
}

/// A vertical axis left of `frame`, as [`x_axis`].
pub fn y_axis(s: &mut String, frame: Frame, ticks: &[f64], y: &dyn Fn(f64) -> f64, label: &str) {
    let x = frame.left;
    let _ = write!(
        s,
        "<line class=\"axis\" x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#444\"/>",
        frame.top,
        frame.bottom()
    );
    for &t in ticks {
        let py = y(t);
        let _ = write!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{py:.1}\" x2=\"{:.1}\" y2=\"{py:.1}\" stroke=\"#ddd\"/><line x1=\"{:.1}\" y1=\"{py:.1}\" x2=\"{x:.1}\" y2=\"{py:.1}\" stroke=\"#444\"/><text class=\"tick y\" data-value=\"{t}\" data-at=\"{py}\" x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">{}</text>",
            x + frame.width,
            x - 4.0,
            x - 6.0,
            py + 3.5,
            tick_label(t)
        );
    }
    let cy = frame.top + frame.height / 2.0;
    let _ = write!(
        s,
        "<text class=\"axis-label y\" x=\"12\" y=\"{cy:.1}\" font-size=\"11\" text-anchor=\"middle\" transform=\"rotate(-90 12 {cy:.1})\">{}</text>",
        esc(label)
    );
}

/// A legend row of coloured squares.
pub fn legend(s: &mut String, x: f64, y: f64, items: &[(&str, &str)]) {
    let mut at = x;
    for (label, color) in items {
        let _ = write!(
            s,
            "<rect x=\"{at:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{y:.1}\" font-size=\"11\">{}</text>",
            y - 9.0,
            at + 14.0,
            esc(label)
        );
        at += 24.0 + 6.5 * label.len() as f64;
    }
}

/// Horizontal bars, one per (label, value, colour), on a linear axis in `unit`.
pub fn bars(id: &str, rows: &[(String, f64, &str)], axis_label: &str) -> String {
    let max = rows.iter().map(|r| r.1).fold(0.0, f64::max);
    let (ticks, top_tick) = linear_axis(max);
    let row_h = 18.0;
    let frame = Frame::new(260.0, 4.0, 600.0, row_h * rows.len() as f64);
    let x = |v: f64| frame.left + frame.width * v / top_tick;
    let mut s = format!(
        "<svg id=\"{id}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"{:.0}\">",
        frame.bottom() + 40.0
    );
    x_axis(&mut s, frame, &ticks, &x, axis_label);
    for (i, (label, v, color)) in rows.iter().enumerate() {
        let y = frame.top + i as f64 * row_h;
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" text-anchor=\"end\">{}</text><rect class=\"bar\" data-value=\"{v}\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\"><title>{}: {v:.3}</title></rect>",
            frame.left - 6.0,
            y + 13.0,
            esc(label),
            frame.left,
            y + 2.0,
            x(*v) - frame.left,
            row_h - 4.0,
            esc(label)
        );
    }
    s.push_str("</svg>");
    s
}

/// One stacked bar of (label, seconds, colour) parts on a 0-100% axis of their total,
/// with a legend giving each part's share.
pub fn stacked(id: &str, parts: &[(&str, f64, &str)], axis_label: &str) -> String {
    let total: f64 = parts
        .iter()
        .map(|p| p.1)
        .sum::<f64>()
        .max(f64::MIN_POSITIVE);
    let frame = Frame::new(20.0, 4.0, 860.0, 26.0);
    let x = |pct: f64| frame.left + frame.width * pct / 100.0;
    let mut s = format!(
        "<svg id=\"{id}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"{:.0}\">",
        frame.bottom() + 40.0 + 16.0 * (parts.len() as f64 / 4.0).ceil()
    );
    let mut at = 0.0;
    for (label, v, color) in parts {
        let pct = 100.0 * v / total;
        let _ = write!(
            s,
            "<rect class=\"part\" data-label=\"{}\" data-share=\"{pct}\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\"><title>{}: {pct:.1}%</title></rect>",
            esc(label),
            x(at),
            frame.top,
            x(at + pct) - x(at),
            frame.height,
            esc(label)
        );
        at += pct;
    }
    x_axis(
        &mut s,
        frame,
        &[0.0, 25.0, 50.0, 75.0, 100.0],
        &x,
        axis_label,
    );
    for (i, (label, v, color)) in parts.iter().enumerate() {
        let lx = frame.left + (i % 4) as f64 * 215.0;
        let ly = frame.bottom() + 52.0 + (i / 4) as f64 * 16.0;
        let _ = write!(
            s,
            "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{:.1}\" y=\"{ly:.1}\" font-size=\"11\">{} {:.1}%</text>",
            ly - 9.0,
            lx + 14.0,
            esc(label),
            100.0 * v / total
        );
    }
    s.push_str("</svg>");
    s
}

/// Boxes of placed labels, to keep new ones from overprinting them.
#[derive(Debug, Default)]
pub struct LabelPlacer {
    placed: Vec<[f64; 4]>,
    bounds: [f64; 4],
}

impl LabelPlacer {
    /// A placer for labels inside `frame`.
    pub fn new(frame: Frame) -> Self {
        LabelPlacer {
            placed: Vec::new(),
            bounds: [
                frame.left,
                frame.top,
                frame.left + frame.width,
                frame.bottom(),
            ],
        }
    }

    /// Reserves a box (a drawn point, say) that labels must not cover.
    pub fn reserve(&mut self, b: [f64; 4]) {
        self.placed.push(b);
    }

    /// Where a label of `text` for the point at (x, y) with radius `r` fits: the first
    /// free spot around the point (right, left, above, below, then further out), as the
    /// text's (x, baseline y, anchor); `None` when every spot is taken.
    pub fn place(
        &mut self,
        text: &str,
        x: f64,
        y: f64,
        r: f64,
    ) -> Option<(f64, f64, &'static str)> {
        let (w, h) = (6.0 * text.chars().count() as f64, 11.0);
        for k in [1.0, 2.2, 3.6] {
            let d = r + 3.0 + (k - 1.0) * 10.0;
            let spots = [
                (x + d, y + 4.0, "start"),
                (x - d, y + 4.0, "end"),
                (x, y - d, "middle"),
                (x, y + d + h - 2.0, "middle"),
                (x + d, y - d, "start"),
                (x + d, y + d + h - 2.0, "start"),
                (x - d, y - d, "end"),
                (x - d, y + d + h - 2.0, "end"),
            ];
            for (tx, ty, anchor) in spots {
                let left = match anchor {
                    "start" => tx,
                    "end" => tx - w,
                    _ => tx - w / 2.0,
                };
                let b = [left, ty - h + 2.0, left + w, ty + 2.0];
                let inside = b[0] >= self.bounds[0]
                    && b[2] <= self.bounds[2]
                    && b[1] >= self.bounds[1]
                    && b[3] <= self.bounds[3];
                if inside && !self.placed.iter().any(|p| overlaps(p, &b)) {
                    self.placed.push(b);
                    return Some((tx, ty, anchor));
                }
            }
        }
        None
    }
}

/// Whether two boxes `[x0, y0, x1, y1]` overlap.
pub fn overlaps(a: &[f64; 4], b: &[f64; 4]) -> bool {
    a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3]
}

/// The legend of the three phases, as every chart colours them.
pub(crate) fn phase_legend(b: &mut String, p: &Profile) {
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

/// The phase most of an op type's time is in.
pub(crate) fn type_phase(p: &Profile, name: &str) -> Phase {
    let mut by_phase = [0.0; 3];
    for o in p.ops.iter().filter(|o| o.type_name() == name) {
        by_phase[o.phase as usize] += o.mean_sec;
    }
    let i = (0..3)
        .max_by(|a, b| by_phase[*a].total_cmp(&by_phase[*b]))
        .unwrap_or(0);
    Phase::ALL[i]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_maximum() {
        assert_eq!(
            linear_ticks(7.3),
            [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
        );
        assert_eq!(
            linear_ticks(140.0),
            [0.0, 20.0, 40.0, 60.0, 80.0, 100.0, 120.0, 140.0]
        );
        assert_eq!(
            linear_ticks(480.0),
            [0.0, 100.0, 200.0, 300.0, 400.0, 500.0]
        );
        assert_eq!(linear_ticks(0.0), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(tick_label(0.05), "0.05");
        assert_eq!(tick_label(1000.0), "1000");
        assert_eq!(tick_label(2.5), "2.5");
    }

    #[test]
    fn labels_never_overlap_and_stay_inside() {
        let frame = Frame::new(0.0, 0.0, 300.0, 200.0);
        let mut placer = LabelPlacer::new(frame);
        let mut boxes = Vec::new();
        // Ten points on one spot: each label that is placed finds a free box.
        for i in 0..10 {
            if let Some((x, y, anchor)) = placer.place(&format!("Conv{i}"), 150.0, 100.0, 4.0) {
                let w = 6.0 * 5.0;
                let left = match anchor {
                    "start" => x,
                    "end" => x - w,
                    _ => x - w / 2.0,
                };
                boxes.push([left, y - 9.0, left + w, y + 2.0]);
            }
        }
        assert!(boxes.len() >= 8, "{} placed", boxes.len());
        for (i, a) in boxes.iter().enumerate() {
            assert!(a[0] >= 0.0 && a[2] <= 300.0);
            for b in &boxes[i + 1..] {
                assert!(!overlaps(a, b), "{a:?} {b:?}");
            }
        }
    }
}
