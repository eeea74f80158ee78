//! The HTML report's roofline: each op type's achieved GFLOP/s against its arithmetic
//! intensity, log-log, under the machine's two roofs.

use std::fmt::Write as _;

use crate::profile::data::Profile;
use crate::profile::machine_peaks::MachinePeaks;
use crate::profile::roofline::RooflineRow;
use crate::views::html::charts::{
    esc, phase_color, phase_legend, type_phase, x_axis, y_axis, Frame, LabelPlacer,
};
use crate::views::roofline::beyond_roof_note;

/// The roofline section: the headline, the machine's peaks, the plot and its notes.
pub(crate) fn roofline_section(b: &mut String, p: &Profile) {
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
    let plot = Plot::new(machine, &rows);
    let _ = write!(
        b,
        "<svg id=\"roofline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"{:.0}\">",
        plot.frame.bottom() + 45.0
    );
    plot.axes_and_roofs(b, machine);
    let unlabelled = plot.points(b, p, &rows);
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

/// The decade that holds `v`, rounded up or down.
fn decade(v: f64, up: bool) -> f64 {
    let l = v.max(1e-9).log10();
    if up {
        l.ceil()
    } else {
        l.floor()
    }
}

/// The log-log plot: decades that hold every point and both roofs, in a frame.
struct Plot {
    frame: Frame,
    /// Decades of intensity (x) and GFLOP/s (y) the plot spans.
    x: (f64, f64),
    y: (f64, f64),
}

impl Plot {
    fn new(machine: &MachinePeaks, rows: &[RooflineRow]) -> Self {
        let peak = machine.flops_per_sec / 1e9;
        let (mut x0, mut x1) = (-2.0f64, 3.0f64);
        let (mut y0, mut y1) = (decade(peak, false) - 3.0, decade(peak * 1.5, true));
        for r in rows {
            x0 = x0.min(decade(r.intensity, false));
            x1 = x1.max(decade(r.intensity, true));
            y0 = y0.min(decade(r.gflops_per_sec, false));
            y1 = y1.max(decade(r.gflops_per_sec, true));
        }
        let frame = Frame::new(70.0, 10.0, 780.0, 380.0);
        Plot {
            frame,
            x: (x0, x1),
            y: (y0, y1),
        }
    }

    fn px(&self, intensity: f64) -> f64 {
        let (x0, x1) = self.x;
        self.frame.left + self.frame.width * (intensity.log10() - x0) / (x1 - x0)
    }

    fn py(&self, gflops: f64) -> f64 {
        let (y0, y1) = self.y;
        self.frame.bottom() - self.frame.height * (gflops.log10() - y0) / (y1 - y0)
    }

    /// Both axes, the memory roof (GFLOP/s = GB/s x intensity) from where it enters the
    /// plot to the ridge point, then the compute roof.
    fn axes_and_roofs(&self, b: &mut String, machine: &MachinePeaks) {
        let ((x0, x1), (y0, y1)) = (self.x, self.y);
        let xt: Vec<f64> = (x0 as i32..=x1 as i32).map(|e| 10f64.powi(e)).collect();
        let yt: Vec<f64> = (y0 as i32..=y1 as i32).map(|e| 10f64.powi(e)).collect();
        let (x, y) = (|i: f64| self.px(i), |g: f64| self.py(g));
        x_axis(
            b,
            self.frame,
            &xt,
            &x,
            "arithmetic intensity (FLOP/byte, log scale)",
        );
        y_axis(b, self.frame, &yt, &y, "achieved GFLOP/s (log scale)");
        let peak = machine.flops_per_sec / 1e9;
        let bw = machine.bytes_per_sec / 1e9;
        let ridge = machine.ridge();
        let enter = (10f64.powf(x0)).max(10f64.powf(y0) / bw);
        let _ = write!(
            b,
            "<line id=\"memory-roof\" data-gbytes-per-sec=\"{bw}\" x1=\"{:.2}\" y1=\"{:.2}\" x2=\"{:.2}\" y2=\"{:.2}\" stroke=\"#888\" stroke-width=\"2\"/><line id=\"compute-roof\" data-gflops-per-sec=\"{peak}\" x1=\"{:.2}\" y1=\"{:.2}\" x2=\"{:.2}\" y2=\"{:.2}\" stroke=\"#888\" stroke-width=\"2\"/>",
            x(enter), y(bw * enter), x(ridge), y(peak),
            x(ridge), y(peak), x(10f64.powf(x1)), y(peak)
        );
    }

    /// One circle per op type (its area its share of the time), then the labels where
    /// they fit; returns the names left unlabelled.
    fn points<'r>(&self, b: &mut String, p: &Profile, rows: &'r [RooflineRow]) -> Vec<&'r str> {
        let mut placer = LabelPlacer::new(self.frame);
        let points: Vec<_> = rows
            .iter()
            .map(|r| {
                let rad = 3.0 + 12.0 * r.share.sqrt();
                (r, self.px(r.intensity), self.py(r.gflops_per_sec), rad)
            })
            .collect();
        for (_, px, py, rad) in &points {
            placer.reserve([px - rad, py - rad, px + rad, py + rad]);
        }
        for (r, px, py, rad) in &points {
            let _ = write!(
                b,
                "<circle class=\"op-point\" data-name=\"{}\" data-intensity=\"{}\" data-gflops=\"{}\" data-roof-share=\"{}\" cx=\"{px:.2}\" cy=\"{py:.2}\" r=\"{rad:.1}\" fill=\"{}\" opacity=\"0.8\"><title>{}: {:.2} FLOP/B, {:.1} GFLOP/s, {:.0}% of roof</title></circle>",
                esc(&r.name), r.intensity, r.gflops_per_sec, r.roofline_share,
                phase_color(type_phase(p, &r.name)), esc(&r.name), r.intensity, r.gflops_per_sec, 100.0 * r.roofline_share
            );
        }
        let mut unlabelled = Vec::new();
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
        unlabelled
    }
}
