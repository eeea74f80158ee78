//! State by name: loading a state dict into an executor, PyTorch's `load_state_dict`
//! (strict, or reporting what it skipped, so that a training graph and an eval graph of
//! one model share their weights in one call), and the model's state apart from the
//! optimizer's (`model_state_dict`, `optimizer_state_dict`).

use candle_core::Tensor;

use crate::error::{GraphError, Result};
use crate::executor::Executor;
use crate::ir::{ValueInfo, ValueKind};
use crate::nodes::dropout::STEP_INPUT as STEP;

/// Whether [`Executor::load_state_dict`] insists on an exact match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadMode {
    /// Every parameter and state value of the graph given, and nothing else: otherwise an
    /// error naming the missing and unexpected entries, and nothing is loaded.
    Strict,
    /// Load what matches; report the rest.
    NonStrict,
}

/// What [`Executor::load_state_dict`] did, by name (PyTorch's `missing_keys` and
/// `unexpected_keys`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Entries loaded.
    pub loaded: Vec<String>,
    /// Parameters and state values of the graph that the state dict lacks.
    pub missing: Vec<String>,
    /// Entries of the state dict that are not parameters or state values of the graph
    /// (an optimizer's state loaded into an eval graph, say).
    pub unexpected: Vec<String>,
}

impl Executor {
    /// Sets every parameter and state value named in `state`. A shape or dtype mismatch is
    /// an error naming the value (nothing is loaded then); names the graph lacks, and
    /// values it has that `state` lacks, are an error under [`LoadMode::Strict`] and
    /// reported otherwise.
    pub fn load_state_dict<'a>(
        &mut self,
        state: impl IntoIterator<Item = (&'a String, &'a Tensor)>,
        mode: LoadMode,
    ) -> Result<LoadReport> {
        let mut report = LoadReport::default();
        let mut to_load = Vec::new();
        for (name, t) in state {
            match self.graph().find(name) {
                Some(id)
                    if matches!(
                        self.graph().value(id).kind,
                        ValueKind::Param | ValueKind::State
                    ) =>
                {
                    check_matches(self.graph().value(id), name, t)?;
                    to_load.push((id, name.clone(), t));
                }
                _ => report.unexpected.push(name.clone()),
            }
        }
        for kind in [ValueKind::Param, ValueKind::State] {
            for v in self.graph().values_of(kind) {
                let name = &self.graph().value(v).name;
                if !to_load.iter().any(|(id, _, _)| *id == v)
                    && !self.graph().optimizer_state().contains(&v)
                {
                    report.missing.push(name.clone());
                }
            }
        }
        report.unexpected.sort();
        if mode == LoadMode::Strict && !(report.missing.is_empty() && report.unexpected.is_empty())
        {
            return Err(GraphError::Usage(format!(
                "load_state_dict (strict): missing {:?}, unexpected {:?}",
                report.missing, report.unexpected
            )));
        }
        for (id, name, t) in to_load {
            self.set_id(id, t)?;
            report.loaded.push(name);
        }
        Ok(report)
    }

    /// The model's state, PyTorch's `model.state_dict()`: every parameter and every state
    /// value that is not the optimizer's (batch norm's running statistics), by name, as
    /// copies. It loads strictly into an eval graph of the same model.
    pub fn model_state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        let optimizer = self.graph().optimizer_state();
        let mut out = self.state_dict()?;
        out.retain(|(name, _)| {
            self.graph()
                .find(name)
                .is_some_and(|v| !optimizer.contains(&v))
        });
        Ok(out)
    }

    /// The optimizer's state, PyTorch's `optimizer.state_dict()`: the momentum buffers and
    /// Adam's moments that are set (`<param>.momentum_buffer`, `<param>.exp_avg`,
    /// `<param>.exp_avg_sq`), and the step counter `step` as the last run read it, as
    /// copies. [`load_optimizer_state_dict`](Executor::load_optimizer_state_dict) restores
    /// it.
    pub fn optimizer_state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        let mut out = Vec::new();
        for v in self.graph().optimizer_state() {
            if let Some(t) = self.get_id(v)? {
                out.push((self.graph().value(v).name.clone(), t.copy()?));
            }
        }
        if let Some(step) = self.graph().find(STEP) {
            if let Some(t) = self.get_id(step)? {
                out.push((STEP.to_string(), t.copy()?));
            }
        }
        Ok(out)
    }

    /// Restores an [`optimizer_state_dict`](Executor::optimizer_state_dict): every entry
    /// must be this graph's optimizer state or its step counter, of the same shape and
    /// dtype (an error naming the entry otherwise, and nothing is set).
    pub fn load_optimizer_state_dict<'a>(
        &mut self,
        state: impl IntoIterator<Item = (&'a String, &'a Tensor)>,
    ) -> Result<usize> {
        let optimizer = self.graph().optimizer_state();
        let mut to_load = Vec::new();
        for (name, t) in state {
            let id = self
                .graph()
                .find(name)
                .filter(|v| optimizer.contains(v) || name == STEP);
            let Some(id) = id else {
                return Err(GraphError::Usage(format!(
                    "load_optimizer_state_dict: `{name}` is not this graph's optimizer state"
                )));
            };
            check_matches(self.graph().value(id), name, t)?;
            to_load.push((id, t));
        }
        let n = to_load.len();
        for (id, t) in to_load {
            self.set_id(id, t)?;
        }
        Ok(n)
    }
}

/// An error naming `name` unless `t` has the value's shape and dtype.
fn check_matches(info: &ValueInfo, name: &str, t: &Tensor) -> Result<()> {
    if info.shape != t.dims() || info.dtype != t.dtype() {
        return Err(GraphError::ValueMismatch {
            name: name.to_string(),
            expected: format!("{:?} {:?}", info.shape, info.dtype),
            found: format!("{:?} {:?}", t.dims(), t.dtype()),
        });
    }
    Ok(())
}
