//! A predicted training step on a GPU, from a profile taken anywhere (the CPU included):
//! each op type's FLOPs and bytes, which do not depend on the device, against a device's
//! datasheet (given as data: [`DeviceSheet`]), and the kernel launches each op makes on
//! wick's CUDA path and on candle's device-generic path.
//!
//! Per op type, the predicted time is the larger of
//! - its roof: FLOPs over the compute peak (TF32 tensor cores for convolutions and
//!   matrix products, FP32 for the rest) or bytes over the memory bandwidth, whichever
//!   is longer, each divided first by the efficiency the datasheet assumes real kernels
//!   reach on that side (so the rule holds on both sides of the ridge);
//! - its launches times the datasheet's cost of one launch (a step of many small kernels
//!   is bound by launching them, not by the GPU).
//!
//! The step is the sum over op types. It is a model: it ignores caches (an op's inputs
//! may still be in the 50 MB L2), overlap between kernels and cuDNN's algorithm choice.

use serde::{Deserialize, Serialize};

use crate::compare::diff::printable;
use crate::profile::data::{OpProfile, Profile};
use wick_graph::ir::Phase;
use wick_ops::KernelClass;

/// A GPU's peaks, as its datasheet gives them, and the assumptions that turn peaks into
/// predicted times.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceSheet {
    /// Short name (`h200`).
    pub name: String,
    /// What it is.
    pub description: String,
    /// Memory bandwidth, bytes per second.
    pub memory_bytes_per_sec: f64,
    /// FP32 peak (CUDA cores), FLOP per second.
    pub fp32_flops_per_sec: f64,
    /// TF32 tensor-core peak (dense), FLOP per second (the FP32 peak on a GPU without
    /// TF32).
    pub tf32_flops_per_sec: f64,
    /// FP16/BF16 tensor-core peak (dense), FLOP per second: the peak of convolutions and
    /// matrix products that a profile records in bf16 or f16 (autocast). 0 when the
    /// sheet does not give it: they then take the TF32 peak.
    #[serde(default)]
    pub f16_flops_per_sec: f64,
    /// The share of the bandwidth memory-bound kernels reach (an assumption).
    pub memory_efficiency: f64,
    /// The share of the compute peak convolutions and GEMMs reach (an assumption).
    pub compute_efficiency: f64,
    /// Seconds one kernel launch costs when launches are back to back (an assumption).
    pub launch_sec: f64,
    /// Where the figures come from.
    pub source: String,
}

/// The datasheets wick knows (H200, H100, A100, V100), as JSON.
pub const DATASHEETS: &str = include_str!("gpu_datasheets.json");

impl DeviceSheet {
    /// Every datasheet of [`DATASHEETS`].
    pub fn known() -> Vec<DeviceSheet> {
        serde_json::from_str(DATASHEETS).expect("gpu_datasheets.json is valid (tested)")
    }

    /// The known datasheet named `name` (case-insensitive).
    pub fn named(name: &str) -> Option<DeviceSheet> {
        Self::known()
            .into_iter()
            .find(|d| d.name.eq_ignore_ascii_case(name))
    }

    /// Checks that every figure is a positive number (a user's datasheet file).
    pub fn validate(&self) -> Result<(), String> {
        let figures = [
            ("memory_bytes_per_sec", self.memory_bytes_per_sec),
            ("fp32_flops_per_sec", self.fp32_flops_per_sec),
            ("tf32_flops_per_sec", self.tf32_flops_per_sec),
            ("memory_efficiency", self.memory_efficiency),
            ("compute_efficiency", self.compute_efficiency),
            ("launch_sec", self.launch_sec),
        ];
        if !(self.f16_flops_per_sec.is_finite() && self.f16_flops_per_sec >= 0.0) {
            return Err(format!(
                "datasheet {}: f16_flops_per_sec must be 0 (not given) or a positive number, got {}",
                self.name, self.f16_flops_per_sec
            ));
        }
        match figures.iter().find(|(_, v)| !(v.is_finite() && *v > 0.0)) {
            Some((name, v)) => Err(format!(
                "datasheet {}: {name} must be a positive number, got {v}",
                self.name
            )),
            None if self.memory_efficiency > 1.0 || self.compute_efficiency > 1.0 => Err(format!(
                "datasheet {}: efficiencies are shares of the peak, at most 1",
                self.name
            )),
            None => Ok(()),
        }
    }
}

