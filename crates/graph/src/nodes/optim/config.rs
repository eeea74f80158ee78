//! The optimizer phase: [`GraphBuilder::optimize`] appends one fused update node per
//! parameter (SGD, Adam or AdamW, chosen per parameter group by [`OptimizerConfig`]) after
//! an optional global-norm gradient clipping node.

use std::sync::Arc;

use candle_core::DType;
use wick_ops::{AdamParams, OpError, SgdParams};

use super::accumulate::{AccumulateMicroBatch, UpdateCount};
use super::adam::AdamUpdate;
use super::clip::ClipGradNorm;
use super::sgd::SgdUpdate;
use crate::autodiff::{param_layer, Gradients};
use crate::builder::{GraphBuilder, NO_OUTPUTS};
use crate::error::{GraphError, Result};
use crate::ir::{Origin, Phase, ValueId, ValueKind};
pub use crate::param_selector::ParamSelector;

/// An optimizer and its settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Optimizer {
    /// `torch.optim.SGD`.
    Sgd(SgdParams),
    /// `torch.optim.Adam`, or `AdamW` when [`AdamParams::decoupled`].
    Adam(AdamParams),
}

impl Optimizer {
    /// The same optimizer without weight decay.
    pub fn without_weight_decay(self) -> Self {
        match self {
            Optimizer::Sgd(p) => Optimizer::Sgd(SgdParams {
                weight_decay: 0.0,
                ..p
            }),
            Optimizer::Adam(p) => Optimizer::Adam(AdamParams {
                weight_decay: 0.0,
                ..p
            }),
        }
    }

    /// The learning rate.
    pub fn lr(&self) -> f64 {
        match self {
            Optimizer::Sgd(p) => p.lr,
            Optimizer::Adam(p) => p.lr,
        }
    }

    fn validate(&self) -> std::result::Result<(), OpError> {
        match self {
            Optimizer::Sgd(p) => p.validate(),
            Optimizer::Adam(p) => p.validate(),
        }
    }
}

/// Parameters optimised with their own settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ParamGroup {
    /// Which parameters.
    pub select: ParamSelector,
    /// Their optimizer.
    pub optimizer: Optimizer,
}

/// The whole optimizer phase: a default optimizer, parameter groups (the first group that
/// selects a parameter wins), and optional gradient clipping.
#[derive(Debug, Clone, PartialEq)]
pub struct OptimizerConfig {
    /// The optimizer of every parameter no group selects.
    pub default: Optimizer,
    /// Groups with their own settings.
    pub groups: Vec<ParamGroup>,
    /// Clip the gradients to this global L2 norm first (`clip_grad_norm_`).
    pub clip_grad_norm: Option<f64>,
    /// Micro-batches per update (1: update every step); see
    /// [`accumulate`](OptimizerConfig::accumulate).
    pub accumulate: usize,
}

impl From<Optimizer> for OptimizerConfig {
    fn from(default: Optimizer) -> Self {
        OptimizerConfig {
            default,
            groups: Vec::new(),
            clip_grad_norm: None,
            accumulate: 1,
        }
    }
}

impl OptimizerConfig {
    /// Adds a group of `select`ed parameters without weight decay (biases and norm
    /// weights: [`ParamSelector::OneDimensional`]).
    pub fn no_weight_decay_on(mut self, select: ParamSelector) -> Self {
        let optimizer = self.default.without_weight_decay();
        self.groups.push(ParamGroup { select, optimizer });
        self
    }

    /// Clips the gradients to global norm `max_norm` before the updates.
    pub fn clip_grad_norm(mut self, max_norm: f64) -> Self {
        self.clip_grad_norm = Some(max_norm);
        self
    }

    /// Accumulates gradients over `k` steps (micro-batches) and updates on every `k`-th:
    /// each step adds its gradient divided by `k` to `<param>.grad_accum` (optimizer
    /// state, so a checkpoint taken mid-cycle resumes it exactly), and on the steps with
    /// `step % k == k - 1` clipping and the updates run on the accumulated gradients. The
    /// step counter input `step` decides; without batch norm, `k` micro-batches of a
    /// mean loss give the weights of one `k`-times batch to float rounding.
    pub fn accumulate(mut self, k: usize) -> Self {
        self.accumulate = k;
        self
    }

