//! Dynamic loss scaling, PyTorch's `torch.amp.GradScaler`, for float16 autocast: the
//! backward pass is seeded with the scale `S` instead of 1 (`scaler.scale(loss)
//! .backward()`), so small gradients survive float16's range; before the updates one
//! node divides every gradient by `S`, checks them for infinities and NaNs, and updates
//! `S` by PyTorch's rules (`unscale_` and `update`): on a non-finite gradient the step's
//! updates are skipped and `S` backs off; after `growth_interval` steps in a row without
//! one, `S` grows. The scale and the count of good steps are optimizer state
//! (`grad_scaler.scale`, `grad_scaler.growth_tracker`), so checkpoints resume them.

use std::sync::Arc;

use candle_core::{DType, Tensor};
use wick_ops::{Kernel, OpError};

use crate::builder::GraphBuilder;
use crate::error::{GraphError, Result};
use crate::ir::{arg, leading_args, one, Inputs, KernelResult, NodeOp, ValueId, ValueKind};
pub use crate::ir::{GradScaler, ScalerValues};
use crate::phase::Phase;

const OP: &str = "grad_scaler";

/// The 0-dim tensor's value, or `default` when it is unset.
fn scalar_or(t: Option<&Tensor>, default: f64) -> std::result::Result<f64, OpError> {
    match t {
        Some(t) => t
            .to_dtype(DType::F64)
            .and_then(|t| t.to_scalar::<f64>())
            .map_err(|e| OpError::candle(OP, e)),
        None => Ok(default),
    }
}

/// The backward pass's seed under loss scaling. in: the loss, the scale (unset before
/// the first step: `init_scale`); out: the scale, in the loss's shape and dtype.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaledLossSeed {
    /// The scale while none is stored.
    pub init_scale: f64,
}

impl NodeOp for ScaledLossSeed {
    fn kernel(&self) -> Kernel {
        Kernel::LossGradSeed
    }

    fn optional_input(&self, i: usize) -> bool {
        i == 1
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let loss = arg(inputs, 0, OP)?;
        let scale = scalar_or(inputs.get(1).copied().flatten(), self.init_scale)?;
        one(Tensor::full(scale, loss.dims(), loss.device())
            .and_then(|t| t.to_dtype(loss.dtype()))
            .map_err(|e| OpError::candle(OP, e))?)
    }
}

/// Unscales every gradient and updates the scale. in: every gradient, the scale, the
/// growth count (both unset before the first step), and when it counts updates, the
/// updates taken (unset before the first) and the step counter; out: every gradient
/// divided by the scale, whether any was non-finite (0-dim u8), [the updates taken before
/// this step,] then the new scale and growth count [and the updates taken after it].
#[derive(Debug, Clone, PartialEq)]
pub struct UnscaleGradients {
    /// The settings.
    pub scaler: GradScaler,
    /// How many gradients it reads (the inputs before the scale and the growth count).
    pub gradients: usize,
    /// Whether it counts the updates taken, for Adam's step count.
    pub counts_updates: bool,
}

impl UnscaleGradients {
    /// The updates taken before this step, and after it: the stored count (the step
    /// counter while none is stored), plus one unless the step is skipped.
    fn update_counts(
        &self,
        inputs: &Inputs<'_>,
        found: bool,
    ) -> std::result::Result<(i64, i64), OpError> {
        let n = self.gradients;
        let done = match inputs.get(n + 2).copied().flatten() {
            Some(t) => wick_ops::dropout::read_step(t),
            None => wick_ops::dropout::read_step(arg(inputs, n + 3, OP)?),
        }
        .map_err(|e| wick_ops::invalid!(OP, "the update count: {e}"))?;
        let done = done as i64;
        Ok((done, done + i64::from(!found)))
    }
}

impl NodeOp for UnscaleGradients {
    fn kernel(&self) -> Kernel {
        Kernel::UnscaleGradients
    }

    fn optional_input(&self, i: usize) -> bool {
        (self.gradients..self.gradients + 3).contains(&i)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let n = self.gradients;
        let grads = leading_args(inputs, n, OP)?;
        let stored = |i: usize| inputs.get(i).copied().flatten();
        let scale = scalar_or(stored(n), self.scaler.init_scale)?;
        let tracker = scalar_or(stored(n + 1), 0.0)? as u64;
        let found = wick_ops::first_non_finite_of(&grads)?.is_some();
        // PyTorch multiplies by the reciprocal, computed in double and rounded to float.
        let inverse = (1.0 / scale) as f32 as f64;
        let mut out = Vec::with_capacity(n + 3);
        for g in &grads {
            out.push(Some(wick_ops::broadcast::scale(g, inverse)?));
        }
        let (scale, tracker) = self.scaler.next(scale, tracker, found);
        let device = grads
            .first()
            .map_or(candle_core::Device::Cpu, |g| g.device().clone());
        let candle = |e| OpError::candle(OP, e);
        let counts = match self.counts_updates {
            true => Some(self.update_counts(inputs, found)?),
            false => None,
        };
        out.push(Some(Tensor::new(u8::from(found), &device).map_err(candle)?));
        if let Some((before, _)) = counts {
            out.push(Some(Tensor::new(before, &device).map_err(candle)?));
        }
        out.push(Some(Tensor::new(scale as f32, &device).map_err(candle)?));
        out.push(Some(Tensor::new(tracker as i64, &device).map_err(candle)?));
        if let Some((_, after)) = counts {
            out.push(Some(Tensor::new(after, &device).map_err(candle)?));
        }
        Ok(out)
    }
}

