//! A flame graph by module path: each op's time under its layer's path, one frame per
//! module (`layer1`, `layer1.0`, `layer1.0.conv1`), the kernel's per-type name as the
//! leaf. [`Profile::folded_stacks`] writes Brendan Gregg's folded format, which `inferno`
//! (`inferno-flamegraph`) and speedscope read; [`Profile::module_tree`] is the same as a
//! tree, which the HTML report draws as an icicle chart.

use std::collections::BTreeMap;

use crate::profile::data::Profile;
use crate::profile::layers::NO_LAYER;

/// One module (or kernel, at a leaf) and the time under it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FlameNode {
    /// The frame's name: a module's full path, or a kernel's per-type name.
    pub name: String,
    /// Seconds per iteration under it (its op time and its children's).
    pub sec: f64,
    /// Its sub-modules and kernels, by name.
    pub children: BTreeMap<String, FlameNode>,
}

impl Profile {
    /// Each op's frames: its module path's prefixes, then its kernel.
    fn frames(&self) -> impl Iterator<Item = (Vec<String>, f64)> + '_ {
        self.ops.iter().map(|op| {
            let path = op.origin.layer.as_deref().unwrap_or(NO_LAYER);
            let parts: Vec<&str> = path.split('.').collect();
            let mut frames: Vec<String> = (1..=parts.len()).map(|n| parts[..n].join(".")).collect();
            frames.push(op.type_name());
            (frames, op.mean_sec)
        })
    }

    /// Folded stacks: one line per module path and kernel, frames joined by `;`, then
    /// the microseconds per iteration (rounded; lines that round to 0 are left out).
    /// `inferno-flamegraph < F > flame.svg`, or open F in speedscope.
    pub fn folded_stacks(&self) -> String {
        let mut stacks: BTreeMap<String, f64> = BTreeMap::new();
        for (frames, sec) in self.frames() {
            let stack = frames
                .iter()
                .map(|f| f.replace([';', ' ', '\n'], "_"))
                .collect::<Vec<_>>()
                .join(";");
            *stacks.entry(stack).or_default() += sec;
        }
        let mut s = String::new();
        for (stack, sec) in stacks {
            let us = (sec * 1e6).round();
            if us >= 1.0 {
                s.push_str(&format!("{stack} {us:.0}\n"));
            }
        }
        s
    }

    /// The op time as a tree of modules with kernels at the leaves; the root is the
    /// iteration's op time.
    pub fn module_tree(&self) -> FlameNode {
        let mut root = FlameNode {
            name: "all ops".into(),
            ..Default::default()
        };
        for (frames, sec) in self.frames() {
            root.sec += sec;
            let mut node = &mut root;
            for f in frames {
                node = node.children.entry(f.clone()).or_insert_with(|| FlameNode {
                    name: f,
                    ..Default::default()
                });
                node.sec += sec;
            }
        }
        root
    }
}

#[cfg(test)]
mod tests {
    use wick_ops::Kernel;

    use crate::profile::data::{OpProfile, Profile};

    fn op(kernel: Kernel, sec: f64, layer: Option<&str>) -> OpProfile {
        let mut o = OpProfile::new(kernel, sec);
        o.origin.layer = layer.map(String::from);
        o
    }

    #[test]
    fn stacks_and_tree_follow_the_module_paths_and_add_up() {
        let p = Profile {
            ops: vec![
                op(Kernel::ConvForward, 0.002, Some("layer1.0.conv1")),
                op(Kernel::ConvBackwardData, 0.003, Some("layer1.0.conv1")),
                op(Kernel::ReLU, 0.0005, Some("layer1.0.relu")),
                op(Kernel::ConvForward, 0.001, Some("layer1.0.conv1")),
                op(Kernel::Reshape, 0.0000001, None),
            ],
            ..Default::default()
        };
        let folded = p.folded_stacks();
        assert_eq!(
            folded,
            "layer1;layer1.0;layer1.0.conv1;ConvBackwardData 3000\n\
             layer1;layer1.0;layer1.0.conv1;ConvForward 3000\n\
             layer1;layer1.0;layer1.0.relu;ReLU 500\n"
        );
        let tree = p.module_tree();
        let total: f64 = p.ops.iter().map(|o| o.mean_sec).sum();
        assert!((tree.sec - total).abs() < 1e-15);
        let block = &tree.children["layer1"].children["layer1.0"];
        assert!((block.sec - 0.0065).abs() < 1e-12, "{block:?}");
        assert_eq!(block.children.len(), 2);
        assert!(tree.children.contains_key("(no layer)"));
    }
}