impl DeviceSheet {
    /// The compute peak of an op that computes in `dtype` (a profile's dtype name):
    /// FP16/BF16 tensor cores for a 16-bit convolution or matrix product where the sheet
    /// gives their peak, TF32 tensor cores for the other convolutions and matrix
    /// products, and FP32 for the rest.
    pub fn compute_peak(&self, tensor_cores: bool, dtype: &str) -> f64 {
        let sixteen_bit = matches!(dtype, "BF16" | "F16");
        match tensor_cores {
            true if sixteen_bit && self.f16_flops_per_sec > 0.0 => self.f16_flops_per_sec,
            true => self.tf32_flops_per_sec,
            false => self.fp32_flops_per_sec,
        }
    }
}

/// Kernel launches of one node of a kernel type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launches {
    /// With wick's CUDA kernels (crates/ops/cuda) where the family has them.
    pub wick: u32,
    /// With candle's device-generic tensor ops, one launch per tensor op: the path CUDA
    /// tensors took before wick's kernels.
    pub generic: u32,
}

/// Launches per node of the kernel named `name` (its CPU name, as a CPU profile records
/// it): the kernel's own count ([`Kernel::cuda_launches`](wick_ops::Kernel::cuda_launches)).
/// `None` for a kernel whose launches wick does not know.
pub fn launches(name: &str) -> Option<Launches> {
    wick_ops::Kernel::named(name)
        .and_then(wick_ops::Kernel::cuda_launches)
        .map(|l| Launches {
            wick: l.wick,
            generic: l.generic,
        })
}

/// One op type's prediction.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PredictedRow {
    /// The kernel's name.
    pub name: String,
    /// Nodes of this type in the step.
    pub nodes: usize,
    /// FLOPs per step.
    pub flops: u64,
    /// Bytes moved per step.
    pub bytes: u64,
    /// Whether its FLOPs run on tensor cores (TF32).
    pub tensor_cores: bool,
    /// Seconds at the peaks: max(FLOPs / compute peak, bytes / bandwidth).
    pub roof_sec: f64,
    /// Launches per step on wick's path and on the generic path.
    pub launches: Launches,
    /// Predicted seconds on wick's path: max(roof / efficiency, launches * launch cost).
    pub wick_sec: f64,
    /// Predicted seconds on the generic path: its extra launches, and a memory pass per
    /// launch beyond wick's (each generic tensor op reads and writes the activation).
    pub generic_sec: f64,
}

/// A predicted step on a device.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GpuPrediction {
    /// The datasheet.
    pub device: DeviceSheet,
    /// Per op type, largest predicted time first.
    pub rows: Vec<PredictedRow>,
    /// Kernel types the launch table does not know (counted as one launch, generic too).
    pub unknown_kernels: Vec<String>,
    /// Images per step (the profile's batch), when the profile records one.
    pub batch: Option<usize>,
    /// Predicted seconds per phase (forward, backward, optimizer) on wick's path.
    pub phase_sec: [f64; 3],
}

impl GpuPrediction {
    /// Predicted step seconds on wick's path.
    pub fn step_sec(&self) -> f64 {
        self.rows.iter().map(|r| r.wick_sec).sum()
    }

    /// Predicted step seconds on candle's generic path.
    pub fn generic_step_sec(&self) -> f64 {
        self.rows.iter().map(|r| r.generic_sec).sum()
    }

    /// Launches per step on (wick's, the generic) path.
    pub fn launches(&self) -> (u64, u64) {
        self.rows.iter().fold((0, 0), |(w, g), r| {
            (w + r.launches.wick as u64, g + r.launches.generic as u64)
        })
    }
}

/// The parameters a merged update of a profile written before wick recorded
/// [`OpProfile::updated_parameters`] updates, from its input layout: SGD reads param,
/// grad[, buffer] and writes param[, buffer] per parameter; Adam reads the step, then
/// param, grad and two moments per parameter.
fn members_before_slots(op: &OpProfile) -> usize {
    let (inputs, outputs) = (op.input_shapes.len(), op.output_shapes.len());
    match op.name.as_str() {
        "SgdUpdateMultiTensor" => inputs.saturating_sub(outputs),
        "AdamUpdateMultiTensor" => inputs.saturating_sub(1) / 4,
        _ => 1,
    }
    .max(1)
}

