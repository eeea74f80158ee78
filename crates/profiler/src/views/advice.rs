//! Recommendations: short rules, each fired by a measured figure that it quotes. No
//! figure, no advice. The thresholds are constants here, each with its reason.

use serde::Serialize;
use wick_ops::KernelClass;

use crate::profile::data::Profile;
use crate::profile::machine_peaks::MachinePeaks;
use crate::profile::roofline::Bound;
use crate::profile::step::PARTLY_INPUT_BOUND;
use wick_graph::ir::Phase;

/// One fired rule: what it looked at, the figure that fired it, and what to do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recommendation {
    /// The rule's name (`input`, `fusion`, `precision`, `overhead`, `roofline`).
    pub rule: &'static str,
    /// The measured figure that fired it.
    pub figure: String,
    /// What to do.
    pub advice: String,
}

/// Elementwise kernels' share of op time from which fusing them pays: each reads and
/// writes a whole activation for one or two FLOPs per element, so past a seventh of the
/// step the memory traffic a fused kernel saves is worth a pass.
pub const FUSION_SHARE: f64 = 0.15;
/// The executor's overhead inside phases (work between ops), as a share of the
/// iteration, from which a bigger batch pays: the overhead is per op, not per image.
pub const OVERHEAD_SHARE: f64 = 0.10;
/// On a GPU, the f32 share of op time from which mixed precision is worth trying.
pub const F32_SHARE: f64 = 0.90;
/// An op type is named as far below its roof when it uses less than this share of it...
pub const FAR_BELOW_ROOF: f64 = 0.20;
/// ... and takes at least this share of op time (smaller ones do not move the step).
pub const ROOF_MIN_SHARE: f64 = 0.05;

/// The optimizer phase's share of the iteration from which its cost is worth a rule:
/// it reads and writes every parameter, gradient and state once per step whatever the
/// batch, so at a tenth of the step a larger batch or a fused update moves the step.
pub const OPTIMIZER_SHARE: f64 = 0.10;

/// Kernels that do a few FLOPs per element they read and write: element-wise ones,
/// reductions and batch norm, whose passes a fused kernel would save (a gather or a
/// slice only moves data, which fusion does not save). Every class is decided here, so a
/// new one must be.
fn few_flops_per_element(class: KernelClass) -> bool {
    match class {
        KernelClass::Elementwise
        | KernelClass::Normalization
        | KernelClass::LayerNorm
        | KernelClass::Softmax
        | KernelClass::Reduction => true,
        KernelClass::Convolution
        | KernelClass::Attention
        | KernelClass::Linear
        | KernelClass::MatMul
        | KernelClass::Pooling
        | KernelClass::Reshape
        | KernelClass::Loss
        | KernelClass::Optimizer
        | KernelClass::Communication
        | KernelClass::Indexing => false,
    }
}

impl Profile {
    /// The rules that fire on this profile (the roofline rule needs `machine`).
    pub fn recommendations(&self) -> Vec<Recommendation> {
        let mut out = Vec::new();
        if let Some(step) = &self.step {
            let share = step.input_share();
            if share >= PARTLY_INPUT_BOUND {
                out.push(Recommendation {
                    rule: "input",
                    figure: format!("{:.1}% of the step waits for data", 100.0 * share),
                    advice: self
                        .input_pipeline
                        .as_ref()
                        .and_then(|i| i.fix(step))
                        .unwrap_or_else(|| "prefetch deeper (Prefetcher's depth) or prepare batches on more loader threads".into()),
                });
            }
        }
        let op_time: f64 = self.ops.iter().map(|o| o.mean_sec).sum();
        if op_time > 0.0 {
            out.extend(self.fusion_rule(op_time));
            let f32_time: f64 = self
                .ops
                .iter()
                .filter(|o| o.dtype == "F32")
                .map(|o| o.mean_sec)
                .sum();
            let f32_share = f32_time / op_time;
            if !self.device.starts_with("Cpu") && f32_share >= F32_SHARE {
                out.push(Recommendation {
                    rule: "precision",
                    figure: format!("{:.1}% of op time computes in f32 on {}", 100.0 * f32_share, self.device),
                    advice: "try mixed precision (bf16 or f16 compute, f32 weights): tensor cores run those several times faster".into(),
                });
            }
            let precision = |(figure, advice)| Recommendation {
                rule: "precision",
                figure,
                advice,
            };
            if f32_share >= F32_SHARE {
                out.extend(self.cpu_precision_rule(op_time).map(precision));
            }
            out.extend(self.cpu_low_precision_rule(op_time).map(precision));
        }
        if self.iteration_sec > 0.0 {
            let share = self.overhead_in_phases_sec() / self.iteration_sec;
            if share >= OVERHEAD_SHARE {
                out.push(Recommendation {
                    rule: "overhead",
                    figure: format!(
                        "the executor's work between ops is {:.1}% of the iteration",
                        100.0 * share
                    ),
                    advice: "use a bigger batch: this overhead is per op, not per image".into(),
                });
            }
        }
        if let Some(r) = self.optimizer_rule() {
            out.push(r);
        }
        if let Some(machine) = &self.machine {
            out.extend(self.far_below_roof(machine));
        }
        out
    }

