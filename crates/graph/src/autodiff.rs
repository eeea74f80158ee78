//! Reverse-mode autodiff over the recorded forward nodes, and the SGD optimizer pass.
//!
//! [`GraphBuilder::backward`] walks the forward nodes from last to first and appends, for
//! each node whose output has a gradient, the backward kernels of the inputs that need
//! one. A value read by several ops (the residual `add`'s input) collects one gradient per
//! consumer; they are summed by `AccumulateGrad` nodes just before the value's own
//! backward runs. [`GraphBuilder::sgd`] then appends one fused `SgdUpdate` per parameter.

use std::collections::HashMap;

use wick_ops::SgdParams;

use crate::builder::{GraphBuilder, Mode};
use crate::error::{GraphError, Result};
use crate::ir::{Op, Phase, ValueId, ValueKind};

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
    /// Appends the backward pass of the scalar `loss` (the output of
    /// [`cross_entropy`](GraphBuilder::cross_entropy)) and returns each parameter's gradient.
    pub fn backward(&mut self, loss: ValueId) -> Result<Gradients> {
        if self.mode != Mode::Train {
            return Err(GraphError::Usage(
                "backward needs a graph built in Mode::Train".into(),
            ));
        }
        if self.phase != Phase::Forward {
            return Err(GraphError::Usage(
                "backward was already added to this graph".into(),
            ));
        }
        let n_forward = self.graph.nodes.len();
        let root = self.graph.nodes[..n_forward]
            .iter()
            .position(|n| n.outputs.first() == Some(&loss) && n.op == Op::CrossEntropy)
            .ok_or_else(|| {
                GraphError::Usage("backward: the loss must be the output of cross_entropy".into())
            })?;
        self.phase = Phase::Backward;
        let mut contribs: Vec<Vec<ValueId>> = vec![Vec::new(); self.graph.values.len()];
        for op_id in (0..=root).rev() {
            let node = self.graph.nodes[op_id].clone();
            let y = node.outputs[0];
            let gy = if op_id == root {
                None
            } else {
                match self.sum_grads(y, &mut contribs) {
                    Some(g) => Some(g),
                    None => continue,
                }
            };
            let needs = |b: &Self, v: ValueId| b.requires_grad[v.0];
            let shape = |b: &Self, v: ValueId| b.graph.values[v.0].shape.clone();
            let dt = self.graph.values[y.0].dtype;
            let inp = &node.inputs;
            let give = |v: ValueId, g: ValueId, contribs: &mut Vec<Vec<ValueId>>| {
                if contribs.len() <= v.0 {
                    contribs.resize(v.0 + 1, Vec::new());
                }
                contribs[v.0].push(g);
            };
            let gy_or_err =
                || gy.ok_or_else(|| GraphError::Usage("internal: missing output gradient".into()));
            match &node.op {
                Op::CrossEntropy => {
                    let s = shape(self, inp[0]);
                    let flops = 3 * s.iter().product::<usize>() as u64;
                    let g = self.push(
                        Op::CrossEntropyBackward,
                        vec![inp[0], inp[1]],
                        vec![("grad.logits".into(), s, dt)],
                        vec![],
                        flops,
                    );
                    give(inp[0], g[0], &mut contribs);
                }
                Op::Conv2d { params, has_bias } => {
                    let gy = gy_or_err()?;
                    let (xs, ws) = (shape(self, inp[0]), shape(self, inp[1]));
                    let flops = params.flops(&xs, &ws);
                    if needs(self, inp[0]) {
                        let op = Op::ConvBackwardData {
                            params: *params,
                            input_shape: xs.clone(),
                        };
                        let g = self.push(
                            op,
                            vec![gy, inp[1]],
                            vec![("grad.conv.x".into(), xs.clone(), dt)],
                            vec![],
                            flops,
                        );
                        give(inp[0], g[0], &mut contribs);
                    }
                    if needs(self, inp[1]) {
                        let op = Op::ConvBackwardFilter {
                            params: *params,
                            weight_shape: ws.clone(),
                        };
                        let g = self.push(
                            op,
                            vec![gy, inp[0]],
                            vec![("grad.conv.w".into(), ws.clone(), dt)],
                            vec![],
                            flops,
                        );
                        give(inp[1], g[0], &mut contribs);
                    }
                    if *has_bias && needs(self, inp[2]) {
                        let ys = shape(self, y);
                        let flops = ys.iter().product::<usize>() as u64;
                        let g = self.push(
                            Op::ConvBackwardBias,
                            vec![gy],
                            vec![("grad.conv.b".into(), vec![ws[0]], dt)],
                            vec![],
                            flops,
                        );
                        give(inp[2], g[0], &mut contribs);
                    }
                }
                Op::BatchNormTrain { params } | Op::BatchNormEval { params } => {
                    let gy = gy_or_err()?;
                    let (xs, c) = (shape(self, inp[0]), shape(self, inp[1]));
                    let flops = params.flops(&xs);
                    let (op, ins) = if matches!(node.op, Op::BatchNormTrain { .. }) {
                        (
                            Op::BatchNormTrainBackward,
                            vec![gy, inp[0], inp[1], node.outputs[1], node.outputs[2]],
                        )
                    } else {
                        (
                            Op::BatchNormEvalBackward { params: *params },
                            vec![gy, inp[0], inp[1], inp[3], inp[4]],
                        )
                    };
                    let outs = vec![
                        ("grad.bn.x".into(), xs, dt),
                        ("grad.bn.weight".into(), c.clone(), dt),
                        ("grad.bn.bias".into(), c, dt),
                    ];
                    let g = self.push(op, ins, outs, vec![], flops);
                    for (i, v) in inp[..3].iter().enumerate() {
                        if needs(self, *v) {
                            give(*v, g[i], &mut contribs);
                        }
                    }
                }
                Op::Relu => {
                    let gy = gy_or_err()?;
                    let xs = shape(self, inp[0]);
                    let flops = xs.iter().product::<usize>() as u64;
                    let g = self.push(
                        Op::ReluBackward,
                        vec![gy, y],
                        vec![("grad.relu".into(), xs, dt)],
                        vec![],
                        flops,
                    );
                    give(inp[0], g[0], &mut contribs);
                }
                Op::Add => {
                    let gy = gy_or_err()?;
                    for v in [inp[0], inp[1]] {
                        if needs(self, v) {
                            give(v, gy, &mut contribs);
                        }
                    }
                }
                Op::MaxPool2d { params } => {
                    let gy = gy_or_err()?;
                    let xs = shape(self, inp[0]);
                    let flops = params.flops(&xs);
                    let op = Op::MaxPool2dBackward {
                        params: *params,
                        input_shape: xs.clone(),
                    };
                    let g = self.push(
                        op,
                        vec![gy, node.outputs[1]],
                        vec![("grad.maxpool".into(), xs, dt)],
                        vec![],
                        flops,
                    );
                    give(inp[0], g[0], &mut contribs);
                }
                Op::AvgPool2d { params } => {
                    let gy = gy_or_err()?;
                    let xs = shape(self, inp[0]);
                    let flops = params.flops(&xs);
                    let op = Op::AvgPool2dBackward {
                        params: *params,
                        input_shape: xs.clone(),
                    };
                    let g = self.push(
                        op,
                        vec![gy],
                        vec![("grad.avgpool".into(), xs, dt)],
                        vec![],
                        flops,
                    );
                    give(inp[0], g[0], &mut contribs);
                }
                Op::GlobalAvgPool => {
                    let gy = gy_or_err()?;
                    let xs = shape(self, inp[0]);
                    let flops = xs.iter().product::<usize>() as u64;
                    let op = Op::GlobalAvgPoolBackward {
                        input_shape: xs.clone(),
                    };
                    let g = self.push(
                        op,
                        vec![gy],
                        vec![("grad.gap".into(), xs, dt)],
                        vec![],
                        flops,
                    );
                    give(inp[0], g[0], &mut contribs);
                }
                Op::Reshape { .. } => {
                    let gy = gy_or_err()?;
                    let xs = shape(self, inp[0]);
                    let op = Op::Reshape { shape: xs.clone() };
                    let g = self.push(
                        op,
                        vec![gy],
                        vec![("grad.reshape".into(), xs, dt)],
                        vec![],
                        0,
                    );
                    give(inp[0], g[0], &mut contribs);
                }
                Op::Linear { has_bias } => {
                    let gy = gy_or_err()?;
                    let (xs, ws) = (shape(self, inp[0]), shape(self, inp[1]));
                    let flops = 2 * wick_ops::linear::linear_flops(&xs, &ws);
                    let mut outs = vec![
                        ("grad.linear.x".into(), xs, dt),
                        ("grad.linear.w".into(), ws.clone(), dt),
                    ];
                    if *has_bias {
                        outs.push(("grad.linear.b".into(), vec![ws[0]], dt));
                    }
                    let g = self.push(
                        Op::LinearBackward {
                            has_bias: *has_bias,
                        },
                        vec![gy, inp[0], inp[1]],
                        outs,
                        vec![],
                        flops,
                    );
                    for (i, v) in inp.iter().enumerate() {
                        if needs(self, *v) {
                            give(*v, g[i], &mut contribs);
                        }
                    }
                }
                other => {
                    return Err(GraphError::Usage(format!(
                        "backward: OP_ID{op_id} ({other:?}) is not a forward op"
                    )))
                }
            }
        }
        let mut grads = Gradients::default();
        let params: Vec<ValueId> = self.graph.values_of(ValueKind::Param).collect();
        for p in params {
            if let Some(g) = self.sum_grads(p, &mut contribs) {
                grads.map.insert(p, g);
                grads.order.push(p);
            }
        }
        Ok(grads)
    }

    /// The total gradient of `v`: its single contribution, or the sum of several through
    /// `AccumulateGrad` nodes.
    fn sum_grads(&mut self, v: ValueId, contribs: &mut [Vec<ValueId>]) -> Option<ValueId> {
        let parts = std::mem::take(contribs.get_mut(v.0)?);
        let mut iter = parts.into_iter();
        let mut total = iter.next()?;
        let info = self.graph.values[v.0].clone();
        let flops = info.shape.iter().product::<usize>() as u64;
        for g in iter {
            total = self.push(
                Op::AccumulateGrad,
                vec![total, g],
                vec![("grad.sum".into(), info.shape.clone(), info.dtype)],
                vec![],
                flops,
            )[0];
        }
        Some(total)
    }

    /// Appends one fused SGD update per parameter that has a gradient, in parameter
    /// creation order. With momentum, each parameter gets a state value
    /// `<name>.momentum_buffer`, empty until the first step.
    pub fn sgd(&mut self, grads: &Gradients, p: SgdParams) -> Result<()> {
        p.validate()
            .map_err(|source| GraphError::Build { op: "sgd", source })?;
        if self.phase != Phase::Backward {
            return Err(GraphError::Usage("sgd must follow backward".into()));
        }
        self.phase = Phase::Optimizer;
        for (param, grad) in grads.iter() {
            let info = self.graph.values[param.0].clone();
            let mut inputs = vec![param, grad];
            let mut updated = vec![param];
            if p.momentum != 0.0 {
                let buf = self.value(
                    format!("{}.momentum_buffer", info.name),
                    info.shape.clone(),
                    info.dtype,
                    ValueKind::State,
                );
                inputs.push(buf);
                updated.push(buf);
            }
            let flops = p.flops(info.shape.iter().product());
            self.push(Op::SgdUpdate { params: p }, inputs, vec![], updated, flops);
        }
        Ok(())
    }
}