/// The predicted step of `profile`'s graph on `device`.
pub fn predict(profile: &Profile, device: &DeviceSheet) -> GpuPrediction {
    let mut rows: Vec<PredictedRow> = Vec::new();
    let mut unknown = Vec::new();
    let mut phase_sec = [0.0; 3];
    for op in &profile.ops {
        let known = launches(&op.name);
        if known.is_none() && !unknown.contains(&op.name) {
            unknown.push(op.name.clone());
        }
        let mut l = known.unwrap_or(Launches {
            wick: 1,
            generic: 1,
        });
        // A merged update's parameters, which the generic path updates one by one.
        // 0 for a node that updates no parameter: it runs once.
        let members = op
            .updated_parameters
            .map_or_else(|| members_before_slots(op), |n| n.max(1));
        l.generic *= members as u32;
        let row = row_for(&mut rows, op);
        row.nodes += 1;
        row.flops += op.flops;
        row.bytes += op.bytes;
        row.launches.wick += l.wick;
        row.launches.generic += l.generic;
        let t = op_seconds(op, device, row.tensor_cores, l, members);
        row.roof_sec += t.roof;
        row.wick_sec += t.wick;
        row.generic_sec += t.generic;
        phase_sec[Phase::ALL.iter().position(|p| *p == op.phase).unwrap_or(0)] += t.wick;
    }
    rows.sort_by(|a, b| b.wick_sec.total_cmp(&a.wick_sec));
    GpuPrediction {
        device: device.clone(),
        rows,
        unknown_kernels: unknown,
        batch: (profile.run.batch > 0).then_some(profile.run.batch),
        phase_sec,
    }
}

/// The row of `op`'s kernel, made empty the first time.
fn row_for<'r>(rows: &'r mut Vec<PredictedRow>, op: &OpProfile) -> &'r mut PredictedRow {
    match rows.iter().position(|r| r.name == op.name) {
        Some(i) => &mut rows[i],
        None => {
            rows.push(PredictedRow {
                name: op.name.clone(),
                nodes: 0,
                flops: 0,
                bytes: 0,
                tensor_cores: matches!(
                    op.class,
                    KernelClass::Convolution
                        | KernelClass::Linear
                        | KernelClass::MatMul
                        | KernelClass::Attention
                ),
                roof_sec: 0.0,
                launches: Launches {
                    wick: 0,
                    generic: 0,
                },
                wick_sec: 0.0,
                generic_sec: 0.0,
            });
            rows.last_mut().expect("just pushed")
        }
    }
}

/// One node's predicted seconds: at the roofs, on wick's path, and on the generic path.
struct OpSeconds {
    roof: f64,
    wick: f64,
    generic: f64,
}

/// `op`'s seconds on `device` with launches `l` (the generic ones for all its `members`).
fn op_seconds(
    op: &OpProfile,
    device: &DeviceSheet,
    tensor_cores: bool,
    l: Launches,
    members: usize,
) -> OpSeconds {
    let compute = op.flops as f64 / device.compute_peak(tensor_cores, &op.dtype);
    let memory = op.bytes as f64 / device.memory_bytes_per_sec;
    // Each side at its own assumed efficiency, the longer one winning: no jump at the
    // ridge, where choosing one efficiency by the longer raw roof would switch between
    // them (5x apart on an H200).
    let kernel_sec = (compute / device.compute_efficiency).max(memory / device.memory_efficiency);
    // Each generic launch past wick's count is one more pass over the op's output (over
    // one parameter's, for a merged update: as many passes per parameter).
    let out_bytes: u64 = op
        .output_shapes
        .iter()
        .map(|s| s.iter().product::<usize>() as u64 * 4)
        .sum();
    let extra = (l.generic as f64 / members as f64 - l.wick as f64).max(0.0);
    let generic_kernel = kernel_sec
        + extra * 2.0 * out_bytes as f64 / (device.memory_bytes_per_sec * device.memory_efficiency);
    OpSeconds {
        roof: compute.max(memory),
        wick: kernel_sec.max(l.wick as f64 * device.launch_sec),
        generic: generic_kernel.max(l.generic as f64 * device.launch_sec),
    }
}

/// What the prediction leaves out, printed under it.
pub const CAVEATS: &str = "Caveats: a model, not a measurement. It has no input pipeline (the step alone, the batch already on the GPU), no overlap between kernels or with copies, no caches (an op's inputs may still be in the L2), no cuDNN algorithm choice, and wick's CUDA path has not yet run on a GPU: it is built and checked through the CPU emulation only.";

