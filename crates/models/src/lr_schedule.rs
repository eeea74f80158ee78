//! Learning-rate schedules with PyTorch's definitions: constant, step (`MultiStepLR`:
//! milestones and gamma) and cosine with linear warm-up (`LinearLR` followed by
//! `CosineAnnealingLR`, as `SequentialLR` chains them). Each counts in epochs or in steps.

use std::str::FromStr;

use crate::error::{ModelError, Result};

/// Whether a schedule's counter advances per epoch or per step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleUnit {
    /// Once per epoch (PyTorch's usual `scheduler.step()` after each epoch).
    Epoch,
    /// Once per training step.
    Step,
}

/// A learning-rate schedule around a base rate.
#[derive(Debug, Clone, PartialEq)]
pub enum LrSchedule {
    /// The base rate throughout.
    Constant,
    /// `MultiStepLR`: the base rate times `gamma` for every milestone reached.
    Step {
        /// Counter values at which the rate is multiplied by `gamma`.
        milestones: Vec<usize>,
        /// The factor (PyTorch's default is 0.1).
        gamma: f64,
        /// What the counter counts.
        unit: ScheduleUnit,
    },
    /// `LinearLR(start_factor, total_iters=warmup)` then `CosineAnnealingLR(T_max =
    /// total - warmup, eta_min)`.
    Cosine {
        /// Warm-up length (counter values).
        warmup: usize,
        /// The rate's factor at the start of the warm-up (PyTorch's default is 1/3).
        start_factor: f64,
        /// The schedule's whole length, warm-up included.
        total: usize,
        /// The rate at the end (`eta_min`).
        min_lr: f64,
        /// What the counter counts.
        unit: ScheduleUnit,
    },
}

impl LrSchedule {
    /// The rate at training step `step` (from 0) with `steps_per_epoch` steps an epoch.
    pub fn lr(&self, base: f64, step: usize, steps_per_epoch: usize) -> f64 {
        let count = |unit: ScheduleUnit| match unit {
            ScheduleUnit::Epoch => step / steps_per_epoch.max(1),
            ScheduleUnit::Step => step,
        };
        match self {
            LrSchedule::Constant => base,
            LrSchedule::Step {
                milestones,
                gamma,
                unit,
            } => {
                let t = count(*unit);
                base * gamma.powi(milestones.iter().filter(|m| **m <= t).count() as i32)
            }
            LrSchedule::Cosine {
                warmup,
                start_factor,
                total,
                min_lr,
                unit,
            } => {
                let t = count(*unit);
                if t < *warmup {
                    base * (start_factor + (1.0 - start_factor) * t as f64 / *warmup as f64)
                } else {
                    let span = total.saturating_sub(*warmup).max(1) as f64;
                    let done = ((t - warmup) as f64).min(span);
                    min_lr
                        + (base - min_lr) * (1.0 + (std::f64::consts::PI * done / span).cos()) / 2.0
                }
            }
        }
    }
}

impl FromStr for LrSchedule {
    type Err = ModelError;

