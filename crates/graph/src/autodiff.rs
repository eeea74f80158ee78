//! Reverse-mode autodiff over the recorded forward nodes.
//!
//! [`GraphBuilder::backward`] walks the forward nodes from last to first and asks each
//! node whose output has a gradient to record its backward nodes
//! ([`NodeOp::backward`], beside the op in its family's file under
//! `ops/`) for the inputs that need one. A value read by several ops (the residual `add`'s
//! input) collects one gradient per consumer; they are summed by `AccumulateGrad` nodes just before the value's own
//! backward runs.

use std::collections::HashMap;
use std::sync::Arc;

use wick_ops::{elementwise, Kernel, OpError};

use crate::builder::{GraphBuilder, Mode};
use crate::error::{GraphError, Result};
use crate::ir::{
    arg, binary, one, BackwardCtx, Inputs, KernelResult, NodeOp, Origin, Phase, ValueId, ValueKind,
};
use crate::param_selector::ParamSelector;

/// The layer of a parameter: its state-dict name without the last component
/// (`layer1.0.conv1.weight` → `layer1.0.conv1`).
pub(crate) fn param_layer(name: &str) -> Option<String> {
    name.rsplit_once('.').map(|(layer, _)| layer.to_string())
}

/// The sum of two gradients of one value. in: a, b; out: a + b.
#[derive(Debug, Clone, PartialEq)]
pub struct AccumulateGrad;

impl NodeOp for AccumulateGrad {
    fn kernel(&self) -> Kernel {
        Kernel::AccumulateGrad
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        binary(inputs, "accumulate_grad", elementwise::add)
    }
}

/// The gradient of the backward pass's root, 1. in: the root (for its shape and
/// device); out: ones like it.
#[derive(Debug, Clone, PartialEq)]
pub struct LossGradSeed;

impl NodeOp for LossGradSeed {
    fn kernel(&self) -> Kernel {
        Kernel::LossGradSeed
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let root = arg(inputs, 0, "backward")?;
        one(root
            .ones_like()
            .map_err(|e| OpError::candle("backward", e))?)
    }
}

/// The gradient value of each parameter, as recorded by [`GraphBuilder::backward`].
#[derive(Debug, Clone, Default)]
pub struct Gradients {
    map: HashMap<ValueId, ValueId>,
    order: Vec<ValueId>,
}

impl Gradients {
    /// The gradient of `param`, if it has one.
    pub fn get(&self, param: ValueId) -> Option<ValueId> {
        self.map.get(&param).copied()
    }

    /// (parameter, gradient) pairs in parameter creation order.
    pub fn iter(&self) -> impl Iterator<Item = (ValueId, ValueId)> + '_ {
        self.order.iter().map(|p| (*p, self.map[p]))
    }

    /// How many parameters have a gradient.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether no parameter has a gradient.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

