//! A profile read from a file is checked before anything is computed from it: it timed at
//! least one iteration, every time is a finite number of seconds from 0 to a day, and the
//! per-iteration samples have the shape the profile declares. A bad file is an error naming the field, never a silent
//! "faster x-1.000" or a dropped row.

use crate::profile::data::Profile;

/// The longest time a profile may hold: a day per iteration, far beyond any real one;
/// larger values (1e308) would overflow the sums and ratios into infinities.
pub const MAX_SECONDS: f64 = 86_400.0;

/// `v` as a time: a finite number of seconds, from 0 to [`MAX_SECONDS`]; the error names
/// `field`.
fn time(field: impl FnOnce() -> String, v: f64) -> Result<(), String> {
    if v.is_finite() && (0.0..=MAX_SECONDS).contains(&v) {
        Ok(())
    } else {
        Err(format!(
            "{} is {v}: a time must be a finite number of seconds, from 0 to {MAX_SECONDS} (a day)",
            field()
        ))
    }
}

impl Profile {
    /// Checks the profile's times and samples (see the module docs); the error names the
    /// first bad field.
    pub fn validate(&self) -> Result<(), String> {
        if self.timed_iterations == 0 {
            return Err(
                "timed_iterations is 0: the profile timed no iteration, so it has no figure to show or compare"
                    .into(),
            );
        }
        self.validate_times()?;
        self.validate_samples()?;
        self.validate_machine()?;
        self.validate_input_pipeline()
    }

    /// The loader threads' stage times (each a time), CPU times, and their batch counts:
    /// a thread with stage time but no batch would divide by zero.
    fn validate_input_pipeline(&self) -> Result<(), String> {
        let Some(input) = &self.input_pipeline else {
            return Ok(());
        };
        for (i, t) in input.threads.iter().enumerate() {
            for stage in wick_graph::InputStage::ALL {
                let field = || format!("input_pipeline.threads[{i}].{}_sec", stage.as_str());
                time(field, t.stage_sec(stage))?;
            }
            if let Some(cpu) = t.cpu_sec {
                time(|| format!("input_pipeline.threads[{i}].cpu_sec"), cpu)?;
            }
            if t.batches == 0 || t.images < t.batches {
                return Err(format!(
                    "input_pipeline.threads[{i}] has {} batches of {} images: every thread reported prepares at least one batch of at least one image",
                    t.batches, t.images
                ));
            }
        }
        Ok(())
    }

