//! The HTML report's flame graph by module: an icicle chart of [`Profile::module_tree`],
//! the iteration's op time at the top, each module below its parent, kernels at the
//! bottom, widths in proportion to time.

use std::fmt::Write as _;

use crate::profile::data::Profile;
use crate::views::flame::FlameNode;
use crate::views::html::charts::esc;

/// The chart's width, a row's height and the deepest row drawn.
const WIDTH: f64 = 900.0;
const ROW: f64 = 18.0;
const MAX_DEPTH: usize = 10;

/// The flame graph section (with per-op timings only).
pub(crate) fn flame_section(b: &mut String, p: &Profile) {
    if !p.shows_per_op() {
        return;
    }
    let tree = p.module_tree();
    if tree.sec <= 0.0 {
        return;
    }
    let depth = depth(&tree).min(MAX_DEPTH);
    let _ = write!(
        b,
        "<h2>Flame graph by module</h2><p class=\"meta\">Each bar is a module (its full path) or, in the bottom row of a branch, a kernel; its width is its share of the op time per iteration (hover for the time). The same data as folded stacks for inferno or speedscope: <code>--folded FILE</code>.</p>\
         <svg id=\"flame\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH:.0}\" height=\"{:.0}\">",
        (depth + 1) as f64 * ROW
    );
    draw(b, &tree, tree.sec, 0.0, 0);
    b.push_str("</svg>");
}

fn depth(n: &FlameNode) -> usize {
    1 + n.children.values().map(depth).max().unwrap_or(0)
}

/// Draws `n` at `x` in row `row`, then its children beneath it, longest first.
fn draw(b: &mut String, n: &FlameNode, total: f64, x: f64, row: usize) {
    let w = WIDTH * n.sec / total;
    if w < 0.5 || row > MAX_DEPTH {
        return;
    }
    let y = row as f64 * ROW;
    let hue = 10 + n.name.bytes().fold(0u32, |h, c| (h * 31 + c as u32) % 997) % 45;
    let label = n.name.rsplit('.').next().unwrap_or(&n.name);
    let fits = (w / 7.0) as usize;
    let shown: String = if label.chars().count() <= fits {
        label.to_string()
    } else if fits > 2 {
        label.chars().take(fits - 1).chain(['…']).collect()
    } else {
        String::new()
    };
    let _ = write!(
        b,
        "<g><title>{}: {:.3} ms ({:.1}%)</title><rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{:.0}\" fill=\"hsl({hue},75%,62%)\" stroke=\"#fff\" stroke-width=\"0.5\"/>\
         <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">{}</text></g>",
        esc(&n.name),
        n.sec * 1e3,
        100.0 * n.sec / total,
        ROW - 1.0,
        x + 3.0,
        y + 13.0,
        esc(&shown)
    );
    let mut children: Vec<&FlameNode> = n.children.values().collect();
    children.sort_by(|a, b| b.sec.total_cmp(&a.sec));
    let mut at = x;
    for c in children {
        draw(b, c, total, at, row + 1);
        at += WIDTH * c.sec / total;
    }
}