impl GraphBuilder {
    /// Turns on dynamic loss scaling for this training graph (PyTorch's
    /// `torch.amp.GradScaler`, for float16 autocast): [`backward`](GraphBuilder::backward)
    /// then seeds the gradients with the scale, and
    /// [`optimize`](GraphBuilder::optimize) unscales them first, skips the step's updates
    /// when one is non-finite, and updates the scale. Call it before `backward`.
    ///
    /// # Examples
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::nodes::optim::GradScaler;
    /// use wick_graph::{GraphBuilder, Mode, Precision};
    /// use wick_ops::SgdParams;
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// b.set_precision(Precision::F16Autocast);
    /// b.set_grad_scaler(GradScaler::default())?;
    /// let x = b.input("x", &[4, 8], DType::F32)?;
    /// let w = b.param("fc.weight", &[3, 8])?;
    /// let y = b.linear(x, w, None)?;
    /// let loss = b.sum(y, &[], false)?;
    /// let grads = b.backward(loss)?;
    /// b.sgd(&grads, SgdParams { lr: 0.1, ..Default::default() })?;
    /// let graph = b.finish();
    /// assert!(graph.grad_scaler().unwrap().found_non_finite.is_some());
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn set_grad_scaler(&mut self, scaler: GradScaler) -> Result<()> {
        scaler.validate().map_err(self.build_err(OP))?;
        if self.phase != Phase::Forward || self.graph.grad_scaler.is_some() {
            return Err(GraphError::Usage(
                "set_grad_scaler: call it once, before backward".into(),
            ));
        }
        let scale = self.value(
            "grad_scaler.scale".into(),
            vec![],
            DType::F32,
            ValueKind::State,
        );
        let growth_tracker = self.value(
            "grad_scaler.growth_tracker".into(),
            vec![],
            DType::I64,
            ValueKind::State,
        );
        self.graph.grad_scaler = Some(ScalerValues {
            settings: scaler,
            scale,
            growth_tracker,
            found_non_finite: None,
            updates_before: None,
        });
        Ok(())
    }

    /// The backward seed under loss scaling, when the graph has a scaler.
    pub(crate) fn scaled_seed(&mut self, loss: ValueId) -> Option<ValueId> {
        let s = self.graph.grad_scaler?;
        let info = self.graph.values[loss.0].clone();
        let op = Arc::new(ScaledLossSeed {
            init_scale: s.settings.init_scale,
        });
        let new = vec![("grad.loss.scaled", info.shape, info.dtype)];
        Some(self.push(op, vec![loss, s.scale], new, vec![], 0)[0])
    }

    /// Records the unscale before the updates and makes `pairs` read the unscaled
    /// gradients; nothing without a scaler. With `counts_updates` (an Adam update
    /// follows), it also counts the updates taken, in the state `grad_scaler.updates`.
    pub(crate) fn record_unscale(
        &mut self,
        pairs: &mut [(ValueId, ValueId)],
        counts_updates: bool,
    ) -> Result<()> {
        let Some(mut s) = self.graph.grad_scaler else {
            return Ok(());
        };
        if s.found_non_finite.is_some() {
            return Err(GraphError::Usage(
                "a graph with a grad scaler takes one optimize call (its scale is updated once per step)".into(),
            ));
        }
        let mut inputs: Vec<ValueId> = pairs.iter().map(|(_, g)| *g).collect();
        let mut new: Vec<crate::ir::NewValue> = inputs
            .iter()
            .map(|g| ("grad.unscaled", self.shape(*g).to_vec(), self.dtype_of(*g)))
            .collect();
        new.push(("grad_scaler.found_non_finite", vec![], DType::U8));
        let elements: usize = inputs
            .iter()
            .map(|g| self.shape(*g).iter().product::<usize>())
            .sum();
        inputs.extend([s.scale, s.growth_tracker]);
        let mut updated = vec![s.scale, s.growth_tracker];
        if counts_updates {
            let updates = self.value(
                "grad_scaler.updates".into(),
                vec![],
                DType::I64,
                ValueKind::State,
            );
            let step = self.update_step_counter()?;
            inputs.extend([updates, step]);
            new.push(("grad_scaler.updates_before", vec![], DType::I64));
            updated.push(updates);
        }
        let op = Arc::new(UnscaleGradients {
            scaler: s.settings,
            gradients: pairs.len(),
            counts_updates,
        });
        let flops = wick_ops::shape::flop_count(2, &[elements]);
        let out = self.push(op, inputs, new, updated, flops);
        for ((_, g), unscaled) in pairs.iter_mut().zip(&out) {
            *g = *unscaled;
        }
        let found = out[pairs.len()];
        self.output(found);
        s.found_non_finite = Some(found);
        s.updates_before = counts_updates.then(|| out[pairs.len() + 1]);
        self.graph.grad_scaler = Some(s);
        Ok(())
    }
}