    /// `constant`; `step:30,60[:gamma][/step]`; `cosine:total[:warmup[:min_lr]][/step]`.
    /// The counter counts epochs unless the text ends in `/step`.
    fn from_str(text: &str) -> Result<Self> {
        let bad = |why: &str| {
            ModelError::Config(format!(
                "learning-rate schedule `{text}`: {why} (expected constant, step:M1,M2[:GAMMA][/step] or cosine:TOTAL[:WARMUP[:MIN_LR]][/step])"
            ))
        };
        let (body, unit) = match text.strip_suffix("/step") {
            Some(b) => (b, ScheduleUnit::Step),
            None => (text, ScheduleUnit::Epoch),
        };
        let mut parts = body.split(':');
        let number = |s: Option<&str>, what: &str| -> Result<Option<f64>> {
            s.map(|v| {
                v.parse::<f64>()
                    .map_err(|_| bad(&format!("{what} `{v}` is not a number")))
            })
            .transpose()
        };
        match parts.next() {
            Some("constant") if parts.next().is_none() => Ok(LrSchedule::Constant),
            Some("step") => {
                let milestones = parts
                    .next()
                    .ok_or_else(|| bad("no milestones"))?
                    .split(',')
                    .map(|m| {
                        m.parse::<usize>()
                            .map_err(|_| bad(&format!("milestone `{m}`")))
                    })
                    .collect::<Result<Vec<_>>>()?;
                let gamma = number(parts.next(), "gamma")?.unwrap_or(0.1);
                if !(gamma > 0.0 && gamma.is_finite()) || parts.next().is_some() {
                    return Err(bad("gamma must be a positive number"));
                }
                Ok(LrSchedule::Step {
                    milestones,
                    gamma,
                    unit,
                })
            }
            Some("cosine") => {
                let total = number(parts.next(), "total")?.ok_or_else(|| bad("no total length"))?;
                let warmup = number(parts.next(), "warmup")?.unwrap_or(0.0);
                let min_lr = number(parts.next(), "min_lr")?.unwrap_or(0.0);
                if !(min_lr.is_finite() && min_lr >= 0.0) {
                    return Err(bad(&format!(
                        "min_lr {min_lr}: the rate at the end must be a finite number >= 0"
                    )));
                }
                if total < 1.0
                    || warmup < 0.0
                    || warmup >= total
                    || total.fract() != 0.0
                    || warmup.fract() != 0.0
                    || parts.next().is_some()
                {
                    return Err(bad(
                        "need a whole total >= 1, a whole warm-up below it and min_lr >= 0",
                    ));
                }
                Ok(LrSchedule::Cosine {
                    warmup: warmup as usize,
                    start_factor: 1.0 / 3.0,
                    total: total as usize,
                    min_lr,
                    unit,
                })
            }
            _ => Err(bad("unknown schedule")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PyTorch's `MultiStepLR.get_lr()`, recursively: at a milestone the previous rate is
    /// multiplied by gamma (once per milestone at that epoch), otherwise kept.
    fn torch_multistep(base: f64, milestones: &[usize], gamma: f64, epochs: usize) -> Vec<f64> {
        let mut lr = base;
        (0..epochs)
            .map(|t| {
                if t > 0 {
                    lr *= gamma.powi(milestones.iter().filter(|m| **m == t).count() as i32);
                }
                lr
            })
            .collect()
    }

    /// PyTorch's `LinearLR.get_lr()` then `CosineAnnealingLR.get_lr()`, recursively, as
    /// `SequentialLR` runs them (the cosine restarts its count at the milestone).
    fn torch_warmup_cosine(
        base: f64,
        start: f64,
        warmup: usize,
        t_max: usize,
        eta_min: f64,
        n: usize,
    ) -> Vec<f64> {
        let mut out = Vec::new();
        let mut lr = base * start;
        for t in 0..n {
            if t < warmup {
                if t > 0 {
                    // LinearLR: lr * (1 + (end - start) / (total * start + (t - 1) * (end - start)))
                    let (s, e, total) = (start, 1.0, warmup as f64);
                    lr *= 1.0 + (e - s) / (total * s + (t as f64 - 1.0) * (e - s));
                }
            } else {
                let k = t - warmup;
                let pi = std::f64::consts::PI;
                lr = if k == 0 {
                    base
                } else if (k - 1 + t_max).is_multiple_of(2 * t_max) {
                    lr + (base - eta_min) * (1.0 - (pi / t_max as f64).cos()) / 2.0
                } else {
                    eta_min
                        + (1.0 + (pi * k as f64 / t_max as f64).cos())
                            / (1.0 + (pi * (k as f64 - 1.0) / t_max as f64).cos())
                            * (lr - eta_min)
                };
            }
            out.push(lr);
        }
        out
    }

    #[test]
    fn step_and_cosine_match_pytorch_recursive_definitions() {
        let s: LrSchedule = "step:3,5,5:0.5".parse().unwrap();
        let ours: Vec<f64> = (0..8).map(|e| s.lr(0.1, e * 10, 10)).collect();
        let torch = torch_multistep(0.1, &[3, 5, 5], 0.5, 8);
        for (a, b) in ours.iter().zip(&torch) {
            assert!((a - b).abs() < 1e-15, "{ours:?} vs {torch:?}");
        }
        let c: LrSchedule = "cosine:20:4:0.001/step".parse().unwrap();
        let ours: Vec<f64> = (0..20).map(|t| c.lr(0.1, t, 7)).collect();
        let torch = torch_warmup_cosine(0.1, 1.0 / 3.0, 4, 16, 0.001, 20);
        for (t, (a, b)) in ours.iter().zip(&torch).enumerate() {
            assert!((a - b).abs() < 1e-12, "step {t}: {a} vs PyTorch {b}");
        }
        assert_eq!(
            "constant".parse::<LrSchedule>().unwrap().lr(0.3, 99, 5),
            0.3
        );
    }

    #[test]
    fn malformed_schedules_are_errors_naming_the_text() {
        for bad in [
            "cosine",
            "cosine:10:10",
            "step",
            "step:a",
            "step:3:-1",
            "linear:3",
            "cosine:5:1:x",
        ] {
            let e = bad.parse::<LrSchedule>().unwrap_err().to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
        // A NaN or negative minimum is named as the minimum, not blamed on the rate.
        for bad in ["cosine:5:1:nan", "cosine:5:1:-0.1", "cosine:5:1:inf"] {
            let e = bad.parse::<LrSchedule>().unwrap_err().to_string();
            assert!(
                e.contains("min_lr") && e.contains("finite number >= 0"),
                "{bad}: {e}"
            );
        }
    }
}
