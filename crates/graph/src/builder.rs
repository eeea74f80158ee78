//! The builder: a model's forward pass is written once against it, with shape checks at
//! build time; [`GraphBuilder::backward`] and [`GraphBuilder::sgd`] then append the
//! backward and optimizer nodes.

use candle_core::DType;
use wick_ops::{linear, loss, BatchNorm2dParams, Conv2dParams, OpError, Pool2dParams, PoolKind};

use crate::error::{GraphError, Result};
use crate::ir::{Graph, Node, Op, Phase, ValueId, ValueInfo, ValueKind};

/// Whether a graph trains (batch statistics, backward and optimizer nodes) or only infers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Batch norm uses batch statistics and updates its running statistics.
    Train,
    /// Batch norm uses its running statistics; no backward pass may be added.
    Eval,
}

/// Records a graph. Forward ops check their shapes as they are recorded and return an
/// error naming the op and the shapes.
#[derive(Debug)]
pub struct GraphBuilder {
    pub(crate) graph: Graph,
    pub(crate) mode: Mode,
    pub(crate) dtype: DType,
    pub(crate) phase: Phase,
    /// Per value: whether a gradient flows to it (a parameter, or computed from one).
    pub(crate) requires_grad: Vec<bool>,
}

fn build_err(op: &'static str) -> impl FnOnce(OpError) -> GraphError {
    move |source| GraphError::Build { op, source }
}

impl GraphBuilder {
    /// A builder for a graph in `mode` whose parameters have dtype `dtype`.
    pub fn new(mode: Mode, dtype: DType) -> Self {
        GraphBuilder {
            graph: Graph::default(),
            mode,
            dtype,
            phase: Phase::Forward,
            requires_grad: Vec::new(),
        }
    }

    /// The builder's mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The shape of a recorded value.
    pub fn shape(&self, v: ValueId) -> &[usize] {
        &self.graph.values[v.0].shape
    }

