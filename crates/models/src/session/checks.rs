//! What a session checks beside running the graph: that a model fits this machine
//! before any data is made, and that the parameters stay finite after each step.

use wick_graph::builder::Mode;

use super::{forward_graph, Session};
use crate::error::Result;
use crate::image::ImageSize;
use crate::model::ModelConfig;

impl Session {
    /// Checks, before any data is made, that `config` at this batch and image size fits
    /// this machine's memory: its forward graph's peak (a lower bound of a training
    /// step's) against the memory available. Cheap: the graph is recorded, nothing is
    /// allocated.
    pub fn check_fits(
        config: impl Into<ModelConfig>,
        batch: usize,
        image_size: impl Into<ImageSize>,
    ) -> Result<()> {
        let (config, image_size) = (config.into(), image_size.into());
        let (mut b, _, logits) =
            forward_graph(&config, Mode::Eval, batch, image_size, Default::default())?;
        b.output(logits);
        crate::limits::check_allocation(
            &format!("{} for batches of {batch} at {image_size}", config.name()),
            b.finish().peak_bytes(),
        )
    }

    /// [`first_non_finite_parameter`](Session::first_non_finite_parameter) after a
    /// training step, without reading again what the update nodes checked: SGD's CPU
    /// update checks each parameter as it writes it, so only the others (running
    /// statistics, parameters a device or Adam updated) are scanned. When an update saw a
    /// non-finite value, everything is scanned, to name the first.
    pub(super) fn first_non_finite_after_update(&self) -> Result<Option<(String, usize, f64)>> {
        use wick_graph::nodes::optim::UpdateCheck;
        let checks = self.exec.graph().take_update_checks();
        if checks.iter().any(|(_, c)| *c == UpdateCheck::NonFinite) {
            return self.first_non_finite_parameter();
        }
        let checked: std::collections::HashSet<&str> = checks
            .iter()
            .filter(|(_, c)| *c == UpdateCheck::Finite)
            .map(|(name, _)| *name)
            .collect();
        self.first_non_finite_where(|name| !checked.contains(name))
    }

    /// The first parameter or statistic (in state-dict order) holding a NaN or an
    /// infinity: its name, the element and the value.
    pub fn first_non_finite_parameter(&self) -> Result<Option<(String, usize, f64)>> {
        self.first_non_finite_where(|_| true)
    }

    /// [`first_non_finite_parameter`](Session::first_non_finite_parameter) over the
    /// entries `wanted` accepts.
    fn first_non_finite_where(
        &self,
        wanted: impl Fn(&str) -> bool,
    ) -> Result<Option<(String, usize, f64)>> {
        let all = match self.state_names.get() {
            Some(names) => names,
            None => {
                let names = self.config.state_spec()?.into_iter().map(|s| s.name);
                self.state_names.get_or_init(|| names.collect())
            }
        };
        let mut names = Vec::new();
        let mut tensors = Vec::new();
        for name in all.iter().filter(|n| wanted(n)) {
            if let Some(t) = self.exec.get(name)? {
                names.push(name.clone());
                tensors.push(t);
            }
        }
        // One parallel pass over every tensor (see `first_non_finite_of`).
        let found = wick_ops::first_non_finite_of(&tensors)?;
        Ok(found.map(|(t, i, v)| (std::mem::take(&mut names[t]), i, v)))
    }
}