impl GraphBuilder {
    /// Freezes the parameters `selector` selects (a fine-tuning's backbone): they get no
    /// gradient and no update, and [`backward`](GraphBuilder::backward) records no node
    /// whose result would only reach frozen parameters (a frozen backbone's backward is
    /// not run at all, only what the trainable layers need). Call it before `backward`;
    /// returns how many parameters it froze.
    ///
    /// # Examples
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode, ParamSelector};
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let x = b.input("x", &[4, 8], DType::F32)?;
    /// let w1 = b.param("backbone.weight", &[8, 8])?;
    /// let w2 = b.param("head.weight", &[2, 8])?;
    /// let h = b.linear(x, w1, None)?;
    /// let y = b.linear(h, w2, None)?;
    /// let loss = b.sum(y, &[], false)?;
    /// assert_eq!(b.freeze(&!ParamSelector::InLayer("head".into()))?, 1);
    /// let grads = b.backward(loss)?;
    /// assert!(grads.get(w1).is_none() && grads.get(w2).is_some());
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn freeze(&mut self, selector: &ParamSelector) -> Result<usize> {
        if self.phase != Phase::Forward {
            return Err(GraphError::Usage(
                "freeze: call it before backward (a backward pass is already recorded)".into(),
            ));
        }
        let mut frozen = 0;
        for (i, v) in self.graph.values.iter().enumerate() {
            if v.kind == ValueKind::Param
                && self.requires_grad[i]
                && selector.selects(&v.name, &v.shape)
            {
                self.requires_grad[i] = false;
                frozen += 1;
            }
        }
        self.propagate_requires_grad();
        Ok(frozen)
    }

    /// Appends the backward pass of the scalar `loss` (any 1-element output of a forward
    /// op: a loss, a sum or scaling of losses) and returns each parameter's gradient.
    pub fn backward(&mut self, loss: ValueId) -> Result<Gradients> {
        self.backward_of(loss, &ParamSelector::All)
    }

    /// Appends the backward pass of `loss` for the parameters `params` selects only
    /// (the others are treated as frozen for this pass: no node is recorded that would
    /// only reach them). A graph may hold several such passes over disjoint parameter
    /// sets, each followed by its own optimizer (a GAN's discriminator and generator in
    /// one step); record every backward pass before the first optimizer.
    pub fn backward_of(&mut self, loss: ValueId, params: &ParamSelector) -> Result<Gradients> {
        if self.mode != Mode::Train {
            return Err(GraphError::Usage(
                "backward needs a graph built in Mode::Train".into(),
            ));
        }
        if self.phase == Phase::Optimizer {
            return Err(GraphError::Usage(
                "backward after an optimizer: record every backward pass before the first optimize (or sgd) call".into(),
            ));
        }
        let all = self.requires_grad.clone();
        self.select_trainable(params);
        let grads = self.record_backward(loss);
        // Restore the graph's own flags (the pass's new values keep theirs: none needs one).
        self.requires_grad[..all.len()].copy_from_slice(&all);
        grads
    }

    /// Narrows which values need a gradient to those a parameter `params` selects flows
    /// into (frozen parameters and stopped values stay excluded).
    fn select_trainable(&mut self, params: &ParamSelector) {
        for (i, v) in self.graph.values.iter().enumerate() {
            if v.kind == ValueKind::Param && !params.selects(&v.name, &v.shape) {
                self.requires_grad[i] = false;
            }
        }
        self.propagate_requires_grad();
    }

    /// Recomputes, in node order, which intermediates need a gradient: those a node
    /// makes from an input that needs one, unless backward stops there.
    fn propagate_requires_grad(&mut self) {
        for node in &self.graph.nodes {
            if node.phase != Phase::Forward {
                continue;
            }
            let rg = node.inputs.iter().any(|v| self.requires_grad[v.0]);
            for o in &node.outputs {
                if self.graph.values[o.0].kind == ValueKind::Intermediate {
                    self.requires_grad[o.0] = rg && !self.stops_gradient[o.0];
                }
            }
        }
    }

    fn record_backward(&mut self, loss: ValueId) -> Result<Gradients> {
        let root = self.backward_root(loss)?;
        self.phase = Phase::Backward;
        let mut contributions: Vec<Vec<ValueId>> = vec![Vec::new(); self.graph.values.len()];
        let root_grad = self.root_gradient(root, loss);
        for op_id in (0..=root).rev() {
            let node = self.graph.nodes[op_id].clone();
            // Backward nodes (and the gradient sums just before them) belong to the
            // forward node they differentiate.
            self.origin = Origin {
                layer: node.origin.layer.clone(),
                forward_op: Some(op_id),
                parameter: None,
            };
            // One gradient per output (a split or a custom op may have several); a node
            // none of whose outputs has one is skipped.
            let grads: Vec<Option<ValueId>> = if op_id == root {
                std::iter::once(root_grad)
                    .chain(node.outputs[1..].iter().map(|_| None))
                    .collect()
            } else {
                let grads: Vec<_> = node
                    .outputs
                    .iter()
                    .map(|o| self.sum_grads(*o, &mut contributions))
                    .collect();
                if grads.iter().all(Option::is_none) {
                    continue;
                }
                grads
            };
            let op = node.op.clone();
            let mut ctx = BackwardCtx {
                recorder: self,
                inputs: node.inputs,
                outputs: node.outputs,
                op_id,
                grad_y: grads[0],
                grads,
                contributions: &mut contributions,
            };
            op.backward(&mut ctx)?;
        }
        let grads = self.parameter_gradients(&mut contributions);
        self.origin = Origin::default();
        Ok(grads)
    }

    /// The gradient of the backward pass's root `root` (the node whose output is `loss`):
    /// a `LossGradSeed` node's ones (the loss scale under a grad scaler), or `None` for
    /// cross-entropy, whose backward seeds itself with 1 (one node less on the ResNet
    /// path).
    fn root_gradient(&mut self, root: usize, loss: ValueId) -> Option<ValueId> {
        let scaled = self.graph.grad_scaler.is_some();
        if self.graph.nodes[root].op.kernel() == Kernel::SoftmaxCrossEntropyForward && !scaled {
            return None;
        }
        self.origin = Origin {
            layer: self.graph.nodes[root].origin.layer.clone(),
            forward_op: Some(root),
            parameter: None,
        };
        if scaled {
            return self.scaled_seed(loss);
        }
        let info = self.graph.values[loss.0].clone();
        Some(self.push_one(
            Arc::new(LossGradSeed),
            vec![loss],
            ("grad.loss", info.shape, info.dtype),
            0,
        ))
    }

    /// Each parameter's gradient: the sum of its contributions, recorded in its layer
    /// (a parameter read by several ops).
    fn parameter_gradients(&mut self, contributions: &mut [Vec<ValueId>]) -> Gradients {
        let mut grads = Gradients::default();
        let params: Vec<ValueId> = self.graph.values_of(ValueKind::Param).collect();
        for p in params {
            self.origin = Origin {
                layer: param_layer(&self.graph.values[p.0].name),
                forward_op: None,
                parameter: Some(self.graph.values[p.0].name.clone()),
            };
            if let Some(g) = self.sum_grads(p, contributions) {
                grads.map.insert(p, g);
                grads.order.push(p);
            }
        }
        grads
    }

    /// The forward node whose first output is `loss`, a scalar that a parameter's value
    /// flows into.
    fn backward_root(&self, loss: ValueId) -> Result<usize> {
        let info = self.graph.values.get(loss.0).ok_or_else(|| {
            GraphError::Usage(format!("backward: {loss:?} is not a value of this graph"))
        })?;
        let root = self
            .graph
            .nodes
            .iter()
            .position(|n| n.outputs.first() == Some(&loss))
            .ok_or_else(|| {
                GraphError::Usage(format!(
                    "backward: `{}` is not the output of a recorded op (an input or a parameter)",
                    info.name
                ))
            })?;
        if info.shape.iter().product::<usize>() != 1 {
            return Err(GraphError::Usage(format!(
                "backward: the loss `{}` (OP_ID{root}) must be a scalar, got shape {:?}",
                info.name, info.shape
            )));
        }
        if !self.requires_grad[loss.0] {
            return Err(GraphError::Usage(format!(
                "backward: no parameter flows into `{}` (OP_ID{root}), so nothing has a gradient",
                info.name
            )));
        }
        Ok(root)
    }

    /// The total gradient of `v`: its single contribution, or the sum of several through
    /// `AccumulateGrad` nodes.
    fn sum_grads(&mut self, v: ValueId, contribs: &mut [Vec<ValueId>]) -> Option<ValueId> {
        let parts = std::mem::take(contribs.get_mut(v.0)?);
        let mut iter = parts.into_iter();
        let mut total = iter.next()?;
        let info = self.graph.values[v.0].clone();
        let flops = wick_ops::elementwise::add_flops(&info.shape);
        for g in iter {
            // The gradients' own dtype: a low-precision value's gradients are f32.
            let dtype = self.graph.values[total.0].dtype;
            total = self.push_one(
                Arc::new(AccumulateGrad),
                vec![total, g],
                ("grad.sum", info.shape.clone(), dtype),
                flops,
            );
        }
        Some(total)
    }
}
