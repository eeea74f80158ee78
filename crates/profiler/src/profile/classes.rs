//! The op time grouped by kernel class ([`KernelClass`]): convolution, linear, matmul,
//! attention, layer norm, softmax, element-wise... What kind of work the step does, for
//! any model, before the per-op-type detail.

use serde::Serialize;
use wick_ops::KernelClass;

use crate::profile::data::Profile;
use crate::profile::stats::giga_per_sec;

/// One row of the per-class table: every node whose kernel is of one class.
#[derive(Debug, Clone, Serialize)]
pub struct ClassRow {
    /// The class.
    pub class: KernelClass,
    /// Nodes of this class in one iteration.
    pub nodes: usize,
    /// Seconds per iteration spent in them.
    pub total_sec: f64,
    /// Share of all op time in an iteration.
    pub share: f64,
    /// FLOPs per iteration.
    pub flops: u64,
    /// Bytes moved per iteration (inputs read and outputs written, once each).
    pub bytes: u64,
    /// Its kernel names with their seconds per iteration, longest first.
    pub kernels: Vec<(String, f64)>,
}

impl ClassRow {
    /// Its FLOP rate, GFLOP/s (0 when no time was measured).
    pub fn gflops(&self) -> f64 {
        giga_per_sec(self.flops, self.total_sec)
    }

    /// Its memory traffic, GB/s (0 when no time was measured).
    pub fn gbytes_per_sec(&self) -> f64 {
        giga_per_sec(self.bytes, self.total_sec)
    }
}

impl Profile {
    /// The op time per kernel class, longest first (ties in [`KernelClass::ALL`]'s
    /// order); classes with no node are left out.
    pub fn by_class(&self) -> Vec<ClassRow> {
        let all: f64 = self.ops.iter().map(|o| o.mean_sec).sum();
        let mut rows: Vec<ClassRow> = KernelClass::ALL
            .iter()
            .filter_map(|&class| {
                let ops: Vec<_> = self.ops.iter().filter(|o| o.class == class).collect();
                if ops.is_empty() {
                    return None;
                }
                let total_sec: f64 = ops.iter().map(|o| o.mean_sec).sum();
                let mut kernels: Vec<(String, f64)> = Vec::new();
                for o in &ops {
                    let type_name = o.type_name();
                    match kernels.iter_mut().find(|(name, _)| *name == type_name) {
                        Some((_, sec)) => *sec += o.mean_sec,
                        None => kernels.push((type_name, o.mean_sec)),
                    }
                }
                kernels.sort_by(|a, b| b.1.total_cmp(&a.1));
                Some(ClassRow {
                    class,
                    nodes: ops.len(),
                    total_sec,
                    share: if all > 0.0 { total_sec / all } else { 0.0 },
                    flops: ops.iter().fold(0u64, |a, o| a.saturating_add(o.flops)),
                    bytes: ops.iter().fold(0u64, |a, o| a.saturating_add(o.bytes)),
                    kernels,
                })
            })
            .collect();
        rows.sort_by(|a, b| b.total_sec.total_cmp(&a.total_sec));
        rows
    }
}