impl std::fmt::Display for GpuPrediction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = &self.device;
        writeln!(
            f,
            "Predicted step on {} ({}):",
            printable(&d.name),
            printable(&d.description)
        )?;
        writeln!(
            f,
            "  peaks {:.0} GB/s, FP32 {:.1} TFLOP/s, TF32 {:.1} TFLOP/s, FP16/BF16 {} (bf16 and f16 convolutions and matrix products); each op type takes the longer of its bytes at {:.0}% of the bandwidth and its FLOPs at {:.0}% of the compute peak, and at least {:.1} us per launch",
            d.memory_bytes_per_sec / 1e9,
            d.fp32_flops_per_sec / 1e12,
            d.tf32_flops_per_sec / 1e12,
            match d.f16_flops_per_sec > 0.0 {
                true => format!("{:.1} TFLOP/s", d.f16_flops_per_sec / 1e12),
                false => "not given (TF32's peak)".to_string(),
            },
            d.memory_efficiency * 100.0,
            d.compute_efficiency * 100.0,
            d.launch_sec * 1e6
        )?;
        writeln!(
            f,
            "  {:<30} {:>5} {:>10} {:>10} {:>9} {:>8} {:>9} {:>9} {:>10}",
            "op type",
            "nodes",
            "GFLOP",
            "MB",
            "roof ms",
            "launches",
            "wick ms",
            "generic",
            "generic ms"
        )?;
        for r in &self.rows {
            writeln!(
                f,
                "  {:<30} {:>5} {:>10.1} {:>10.1} {:>9.3} {:>8} {:>9.3} {:>9} {:>10.3}",
                printable(&r.name),
                r.nodes,
                r.flops as f64 / 1e9,
                r.bytes as f64 / 1e6,
                r.roof_sec * 1e3,
                r.launches.wick,
                r.wick_sec * 1e3,
                r.launches.generic,
                r.generic_sec * 1e3
            )?;
        }
        let (lw, lg) = self.launches();
        let [fwd, bwd, opt] = self.phase_sec;
        writeln!(
            f,
            "  step: {:.2} ms with wick's kernels ({lw} launches; forward {:.2} ms, backward {:.2} ms, optimizer {:.2} ms), {:.2} ms on candle's generic path ({lg} launches)",
            self.step_sec() * 1e3,
            fwd * 1e3,
            bwd * 1e3,
            opt * 1e3,
            self.generic_step_sec() * 1e3
        )?;
        if let Some(b) = self.batch {
            writeln!(
                f,
                "  {:.0} images/s at batch {b} with wick's kernels",
                b as f64 / self.step_sec()
            )?;
        }
        if !self.unknown_kernels.is_empty() {
            writeln!(
                f,
                "  counted as one launch each (not in the launch table): {}",
                printable(&self.unknown_kernels.join(", "))
            )?;
        }
        writeln!(f, "  {CAVEATS}")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_datasheets_parse_and_are_valid() {
        let known = DeviceSheet::known();
        assert_eq!(
            known.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
            ["h200", "h100", "a100", "v100"]
        );
        for d in &known {
            d.validate().unwrap();
        }
        let mut bad = DeviceSheet::named("H200").unwrap();
        bad.memory_efficiency = 1.5;
        assert!(bad.validate().unwrap_err().contains("at most 1"));
        bad.launch_sec = f64::NAN;
        assert!(bad.validate().unwrap_err().contains("launch_sec"));
        bad.f16_flops_per_sec = -1.0;
        assert!(bad.validate().unwrap_err().contains("f16_flops_per_sec"));
        // A user's sheet without the 16-bit peak parses, and 16-bit products take TF32's.
        let mut json: serde_json::Value = serde_json::from_str(DATASHEETS).unwrap();
        json[0].as_object_mut().unwrap().remove("f16_flops_per_sec");
        let old: DeviceSheet = serde_json::from_value(json[0].clone()).unwrap();
        old.validate().unwrap();
        assert_eq!(old.compute_peak(true, "BF16"), old.tf32_flops_per_sec);
    }

    #[test]
    fn sixteen_bit_products_take_the_sixteen_bit_tensor_core_peak() {
        let conv = |dtype: &str| crate::OpProfile {
            flops: 1_000_000_000_000,
            bytes: 1,
            dtype: dtype.into(),
            ..crate::OpProfile::new(wick_ops::Kernel::ConvForward, 1e-3)
        };
        let a100 = DeviceSheet::named("a100").unwrap();
        let step = |dtype: &str| {
            let profile = Profile {
                ops: vec![conv(dtype)],
                ..Default::default()
            };
            predict(&profile, &a100).step_sec()
        };
        let at = |peak: f64| 1e12 / (peak * a100.compute_efficiency);
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b;
        assert!(close(step("F32"), at(156e12)), "{}", step("F32"));
        assert!(close(step("BF16"), at(312e12)), "{}", step("BF16"));
        assert!(close(step("F16"), at(312e12)), "{}", step("F16"));
        // Element-wise work stays on the FP32 peak whatever its dtype.
        assert_eq!(a100.compute_peak(false, "BF16"), a100.fp32_flops_per_sec);
    }

    #[test]
    fn fused_families_launch_fewer_kernels_than_the_generic_path() {
        for name in [
            "BatchNormReLUForwardTraining",
            "BatchNormReLUBackward",
            "AddReLU",
            "SgdUpdate",
        ] {
            let l = launches(name).unwrap();
            assert!(l.wick < l.generic, "{name}: {l:?}");
        }
        assert_eq!(launches("NoSuchKernel"), None);
    }

    #[test]
    fn a_merged_update_is_one_launch_and_the_generic_path_updates_each_parameter() {
        let update = |name: &str, params: usize| crate::OpProfile {
            name: name.into(),
            phase: Phase::Optimizer,
            flops: 4_000_000 * params as u64,
            // param, grad, buffer in; param, buffer out, per parameter.
            input_shapes: vec![vec![1_000_000]; 3 * params],
            output_shapes: vec![vec![1_000_000]; 2 * params],
            updated_parameters: Some(params),
            bytes: 20_000_000 * params as u64,
            ..crate::OpProfile::new(wick_ops::Kernel::SgdUpdate, 1e-3)
        };
        let h200 = DeviceSheet::named("h200").unwrap();
        let separate = Profile {
            ops: (0..3).map(|_| update("SgdUpdate", 1)).collect(),
            ..Default::default()
        };
        let merged = Profile {
            ops: vec![update("SgdUpdateMultiTensor", 3)],
            ..Default::default()
        };
        let (a, b) = (predict(&separate, &h200), predict(&merged, &h200));
        assert_eq!((a.launches(), b.launches()), ((3, 21), (1, 21)));
        // The same bytes on the generic path, however the nodes are grouped.
        let rel = (a.generic_step_sec() - b.generic_step_sec()).abs() / a.generic_step_sec();
        assert!(
            rel < 1e-9,
            "{} vs {}",
            a.generic_step_sec(),
            b.generic_step_sec()
        );
        // Adam in a profile written before wick recorded the updated parameters: counted
        // from the layout, the step, then param, grad and two moments per parameter.
        let mut adam = update("AdamUpdateMultiTensor", 3);
        adam.updated_parameters = None;
        adam.input_shapes = vec![vec![1_000_000]; 1 + 4 * 3];
        adam.output_shapes = vec![vec![1_000_000]; 3 * 3];
        let merged_adam = Profile {
            ops: vec![adam],
            ..Default::default()
        };
        assert_eq!(predict(&merged_adam, &h200).launches(), (1, 36));
        // A recorded node that updates no parameter (0) runs its launches once.
        let conv = crate::OpProfile {
            updated_parameters: Some(0),
            flops: 1_000_000,
            bytes: 1_000_000,
            ..crate::OpProfile::new(wick_ops::Kernel::BatchNormForwardTraining, 1e-3)
        };
        let one = predict(
            &Profile {
                ops: vec![conv],
                ..Default::default()
            },
            &h200,
        );
        assert_eq!(one.launches(), (2, 19));
        assert!(one.generic_step_sec().is_finite());
    }

    /// Two convolutions either side of the TF32 ridge, their bytes 1% apart: their
    /// predictions are 1% apart too (each side at its own efficiency), not 5x; and the
    /// text states the rule and its caveats.
    #[test]
    fn the_efficiencies_hold_on_both_sides_of_the_ridge_and_the_caveats_are_printed() {
        let h200 = DeviceSheet::named("h200").unwrap();
        let ridge = h200.tf32_flops_per_sec / h200.memory_bytes_per_sec;
        let conv = |bytes: f64| crate::OpProfile {
            flops: 1_000_000_000_000,
            bytes: bytes as u64,
            ..crate::OpProfile::new(wick_ops::Kernel::ConvForward, 1e-3)
        };
        let at = |bytes: f64| {
            let p = Profile {
                ops: vec![conv(bytes)],
                ..Default::default()
            };
            predict(&p, &h200).rows[0].wick_sec
        };
        let just_compute = at(1e12 / ridge * 0.995);
        let just_memory = at(1e12 / ridge * 1.005);
        assert!(
            (just_memory / just_compute - 1.0).abs() < 0.02,
            "{just_compute} s against {just_memory} s"
        );
        let p = Profile {
            ops: vec![conv(1e9)],
            ..Default::default()
        };
        let text = predict(&p, &h200).to_string();
        assert!(text.contains("takes the longer of its bytes at") && text.contains(CAVEATS));
    }
}