    /// The machine's peaks, when present: finite and above 0, their ranges too (a peak
    /// of 0 or below would give negative normalised times and a roofline of NaNs).
    fn validate_machine(&self) -> Result<(), String> {
        let Some(m) = &self.machine else {
            return Ok(());
        };
        let peak = |field: &str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(format!(
                    "machine.{field} is {v}: a machine peak must be a finite number above 0"
                ))
            }
        };
        peak("flops_per_sec", m.flops_per_sec)?;
        peak("bytes_per_sec", m.bytes_per_sec)?;
        if let Some(v) = m.bf16_flops_per_sec {
            peak("bf16_flops_per_sec", v)?;
        }
        for (field, range) in [
            ("flops_range", m.flops_range),
            ("bytes_range", m.bytes_range),
        ] {
            if let Some([lo, hi]) = range {
                peak(&format!("{field}[0]"), lo)?;
                peak(&format!("{field}[1]"), hi)?;
                if lo > hi {
                    return Err(format!(
                        "machine.{field} is [{lo}, {hi}]: its slowest run is above its fastest"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The iteration's, phases' and ops' times, and the ops' order.
    fn validate_times(&self) -> Result<(), String> {
        for (field, v) in [
            ("forward_sec", self.forward_sec),
            ("backward_sec", self.backward_sec),
            ("optimizer_sec", self.optimizer_sec),
            ("iteration_sec", self.iteration_sec),
            ("iteration_median_sec", self.iteration_median_sec),
            ("iteration_min_sec", self.iteration_min_sec),
            ("iteration_max_sec", self.iteration_max_sec),
        ] {
            time(|| field.to_string(), v)?;
        }
        for (i, p) in self.phases.iter().enumerate() {
            time(|| format!("phases[{i}].sec"), p.sec)?;
            time(|| format!("phases[{i}].ops_sec"), p.ops_sec)?;
        }
        for (i, op) in self.ops.iter().enumerate() {
            for (name, v) in [
                ("mean_sec", op.mean_sec),
                ("min_sec", op.min_sec),
                ("max_sec", op.max_sec),
            ] {
                time(
                    || format!("ops[{i}] (OP_ID{} {}).{name}", op.op_id, op.name),
                    v,
                )?;
            }
            if op.op_id != i {
                return Err(format!(
                    "ops[{i}] has OP_ID{}: the rows must be in OP_ID order",
                    op.op_id
                ));
            }
        }
        Ok(())
    }

    /// The per-iteration samples: their shape against the profile's, and their times.
    fn validate_samples(&self) -> Result<(), String> {
        let s = &self.samples;
        let rows = [
            (
                "samples.iterations",
                "values",
                s.iterations.len(),
                self.timed_iterations,
            ),
            ("samples.phases", "rows", s.phases.len(), s.iterations.len()),
        ];
        for (field, what, len, expected) in rows {
            if len != expected {
                return Err(format!(
                    "{field} has {len} {what} for {expected} timed iterations"
                ));
            }
        }
        if s.ops.len() > s.iterations.len() {
            return Err(format!(
                "samples.ops has {} rows for {} timed iterations",
                s.ops.len(),
                s.iterations.len()
            ));
        }
        for (k, v) in s.iterations.iter().enumerate() {
            time(|| format!("samples.iterations[{k}]"), *v)?;
        }
        for (k, row) in s.phases.iter().enumerate() {
            for (j, v) in row.iter().enumerate() {
                time(|| format!("samples.phases[{k}][{j}]"), *v)?;
            }
        }
        for (k, row) in s.ops.iter().enumerate() {
            if row.len() != self.ops.len() {
                return Err(format!(
                    "samples.ops[{k}] has {} values for {} ops",
                    row.len(),
                    self.ops.len()
                ));
            }
            for (j, v) in row.iter().enumerate() {
                time(|| format!("samples.ops[{k}][{j}]"), *v)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::Profile;

    fn valid() -> Profile {
        let mut p = Profile {
            timed_iterations: 2,
            iteration_sec: 0.5,
            ..Default::default()
        };
        p.samples.iterations = vec![0.4, 0.6];
        p.samples.phases = vec![[0.1, 0.2, 0.1], [0.2, 0.3, 0.1]];
        p
    }

    #[test]
    fn bad_times_and_mismatched_samples_are_named() {
        assert_eq!(valid().validate(), Ok(()));
        type Break = Box<dyn Fn(&mut Profile)>;
        let cases: Vec<(Break, &str)> = vec![
            (
                Box::new(|p| p.iteration_sec = -0.5),
                "iteration_sec is -0.5",
            ),
            (
                Box::new(|p| p.samples.iterations[1] = f64::NAN),
                "samples.iterations[1] is NaN",
            ),
            (
                Box::new(|p| p.samples.iterations.pop().map(drop).unwrap()),
                "samples.iterations has 1 values for 2",
            ),
            (
                Box::new(|p| p.samples.phases[0][2] = -1.0),
                "samples.phases[0][2] is -1",
            ),
            (
                Box::new(|p| p.samples.phases.truncate(1)),
                "samples.phases has 1 rows",
            ),
            (
                Box::new(|p| p.samples.ops = vec![vec![0.1]]),
                "samples.ops[0] has 1 values for 0 ops",
            ),
            (
                Box::new(|p| p.samples.ops = vec![vec![]; 3]),
                "samples.ops has 3 rows",
            ),
        ];
        for (break_it, needle) in cases {
            let mut p = valid();
            break_it(&mut p);
            let e = p.validate().unwrap_err();
            assert!(e.contains(needle), "{e} lacks {needle}");
        }
    }
}