    /// The fusion rule: the kernels that do a few FLOPs per element, named by time, and
    /// the fusions that fit the kernels this model has.
    fn fusion_rule(&self, op_time: f64) -> Option<Recommendation> {
        let mut kernels: Vec<(String, f64)> = Vec::new();
        for o in self.ops.iter().filter(|o| few_flops_per_element(o.class)) {
            let name = o.type_name();
            match kernels.iter_mut().find(|(n, _)| *n == name) {
                Some((_, sec)) => *sec += o.mean_sec,
                None => kernels.push((name, o.mean_sec)),
            }
        }
        let share = kernels.iter().map(|(_, sec)| sec).sum::<f64>() / op_time;
        if share < FUSION_SHARE {
            return None;
        }
        kernels.sort_by(|a, b| b.1.total_cmp(&a.1));
        let named: Vec<&str> = kernels.iter().take(4).map(|(n, _)| n.as_str()).collect();
        let more = match kernels.len().saturating_sub(named.len()) {
            0 => String::new(),
            n => format!(", {n} more"),
        };
        let has = |class: KernelClass| self.ops.iter().any(|o| o.class == class);
        let mut fusions = Vec::new();
        if has(KernelClass::Convolution) && has(KernelClass::Normalization) {
            fusions.push("convolution + batch norm + activation");
        }
        if (has(KernelClass::Linear) || has(KernelClass::MatMul)) && has(KernelClass::Elementwise) {
            fusions.push("linear + bias + activation");
        }
        if has(KernelClass::LayerNorm) {
            fusions.push("residual add + layer norm");
        }
        if has(KernelClass::Softmax) {
            fusions.push("matmul + softmax + matmul as fused attention");
        }
        let fit = if fusions.is_empty() {
            String::new()
        } else {
            format!(" ({})", fusions.join("; "))
        };
        Some(Recommendation {
            rule: "fusion",
            figure: format!(
                "kernels of a few FLOPs per element ({}{more}) take {:.1}% of op time",
                named.join(", "),
                100.0 * share
            ),
            advice: format!(
                "fuse them into their neighbours{fit} to save a read and a write of each activation"
            ),
        })
    }

    /// The optimizer rule: its phase's share of the iteration, and, with the machine's
    /// peaks, how close its update kernels run to the memory roof.
    fn optimizer_rule(&self) -> Option<Recommendation> {
        let phase = self.phases.iter().find(|p| p.phase == Phase::Optimizer)?;
        let share = phase.sec / self.iteration_sec;
        if !(self.iteration_sec > 0.0 && share >= OPTIMIZER_SHARE) {
            return None;
        }
        let updates = self
            .ops
            .iter()
            .filter(|o| o.class == KernelClass::Optimizer)
            .count();
        // How close the update kernels run to their roof: at it, only less work helps.
        let trusted = self
            .machine
            .as_ref()
            .filter(|m| self.roofline_unreliable(m).is_none());
        let at_roof = trusted.and_then(|m| {
            let (sec, roof) = self
                .roofline(m)
                .iter()
                .filter(|r| {
                    self.ops
                        .iter()
                        .any(|o| o.type_name() == r.name && o.class == KernelClass::Optimizer)
                })
                .fold((0.0, 0.0), |(t, a), r| (t + r.total_sec, a + r.roof_sec));
            (sec > 0.0).then_some(roof / sec)
        });
        let roof = at_roof.map_or(String::new(), |r| {
            format!("; its kernels run at {:.0}% of the memory roof", 100.0 * r)
        });
        let advice = if at_roof.is_some_and(|r| r >= 0.8) {
            "its cost is per parameter, not per image, and its kernels already stream at the memory roof: a larger batch spreads it over more images; fusing the update into fewer passes (a fused multi-tensor update) or lighter state (bf16 momentum) is the other lever"
        } else {
            "its cost is per parameter, not per image: a larger batch spreads it over more images; a fused multi-tensor update (one pass over all parameters, as PyTorch's foreach and fused optimizers) saves the per-tensor passes"
        };
        Some(Recommendation {
            rule: "optimizer",
            figure: format!(
                "the optimizer takes {:.1}% of the iteration ({:.3} ms, {updates} update nodes){roof}",
                100.0 * share,
                phase.sec * 1e3
            ),
            advice: advice.into(),
        })
    }