    /// The optimizer of parameter `name` of `shape`.
    pub fn for_param(&self, name: &str, shape: &[usize]) -> Optimizer {
        self.groups
            .iter()
            .find(|g| g.select.selects(name, shape))
            .map_or(self.default, |g| g.optimizer)
    }
}

impl GraphBuilder {
    /// Appends one fused SGD update per parameter that has a gradient, in parameter
    /// creation order: [`optimize`](GraphBuilder::optimize) with SGD for every parameter.
    /// With momentum, each parameter gets a state value `<name>.momentum_buffer`, empty
    /// until the first step.
    pub fn sgd(&mut self, grads: &Gradients, p: SgdParams) -> Result<()> {
        self.optimize(grads, &Optimizer::Sgd(p).into()).map(|_| ())
    }

    /// Appends the optimizer phase: gradient clipping if asked, then one fused update per
    /// parameter that has a gradient (a graph with several backward passes takes one
    /// optimize call per pass, over disjoint parameters), in parameter creation order, with its group's
    /// optimizer. Optimizer state gets PyTorch's names: `<param>.momentum_buffer` (SGD with
    /// momentum), `<param>.exp_avg` and `<param>.exp_avg_sq` (Adam), empty until the
    /// first step. Adam reads the graph input `step` (see
    /// [`step_counter`](GraphBuilder::step_counter)). Returns the clipped gradients' total
    /// norm when clipping.
    pub fn optimize(
        &mut self,
        grads: &Gradients,
        config: &OptimizerConfig,
    ) -> Result<Option<ValueId>> {
        match self.phase {
            Phase::Backward | Phase::Optimizer => {}
            Phase::Forward => {
                return Err(GraphError::Usage(
                    "the optimizer must follow backward: call backward(loss) first".into(),
                ))
            }
        }
        for o in std::iter::once(&config.default).chain(config.groups.iter().map(|g| &g.optimizer))
        {
            o.validate().map_err(self.build_err("optimize"))?;
        }
        if let Some((p, _)) = grads.iter().find(|(p, _)| self.optimized.contains(p)) {
            return Err(GraphError::Usage(format!(
                "the optimizer of `{}` was already added to this graph: each parameter takes one optimizer (parameter groups give different settings in one optimize call; several backward passes need disjoint parameters)",
                self.graph.values[p.0].name
            )));
        }
        self.optimized.extend(grads.iter().map(|(p, _)| p));
        self.phase = Phase::Optimizer;
        let mut pairs: Vec<(ValueId, ValueId)> = grads.iter().collect();
        if config.accumulate != 1 {
            self.record_accumulation(&mut pairs, config.accumulate)?;
        }
        let has_adam = std::iter::once(&config.default)
            .chain(config.groups.iter().map(|g| &g.optimizer))
            .any(|o| matches!(o, Optimizer::Adam(_)));
        self.record_unscale(&mut pairs, has_adam)?;
        let norm = match config.clip_grad_norm {
            Some(max_norm) => Some(self.record_clip(&mut pairs, max_norm)?),
            None => None,
        };
        for (param, grad) in pairs {
            let info = self.graph.values[param.0].clone();
            self.origin = Origin {
                layer: param_layer(&info.name),
                forward_op: None,
                parameter: Some(info.name.clone()),
            };
            match config.for_param(&info.name, &info.shape) {
                Optimizer::Sgd(p) => self.record_sgd(param, grad, p),
                Optimizer::Adam(p) => self.record_adam(param, grad, p)?,
            }
        }
        self.origin = Origin::default();
        Ok(norm)
    }

