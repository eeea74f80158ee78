//! train_gpt's training checkpoints: the GPT-2's weights (Hugging Face's names) and its
//! optimizer's state, every --checkpoint-every steps and at the best held-out loss, and a
//! --resume that continues the same run exactly (the batches and dropout masks are
//! functions of the seed and the step) after checking that its settings are the run's.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::Result;
use candle_core::{DType, Tensor};
use wick::graph::Executor;
use wick::models::checkpoint::{read_safetensors, write_safetensors};
use wick::models::nn::TensorSpec;
use wick::models::resume::{self, Checkpointable, TrainingState};

/// The training executor with its model's parameter specs: what a checkpoint saves.
pub(crate) struct GptTraining<'a> {
    pub exec: &'a mut Executor,
    pub specs: &'a [TensorSpec],
}

/// Sets `weights` (every parameter by name, shapes checked) into `exec`.
pub(crate) fn set_weights(
    exec: &mut Executor,
    specs: &[TensorSpec],
    mut weights: HashMap<String, Tensor>,
    from: &str,
) -> Result<()> {
    for s in specs {
        let w = weights
            .remove(&s.name)
            .ok_or_else(|| anyhow::anyhow!("{from}: the weights have no `{}`", s.name))?;
        anyhow::ensure!(
            w.dims() == s.shape.as_slice(),
            "{from}: `{}` has shape {:?}, the model's is {:?}",
            s.name,
            w.dims(),
            s.shape
        );
        exec.set(&s.name, &w.to_dtype(DType::F32)?)?;
    }
    Ok(())
}

/// The trained weights by name.
pub(crate) fn weights_of(exec: &Executor, specs: &[TensorSpec]) -> Result<HashMap<String, Tensor>> {
    specs
        .iter()
        .map(|s| {
            let w = exec
                .get(&s.name)?
                .ok_or_else(|| anyhow::anyhow!("`{}` was not kept", s.name))?;
            Ok((s.name.clone(), w.clone()))
        })
        .collect()
}

fn model_error(path: &Path, e: anyhow::Error) -> wick::models::ModelError {
    wick::models::ModelError::Checkpoint {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

impl Checkpointable for GptTraining<'_> {
    fn save_weights(&self, path: &Path) -> wick::models::Result<()> {
        let weights = weights_of(self.exec, self.specs).map_err(|e| model_error(path, e))?;
        write_safetensors(&weights, path)
    }
    fn load_weights(&mut self, path: &Path) -> wick::models::Result<()> {
        let weights = read_safetensors(path)?;
        let from = path.display().to_string();
        set_weights(self.exec, self.specs, weights, &from).map_err(|e| model_error(path, e))
    }
    fn optimizer_state(&self) -> wick::models::Result<Vec<(String, Tensor)>> {
        resume::optimizer_state_of(self.exec)
    }
    fn set_optimizer_state(
        &mut self,
        state: &HashMap<String, Tensor>,
        _steps: u64,
    ) -> wick::models::Result<()> {
        // The step itself is the graph's `step` input, fed before every step.
        resume::set_optimizer_state_of(self.exec, state)
    }
}

/// Where checkpoints go and how a run resumes.
pub(crate) struct Checkpoints {
    /// The folder, from --checkpoint-dir or the run --resume continues.
    pub dir: Option<PathBuf>,
    pub every: usize,
    pub keep: usize,
    /// The run's last step (--steps), always checkpointed.
    pub last: usize,
    /// The settings that define the run's trajectory, recorded as `run.<name>`.
    pub trajectory: Vec<(&'static str, String)>,
    /// The lowest held-out loss so far (the `best` checkpoint's).
    pub best: f64,
}

impl Checkpoints {
    /// What a checkpoint after `step` steps and `epoch` epochs records.
    pub fn state(&self, step: usize, epoch: usize) -> TrainingState {
        let mut fields: BTreeMap<String, String> = self
            .trajectory
            .iter()
            .map(|(k, v)| (format!("run.{k}"), v.clone()))
            .collect();
        if self.best.is_finite() {
            fields.insert("best_test_loss".into(), self.best.to_string());
        }
        TrainingState {
            step: step as u64,
            epoch: epoch as u64,
            fields,
        }
    }

    /// Writes `step-<step>` when one is due (and at the run's last step), keeping the
    /// --keep newest.
    pub fn after_step(&self, run: &GptTraining, step: usize, epoch: usize) -> Result<()> {
        let due = step.is_multiple_of(self.every) || step == self.last;
        if let Some(dir) = self.dir.as_ref().filter(|_| due) {
            resume::save(run, &self.state(step, epoch), dir, &format!("step-{step}"))?;
            resume::prune(dir, self.keep)?;
        }
        Ok(())
    }

    /// Keeps `best` when `test_loss` is the lowest so far; says whether it was.
    pub fn after_epoch(
        &mut self,
        run: &GptTraining,
        test_loss: f64,
        step: usize,
        epoch: usize,
    ) -> Result<bool> {
        // A NaN loss is never the best.
        if test_loss.is_nan() || test_loss >= self.best {
            return Ok(false);
        }
        self.best = test_loss;
        if let Some(dir) = &self.dir {
            resume::save(run, &self.state(step, epoch), dir, "best")?;
        }
        Ok(true)
    }

    /// With --resume: loads the newest checkpoint (or the one given) into `run` after
    /// checking that it comes from this run's settings; returns its step and epoch.
    pub fn resume(
        &mut self,
        from: &Path,
        run: &mut GptTraining,
        override_settings: bool,
    ) -> Result<(usize, usize)> {
        let ckpt = if resume::is_checkpoint(from) {
            from.to_path_buf()
        } else {
            resume::periodic(from)?.pop().map(|(_, p)| p).ok_or_else(|| {
                anyhow::anyhow!(
                    "--resume {}: no complete checkpoint there: neither a checkpoint folder nor a folder of step-<N> checkpoints",
                    from.display()
                )
            })?
        };
        // Checked before anything is loaded.
        let state = resume::read_state(&ckpt)?;
        for (name, now) in &self.trajectory {
            let then = state.fields.get(&format!("run.{name}"));
            if then.is_some_and(|then| then != now) && !override_settings {
                anyhow::bail!(
                    "--resume {}: the checkpoint's run has {name} {}, this one {now}: resuming would not continue that run (pass --resume-override to resume anyway)",
                    ckpt.display(),
                    then.map_or("?", |s| s.as_str())
                );
            }
        }
        let state = resume::load(run, &ckpt)?;
        if let Some(best) = state
            .fields
            .get("best_test_loss")
            .and_then(|b| b.parse().ok())
        {
            self.best = best;
        }
        println!("resumed from {} at step {}", ckpt.display(), state.step);
        Ok((state.step as usize, state.epoch as usize))
    }
}