    /// The op types far below their roofs, ranked by their time above it: the first is
    /// the one kernel to tune first.
    fn far_below_roof(&self, machine: &MachinePeaks) -> Vec<Recommendation> {
        if let Some(why) = self.roofline_unreliable(machine) {
            return vec![Recommendation {
                rule: "roofline",
                figure: format!("the roofline is unreliable: {why}"),
                advice: "rerun on a quiet machine: no kernel is named from these roofs".into(),
            }];
        }
        let mut rows: Vec<_> = self
            .roofline(machine)
            .into_iter()
            .filter(|r| r.share >= ROOF_MIN_SHARE && r.roofline_share < FAR_BELOW_ROOF)
            .collect();
        let above = |r: &crate::profile::roofline::RooflineRow| r.total_sec - r.roof_sec;
        rows.sort_by(|a, b| above(b).total_cmp(&above(a)));
        let first = rows.first().map(|r| r.name.clone()).unwrap_or_default();
        rows.iter()
            .enumerate()
            .map(|(rank, r)| {
                let roof = match r.bound {
                    Bound::Compute => format!(
                        "{:.1} GFLOP/s of the GEMM's {:.1}",
                        r.gflops_per_sec,
                        r.peak_flops_per_sec / 1e9
                    ),
                    Bound::Memory => format!(
                        "{:.1} GB/s of the copy's {:.1}",
                        r.gbytes_per_sec,
                        machine.bytes_per_sec / 1e9
                    ),
                };
                let ms = 1e3 * above(r);
                let made_of = self.generic_make_up(&r.name);
                let advice = if rank == 0 {
                    format!(
                        "{} is the kernel to tune first: {ms:.3} ms per iteration above its roof, the most of any",
                        r.name
                    )
                } else {
                    format!(
                        "{ms:.3} ms per iteration above its roof: after {first}, number {} by time above the roof",
                        rank + 1
                    )
                };
                Recommendation {
                    rule: "roofline",
                    figure: format!(
                        "{} takes {:.1}% of op time at {:.0}% of its roof ({roof}){made_of}",
                        r.name,
                        100.0 * r.share,
                        100.0 * r.roofline_share
                    ),
                    advice,
                }
            })
            .collect()
    }

    /// What an op type is made of when that is why it is far below its roof: a chain of
    /// generic tensor ops, each a pass over memory where one fused pass would do.
    fn generic_make_up(&self, type_name: &str) -> String {
        let ops = self
            .ops
            .iter()
            .find(|o| o.type_name() == type_name)
            .and_then(|o| o.generic_ops);
        match ops {
            Some(n) => format!(
                "; it runs as a composition of {n} generic tensor ops, each reading and writing memory in a pass of its own, where one fused kernel would make one pass"
            ),
            None => String::new(),
        }
    }