    /// Records each gradient's accumulation over `k` micro-batches and makes `pairs`
    /// read the accumulators.
    fn record_accumulation(&mut self, pairs: &mut [(ValueId, ValueId)], k: usize) -> Result<()> {
        if k == 0 || self.graph.accumulate.is_some_and(|other| other != k) {
            return Err(GraphError::Usage(format!(
                "accumulate: {k} micro-batches per update, but {}",
                match self.graph.accumulate {
                    Some(other) => format!("another optimizer of this graph accumulates over {other}: one count per graph"),
                    None => "it must be at least 1".to_string(),
                }
            )));
        }
        self.graph.accumulate = Some(k);
        let step = self.step_counter()?;
        for (param, grad) in pairs.iter_mut() {
            let info = self.graph.values[param.0].clone();
            self.origin = Origin {
                layer: param_layer(&info.name),
                forward_op: None,
                parameter: Some(info.name.clone()),
            };
            let acc = self.optimizer_state(*param, "grad_accum");
            let flops = 2 * info.shape.iter().product::<usize>() as u64;
            let op = Arc::new(AccumulateMicroBatch { k });
            self.push(op, vec![step, *grad, acc], NO_OUTPUTS, vec![acc], flops);
            *grad = acc;
        }
        self.origin = Origin::default();
        let new = vec![("update_count", vec![], DType::I64)];
        let count = self.push(Arc::new(UpdateCount { k }), vec![step], new, vec![], 0)[0];
        self.update_count = Some(count);
        Ok(())
    }

    /// The count of updates before this step as the step counter gives it: under
    /// accumulation over `k` micro-batches, the counter divided by `k`.
    pub(crate) fn update_step_counter(&mut self) -> Result<ValueId> {
        match self.update_count {
            Some(count) => Ok(count),
            None => self.step_counter(),
        }
    }

    fn optimizer_state(&mut self, param: ValueId, suffix: &str) -> ValueId {
        let info = self.graph.values[param.0].clone();
        self.value(
            format!("{}.{suffix}", info.name),
            info.shape,
            info.dtype,
            ValueKind::State,
        )
    }

    fn record_sgd(&mut self, param: ValueId, grad: ValueId, p: SgdParams) {
        let mut inputs = vec![param, grad];
        let mut updated = vec![param];
        if p.momentum != 0.0 {
            let buf = self.optimizer_state(param, "momentum_buffer");
            inputs.push(buf);
            updated.push(buf);
        }
        let flops = p.flops(self.shape(param).iter().product());
        self.push(
            Arc::new(SgdUpdate::new(p)),
            inputs,
            NO_OUTPUTS,
            updated,
            flops,
        );
    }

    fn record_adam(&mut self, param: ValueId, grad: ValueId, p: AdamParams) -> Result<()> {
        // Adam counts updates: under loss scaling, the updates taken (a skipped step does
        // not count); otherwise the step counter (divided by k under accumulation).
        let step = match self.graph.grad_scaler.and_then(|s| s.updates_before) {
            Some(updates) => updates,
            None => self.update_step_counter()?,
        };
        let m = self.optimizer_state(param, "exp_avg");
        let v = self.optimizer_state(param, "exp_avg_sq");
        let flops = p.flops(self.shape(param).iter().product());
        let inputs = vec![param, grad, step, m, v];
        self.push(
            Arc::new(AdamUpdate { params: p }),
            inputs,
            NO_OUTPUTS,
            vec![param, m, v],
            flops,
        );
        Ok(())
    }

    fn record_clip(&mut self, pairs: &mut [(ValueId, ValueId)], max_norm: f64) -> Result<ValueId> {
        if !(max_norm.is_finite() && max_norm > 0.0) {
            return Err(self.build_err("clip_grad_norm")(wick_ops::invalid!(
                "clip_grad_norm",
                "max_norm must be positive, got {max_norm}"
            )));
        }
        let inputs: Vec<ValueId> = pairs.iter().map(|(_, g)| *g).collect();
        let mut new: Vec<crate::ir::NewValue> = inputs
            .iter()
            .map(|g| ("grad.clipped", self.shape(*g).to_vec(), self.dtype_of(*g)))
            .collect();
        new.push(("grad_norm", vec![], self.dtype));
        let elements: usize = inputs
            .iter()
            .map(|g| self.shape(*g).iter().product::<usize>())
            .sum();
        let flops = wick_ops::shape::flop_count(3, &[elements]);
        let out = self.push(
            Arc::new(ClipGradNorm { max_norm }),
            inputs,
            new,
            vec![],
            flops,
        );
        for ((_, g), clipped) in pairs.iter_mut().zip(&out) {
            *g = *clipped;
        }
        let norm = *out.last().expect("the clip node has a norm output");
        self.output(norm);
        Ok(norm)
    }
}