    /// The graph recorded so far.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    pub(crate) fn value(
        &mut self,
        name: String,
        shape: Vec<usize>,
        dtype: DType,
        kind: ValueKind,
    ) -> ValueId {
        self.graph.values.push(ValueInfo {
            name,
            shape,
            dtype,
            kind,
        });
        self.requires_grad.push(kind == ValueKind::Param);
        ValueId(self.graph.values.len() - 1)
    }

    fn unique_name(&self, name: &str) -> Result<String> {
        if self.graph.find(name).is_some() {
            return Err(GraphError::Usage(format!(
                "a value named `{name}` already exists"
            )));
        }
        Ok(name.to_string())
    }

    /// A value fed by the caller every iteration (images, labels).
    pub fn input(&mut self, name: &str, shape: &[usize], dtype: DType) -> Result<ValueId> {
        let name = self.unique_name(name)?;
        Ok(self.value(name, shape.to_vec(), dtype, ValueKind::Input))
    }

    /// A trainable parameter, named as in the model's state dict.
    pub fn param(&mut self, name: &str, shape: &[usize]) -> Result<ValueId> {
        let name = self.unique_name(name)?;
        Ok(self.value(name, shape.to_vec(), self.dtype, ValueKind::Param))
    }

    /// Persistent non-trainable state (running statistics), named as in the state dict.
    pub fn state(&mut self, name: &str, shape: &[usize]) -> Result<ValueId> {
        let name = self.unique_name(name)?;
        Ok(self.value(name, shape.to_vec(), self.dtype, ValueKind::State))
    }

    /// Marks `v` as a graph output: kept after each iteration for the caller to read.
    pub fn output(&mut self, v: ValueId) {
        if !self.graph.outputs.contains(&v) {
            self.graph.outputs.push(v);
        }
    }

    /// Appends a node in the current phase and creates its new outputs.
    pub(crate) fn push(
        &mut self,
        op: Op,
        inputs: Vec<ValueId>,
        new_outputs: Vec<(String, Vec<usize>, DType)>,
        updated: Vec<ValueId>,
        flops: u64,
    ) -> Vec<ValueId> {
        let op_id = self.graph.nodes.len();
        let rg = inputs.iter().any(|v| self.requires_grad[v.0]);
        let mut outputs = Vec::with_capacity(new_outputs.len() + updated.len());
        for (name, shape, dtype) in new_outputs {
            let id = self.value(
                format!("{name}#{op_id}"),
                shape,
                dtype,
                ValueKind::Intermediate,
            );
            self.requires_grad[id.0] = rg && self.phase == Phase::Forward;
            outputs.push(id);
        }
        outputs.extend(updated);
        self.graph.nodes.push(Node {
            op,
            inputs,
            outputs: outputs.clone(),
            phase: self.phase,
            flops,
        });
        outputs
    }

    fn forward_only(&self, op: &'static str) -> Result<()> {
        if self.phase != Phase::Forward {
            return Err(GraphError::Usage(format!(
                "{op} recorded after the backward pass was added: record the whole forward pass first"
            )));
        }
        Ok(())
    }

    fn dtype_of(&self, v: ValueId) -> DType {
        self.graph.values[v.0].dtype
    }

    /// 2-D convolution of `x` `[N, C, H, W]` with `weight` `[O, C/groups, KH, KW]` and an optional bias `[O]`.
    pub fn conv2d(
        &mut self,
        x: ValueId,
        weight: ValueId,
        bias: Option<ValueId>,
        p: Conv2dParams,
    ) -> Result<ValueId> {
        self.forward_only("conv2d")?;
        let (xs, ws) = (self.shape(x).to_vec(), self.shape(weight).to_vec());
        let out = p.output_shape(&xs, &ws).map_err(build_err("conv2d"))?;
        if let Some(b) = bias {
            p.check_bias(&ws, self.shape(b))
                .map_err(build_err("conv2d"))?;
        }
        let mut inputs = vec![x, weight];
        inputs.extend(bias);
        let flops = p.flops(&xs, &ws);
        let dt = self.dtype_of(x);
        let op = Op::Conv2d {
            params: p,
            has_bias: bias.is_some(),
        };
        Ok(self.push(
            op,
            inputs,
            vec![("conv".into(), out.to_vec(), dt)],
            vec![],
            flops,
        )[0])
    }

    /// Batch norm of `x` with per-channel `weight`, `bias` and running statistics (state
    /// values). In [`Mode::Train`] it normalises with batch statistics and updates the
    /// running statistics; in [`Mode::Eval`] it uses them.
    pub fn batch_norm(
        &mut self,
        x: ValueId,
        weight: ValueId,
        bias: ValueId,
        running_mean: ValueId,
        running_var: ValueId,
        p: BatchNorm2dParams,
    ) -> Result<ValueId> {
        self.forward_only("batch_norm")?;
        let xs = self.shape(x).to_vec();
        let channel: Vec<(&str, &[usize])> = vec![
            ("weight", self.shape(weight)),
            ("bias", self.shape(bias)),
            ("running_mean", self.shape(running_mean)),
            ("running_var", self.shape(running_var)),
        ];
        p.output_shape(&xs, &channel)
            .map_err(build_err("batch_norm"))?;
        for (v, what) in [(running_mean, "running_mean"), (running_var, "running_var")] {
            if self.graph.values[v.0].kind != ValueKind::State {
                return Err(GraphError::Usage(format!(
                    "batch_norm: {what} `{}` must be a state value (GraphBuilder::state)",
                    self.graph.values[v.0].name
                )));
            }
        }
        let c = xs[1];
        let dt = self.dtype_of(x);
        let inputs = vec![x, weight, bias, running_mean, running_var];
        let flops = p.flops(&xs);
        let outputs = match self.mode {
            Mode::Train => self.push(
                Op::BatchNormTrain { params: p },
                inputs,
                vec![
                    ("bn".into(), xs, dt),
                    ("bn.mean".into(), vec![c], dt),
                    ("bn.inv_std".into(), vec![c], dt),
                ],
                vec![running_mean, running_var],
                flops,
            ),
            Mode::Eval => self.push(
                Op::BatchNormEval { params: p },
                inputs,
                vec![("bn".into(), xs, dt)],
                vec![],
                flops,
            ),
        };
        Ok(outputs[0])
    }

    /// ReLU.
    pub fn relu(&mut self, x: ValueId) -> Result<ValueId> {
        self.forward_only("relu")?;
        let xs = self.shape(x).to_vec();
        let flops = wick_ops::activation::relu_flops(&xs);
        let dt = self.dtype_of(x);
        Ok(self.push(
            Op::Relu,
            vec![x],
            vec![("relu".into(), xs, dt)],
            vec![],
            flops,
        )[0])
    }

    /// Element-wise `a + b` (same shapes; the residual connection).
    pub fn add(&mut self, a: ValueId, b: ValueId) -> Result<ValueId> {
        self.forward_only("add")?;
        let (sa, sb) = (self.shape(a).to_vec(), self.shape(b).to_vec());
        wick_ops::shape::same("add", "lhs", &sa, "rhs", &sb).map_err(build_err("add"))?;
        let flops = wick_ops::elementwise::add_flops(&sa);
        let dt = self.dtype_of(a);
        Ok(self.push(
            Op::Add,
            vec![a, b],
            vec![("add".into(), sa, dt)],
            vec![],
            flops,
        )[0])
    }

    fn pool(&mut self, x: ValueId, p: Pool2dParams) -> Result<ValueId> {
        let op_name = match p.kind {
            PoolKind::Max => "max_pool2d",
            PoolKind::Avg => "avg_pool2d",
        };
        self.forward_only(op_name)?;
        let xs = self.shape(x).to_vec();
        let out = p.output_shape(&xs).map_err(build_err(op_name))?.to_vec();
        let flops = p.flops(&xs);
        let dt = self.dtype_of(x);
        Ok(match p.kind {
            PoolKind::Max => self.push(
                Op::MaxPool2d { params: p },
                vec![x],
                vec![
                    ("maxpool".into(), out.clone(), dt),
                    ("maxpool.indices".into(), out, DType::U32),
                ],
                vec![],
                flops,
            )[0],
            PoolKind::Avg => self.push(
                Op::AvgPool2d { params: p },
                vec![x],
                vec![("avgpool".into(), out, dt)],
                vec![],
                flops,
            )[0],
        })
    }

    /// Max pooling with a square `kernel`, `stride` and `padding` (padding acts as -inf).
    pub fn max_pool2d(
        &mut self,
        x: ValueId,
        kernel: usize,
        stride: usize,
        padding: usize,
    ) -> Result<ValueId> {
        self.pool(x, Pool2dParams::new(PoolKind::Max, kernel, stride, padding))
    }

    /// Average pooling with a square `kernel`, `stride` and `padding` (padding counted).
    pub fn avg_pool2d(
        &mut self,
        x: ValueId,
        kernel: usize,
        stride: usize,
        padding: usize,
    ) -> Result<ValueId> {
        self.pool(x, Pool2dParams::new(PoolKind::Avg, kernel, stride, padding))
    }

    /// Global average pooling: [N, C, H, W] -> [N, C, 1, 1].
    pub fn global_avg_pool(&mut self, x: ValueId) -> Result<ValueId> {
        self.forward_only("global_avg_pool")?;
        let xs = self.shape(x).to_vec();
        let [n, c, _, _] = wick_ops::shape::nchw("global_avg_pool", "input", &xs)
            .map_err(build_err("global_avg_pool"))?;
        let flops = xs.iter().product::<usize>() as u64;
        let dt = self.dtype_of(x);
        Ok(self.push(
            Op::GlobalAvgPool,
            vec![x],
            vec![("gap".into(), vec![n, c, 1, 1], dt)],
            vec![],
            flops,
        )[0])
    }

    /// Flattens every dimension after the first: [N, ...] -> [N, prod(...)].
    pub fn flatten(&mut self, x: ValueId) -> Result<ValueId> {
        self.forward_only("flatten")?;
        let xs = self.shape(x).to_vec();
        let Some((&n, rest)) = xs.split_first() else {
            return Err(GraphError::Build {
                op: "flatten",
                source: OpError::invalid("flatten", "cannot flatten a 0-dim value"),
            });
        };
        let shape = vec![n, rest.iter().product()];
        let dt = self.dtype_of(x);
        Ok(self.push(
            Op::Reshape {
                shape: shape.clone(),
            },
            vec![x],
            vec![("flatten".into(), shape, dt)],
            vec![],
            0,
        )[0])
    }

    /// Fully connected layer `x·Wᵀ + b` with `weight` `[out, in]` and an optional bias `[out]`.
    pub fn linear(
        &mut self,
        x: ValueId,
        weight: ValueId,
        bias: Option<ValueId>,
    ) -> Result<ValueId> {
        self.forward_only("linear")?;
        let (xs, ws) = (self.shape(x).to_vec(), self.shape(weight).to_vec());
        let out = linear::linear_output_shape(&xs, &ws, bias.map(|b| self.shape(b)))
            .map_err(build_err("linear"))?;
        let mut inputs = vec![x, weight];
        inputs.extend(bias);
        let flops = linear::linear_flops(&xs, &ws);
        let dt = self.dtype_of(x);
        let op = Op::Linear {
            has_bias: bias.is_some(),
        };
        Ok(self.push(
            op,
            inputs,
            vec![("linear".into(), out.to_vec(), dt)],
            vec![],
            flops,
        )[0])
    }

    /// Mean softmax cross-entropy of `logits` `[N, C]` against integer `labels` `[N]`: a 0-dim loss.
    pub fn cross_entropy(&mut self, logits: ValueId, labels: ValueId) -> Result<ValueId> {
        self.forward_only("cross_entropy")?;
        let (ls, ys) = (self.shape(logits).to_vec(), self.shape(labels).to_vec());
        match (ls.as_slice(), ys.as_slice()) {
            (&[n, _], &[m]) if n == m => {}
            _ => {
                return Err(GraphError::Build {
                    op: "cross_entropy",
                    source: OpError::invalid(
                        "cross_entropy",
                        format!("logits must be [N, classes] and labels [N], got logits {ls:?} and labels {ys:?}"),
                    ),
                })
            }
        }
        let flops = loss::cross_entropy_flops(&ls);
        let dt = self.dtype_of(logits);
        Ok(self.push(
            Op::CrossEntropy,
            vec![logits, labels],
            vec![("loss".into(), vec![], dt)],
            vec![],
            flops,
        )[0])
    }

    /// Finishes recording.
    pub fn finish(self) -> Graph {
        self.graph
    }
}