    /// The recommendations as text: one line per fired rule, or a line saying none did.
    pub fn advice_lines(&self) -> String {
        let fired = self.recommendations();
        if fired.is_empty() {
            return "Recommendations : none (no rule's measured trigger reached its threshold)\n"
                .into();
        }
        let mut s = String::from("Recommendations :\n");
        for r in fired {
            s.push_str(&format!("  [{}] {} -> {}\n", r.rule, r.figure, r.advice));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wick_ops::Kernel;

    use crate::profile::data::PhaseProfile;
    use crate::profile::step::StepProfile;
    use crate::views::test_profiles::{conv_and_relu, op};
    use wick_graph::ir::Phase;

    /// A CPU profile whose conv takes 0.9 s near its roof and a ReLU 0.1 s: no rule fires.
    fn quiet() -> Profile {
        Profile {
            phases: vec![PhaseProfile {
                phase: Phase::Forward,
                sec: 1.0,
                ops_sec: 0.99,
            }],
            step: Some(StepProfile {
                intervals: 3,
                wall_sec: 1.0,
                input_wait_sec: 0.01,
                run_sec: 0.99,
                ..Default::default()
            }),
            machine: Some(MachinePeaks::new(100e9, 10e9)),
            ..conv_and_relu((0.9, 90.0, 1_000_000_000), (0.1, 800_000_000))
        }
    }

    fn rules(p: &Profile) -> Vec<&'static str> {
        p.recommendations().iter().map(|r| r.rule).collect()
    }

    #[test]
    fn no_rule_fires_without_its_trigger() {
        assert_eq!(rules(&quiet()), Vec::<&str>::new());
        assert!(quiet().advice_lines().contains("none"));
    }

    #[test]
    fn each_rule_fires_on_its_own_trigger_and_quotes_it() {
        let mut p = quiet();
        p.step.as_mut().unwrap().input_wait_sec = 0.3;
        assert_eq!(rules(&p), ["input"]);
        assert!(p
            .advice_lines()
            .contains("30.0% of the step waits for data"));

        let mut p = quiet();
        p.ops[1].mean_sec = 0.3;
        assert_eq!(rules(&p), ["fusion"]);
        assert!(p.recommendations()[0].figure.contains("25.0% of op time"));

        let mut p = quiet();
        p.device = "Cuda { gpu_id: 0 }".into();
        assert_eq!(rules(&p), ["precision"]);
        p.ops.iter_mut().for_each(|o| o.dtype = "BF16".into());
        assert_eq!(rules(&p), Vec::<&str>::new(), "not f32: silent");

        // On a CPU: only with bf16 instructions, and only for a step mostly in products.
        let mut p = quiet();
        p.run.cpu_bf16 = true;
        assert_eq!(rules(&p), ["precision"]);
        assert!(p.recommendations()[0]
            .figure
            .contains("90.0% of op time is f32 products"));
        assert!(p.recommendations()[0].advice.contains("--precision bf16"));
        p.ops[0].mean_sec = 0.05;
        p.ops[1].mean_sec = 0.01;
        p.ops.push(op(Kernel::BatchNormForwardTraining, 0.1, 1, 1));
        assert!(
            !rules(&p).contains(&"precision"),
            "products 31% of op time: silent"
        );
        let mut p = quiet();
        p.run.cpu_bf16 = true;
        p.ops[0].dtype = "BF16".into();
        assert_eq!(rules(&p), Vec::<&str>::new(), "already bf16: silent");

        let mut p = quiet();
        p.phases[0].ops_sec = 0.85;
        assert_eq!(rules(&p), ["overhead"]);
        assert!(p.recommendations()[0].figure.contains("15.0%"));

        let mut p = quiet();
        p.ops[0].mean_sec = 9.0; // 10 GFLOP/s of a 100 GFLOP/s roof
        assert_eq!(rules(&p), ["roofline"]);
        let r = &p.recommendations()[0];
        assert!(
            r.figure.starts_with("ConvForward") && r.figure.contains("10% of its roof"),
            "{r:?}"
        );
        p.machine = None;
        assert_eq!(rules(&p), Vec::<&str>::new(), "no measured roof: silent");

        // The optimizer at 12% of the iteration, its update streaming 1.2 GB in 0.12 s:
        // 10 GB/s, the copy's roof.
        let mut p = quiet();
        p.phases[0].sec = 0.88;
        p.phases.push(PhaseProfile {
            phase: Phase::Optimizer,
            sec: 0.12,
            ops_sec: 0.12,
        });
        let mut update = op(Kernel::SgdUpdate, 0.12, 100_000_000, 1_200_000_000);
        update.phase = Phase::Optimizer;
        p.ops.push(update);
        assert_eq!(rules(&p), ["optimizer"]);
        let r = &p.recommendations()[0];
        assert!(
            r.figure.contains("12.0% of the iteration")
                && r.figure.contains("100% of the memory roof")
                && r.advice.contains("already stream at the memory roof"),
            "{r:?}"
        );
        p.phases[1].sec = 0.09;
        assert_eq!(rules(&p), Vec::<&str>::new(), "9%: under the threshold");
    }

    #[test]
    fn the_fusion_rule_names_this_models_kernels_and_fusions() {
        // A transformer's step: linear layers, GELU and layer norm; no ReLU, no batch norm.
        let mut p = quiet();
        p.ops = vec![
            op(Kernel::LinearForward, 0.6, 60_000_000_000, 1_000_000_000),
            op(
                Kernel::Activation(wick_ops::Activation::Gelu),
                0.25,
                0,
                800_000_000,
            ),
            op(Kernel::LayerNormForward, 0.15, 0, 800_000_000),
        ];
        let r = p.recommendations();
        let fusion = r.iter().find(|r| r.rule == "fusion").expect("fires at 40%");
        assert!(
            fusion.figure.contains("(GELU, LayerNormForward)")
                && fusion.figure.contains("40.0% of op time"),
            "{fusion:?}"
        );
        assert!(
            fusion.advice.contains("linear + bias + activation")
                && fusion.advice.contains("residual add + layer norm")
                && !fusion.advice.contains("batch norm"),
            "{fusion:?}"
        );
        // A CNN's: the convolution + batch norm fusion, and no layer norm's.
        let mut p = quiet();
        p.ops[1].mean_sec = 0.2;
        p.ops
            .push(op(Kernel::BatchNormForwardTraining, 0.2, 0, 800_000_000));
        let fusion = p.recommendations().into_iter().find(|r| r.rule == "fusion");
        let fusion = fusion.expect("fires");
        assert!(
            fusion.figure.contains("(ReLU, BatchNormForwardTraining)"),
            "{fusion:?}"
        );
        assert!(
            fusion
                .advice
                .contains("convolution + batch norm + activation")
                && !fusion.advice.contains("layer norm"),
            "{fusion:?}"
        );
    }

    #[test]
    fn one_kernel_is_named_first_by_its_time_above_the_roof() {
        // Two types far below their roofs: the conv 0.5 s at 10% (0.45 s above), the
        // depthwise conv 0.4 s at 5% (0.38 s above), and a ReLU.
        let mut p = quiet();
        p.ops[0].mean_sec = 0.5;
        p.ops[0].flops = 5_000_000_000;
        p.ops[0].bytes = 100_000_000;
        let mut depthwise = op(Kernel::ConvForward, 0.4, 0, 200_000_000);
        depthwise.variant = Some(wick_ops::KernelVariant::DepthwiseConv);
        p.ops.push(depthwise);
        let roof: Vec<Recommendation> = p
            .recommendations()
            .into_iter()
            .filter(|r| r.rule == "roofline")
            .collect();
        assert_eq!(roof.len(), 2, "{roof:?}");
        let first: Vec<_> = roof.iter().filter(|r| r.advice.contains("first")).collect();
        assert_eq!(first.len(), 1, "{roof:?}");
        assert!(roof[0]
            .advice
            .starts_with("ConvForward is the kernel to tune first: 450.000 ms"));
        assert!(
            roof[1].figure.starts_with("ConvForward (depthwise) takes"),
            "{roof:?}"
        );
        assert!(roof[1].advice.contains("380.000 ms") && roof[1].advice.contains("number 2"));
    }

    #[test]
    fn a_kernel_made_of_generic_ops_says_so() {
        // A group norm far below its memory roof (0.1 GB in 0.5 s of a 10 GB/s copy).
        let mut p = quiet();
        p.ops[0].mean_sec = 0.4;
        p.ops[0].flops = 36_000_000_000;
        let mut norm = op(Kernel::GroupNormForward, 0.5, 0, 100_000_000);
        norm.generic_ops = Kernel::GroupNormForward.cpu_generic_ops();
        p.ops.push(norm);
        let lines = p.advice_lines();
        assert!(
            lines.contains("GroupNormForward takes")
                && lines.contains("composition of 10 generic tensor ops"),
            "{lines}"
        );
        assert!(!lines.contains("ConvForward takes"), "{lines}");
    }
}
