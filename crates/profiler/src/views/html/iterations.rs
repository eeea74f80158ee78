//! The HTML report's step-time chart: every timed iteration in order, a bar stacked by
//! phase, with the schedule's active cycles marked (TensorBoard's step-time graph).
//! Warm-up drift, a slow cycle or a preempted iteration shows at a glance.

use std::fmt::Write as _;

use crate::profile::data::Profile;
use crate::views::html::charts::{esc, linear_axis, phase_color, x_axis, y_axis, Frame};
use wick_graph::ir::Phase;

/// The chart (with two or more timed iterations).
pub(crate) fn iteration_section(b: &mut String, p: &Profile) {
    let s = &p.samples;
    let n = s.iterations.len();
    if n < 2 {
        return;
    }
    b.push_str("<h2>Step time per iteration</h2>");
    let max = s.iterations.iter().copied().fold(0.0, f64::max) * 1e3;
    let (ticks, top) = linear_axis(max);
    let frame = Frame::new(60.0, 10.0, 800.0, 160.0);
    let slot = frame.width / n as f64;
    let y = |ms: f64| frame.bottom() - frame.height * ms / top;
    let x = |i: f64| frame.left + slot * (i - 0.5);
    let _ = write!(
        b,
        "<svg id=\"iterations\" xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"{:.0}\">",
        frame.bottom() + 40.0
    );
    y_axis(b, frame, &ticks, &y, "ms");
    let labels: Vec<f64> = (1..=n).step_by(n.div_ceil(10)).map(|i| i as f64).collect();
    x_axis(b, frame, &labels, &x, "timed iteration");
    for (i, &total) in s.iterations.iter().enumerate() {
        let left = frame.left + slot * i as f64 + slot * 0.1;
        let phases = s.phases.get(i).copied().unwrap_or([0.0; 3]);
        let mut at = 0.0;
        for (ph, sec) in [Phase::Forward, Phase::Backward, Phase::Optimizer]
            .into_iter()
            .zip(phases)
        {
            let (lo, hi) = (y(at * 1e3), y((at + sec) * 1e3));
            let _ = write!(
                b,
                "<rect x=\"{left:.1}\" y=\"{hi:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"/>",
                slot * 0.8,
                lo - hi,
                phase_color(ph)
            );
            at += sec;
        }
        // The rest of the iteration: the executor's work between phases.
        let _ = write!(
            b,
            "<rect class=\"iteration\" data-value=\"{total}\" x=\"{left:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#999\"><title>iteration {}: {:.3} ms</title></rect>",
            y(total * 1e3),
            slot * 0.8,
            (y(at * 1e3) - y(total * 1e3)).max(0.0),
            i + 1,
            total * 1e3
        );
    }
    let per_cycle = p.schedule.active;
    if per_cycle > 0 && per_cycle < n {
        mark_cycles(b, frame, slot, per_cycle, n);
    }
    b.push_str("</svg>");
    let _ = write!(
        b,
        "<p class=\"meta\">{} timed iterations, each a bar of its forward, backward and optimizer phases (grey: the work between them){}.</p>",
        n,
        esc(&if per_cycle > 0 && per_cycle < n {
            format!("; dashed lines start each active cycle of the schedule ({})", p.schedule)
        } else {
            String::new()
        })
    );
}

/// A dashed line where each active cycle after the first starts.
fn mark_cycles(b: &mut String, frame: Frame, slot: f64, per_cycle: usize, n: usize) {
    for c in (per_cycle..n).step_by(per_cycle) {
        let at = frame.left + slot * c as f64;
        let _ = write!(
            b,
            "<line class=\"cycle\" x1=\"{at:.1}\" y1=\"{:.1}\" x2=\"{at:.1}\" y2=\"{:.1}\" stroke=\"#c00\" stroke-dasharray=\"4 3\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" fill=\"#c00\">cycle {}</text>",
            frame.top,
            frame.bottom(),
            at + 3.0,
            frame.top + 10.0,
            c / per_cycle + 1
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::profile::data::Profile;
    use crate::profile::schedule::Schedule;

    #[test]
    fn every_timed_iteration_is_a_bar_and_each_cycle_is_marked() {
        let mut p = Profile::default();
        p.samples.iterations = vec![0.010, 0.011, 0.012, 0.030, 0.013, 0.012];
        p.samples.phases = vec![[0.003, 0.005, 0.001]; 6];
        p.schedule = "wait=1,warmup=1,active=3,repeat=2"
            .parse::<Schedule>()
            .unwrap();
        let mut b = String::new();
        super::iteration_section(&mut b, &p);
        assert_eq!(b.matches("<rect class=\"iteration\"").count(), 6, "{b}");
        assert!(b.contains("data-value=\"0.03\"") && b.contains("iteration 4: 30.000 ms"));
        assert_eq!(b.matches("<line class=\"cycle\"").count(), 1, "{b}");
        assert!(b.contains(">cycle 2</text>"), "{b}");
        // One timed iteration: no chart.
        p.samples.iterations.truncate(1);
        let mut b = String::new();
        super::iteration_section(&mut b, &p);
        assert!(b.is_empty());
    }
}
