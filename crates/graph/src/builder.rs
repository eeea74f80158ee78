//! The builder: a model's forward pass is written once against it, with shape checks at
//! build time; [`GraphBuilder::backward`] and [`GraphBuilder::sgd`] then append the
//! backward and optimizer nodes.

use candle_core::DType;
use wick_ops::OpError;

use crate::error::{GraphError, Result};
use crate::ir::{
    Graph, NewValue, NewValues, Node, NodeRecorder, Op, Origin, Phase, ValueId, ValueInfo,
    ValueKind,
};

/// No new outputs, for a node that only updates state in place (`push`'s argument).
pub(crate) const NO_OUTPUTS: Vec<NewValue> = Vec::new();

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
///
/// # Examples
///
/// A linear regression's whole training step: forward, loss, backward, optimizer.
///
/// ```
/// use candle_core::DType;
/// use wick_graph::{GraphBuilder, Mode, Phase};
///
/// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
/// let x = b.input("x", &[4, 3], DType::F32)?;
/// let target = b.input("target", &[4, 2], DType::F32)?;
/// let w = b.param("fc.weight", &[2, 3])?;
/// let y = b.in_layer("fc", |b| b.linear(x, w, None))?;
/// let loss = b.mse_loss(y, target)?;
/// let grads = b.backward(loss)?;
/// b.sgd(&grads, wick_ops::SgdParams { lr: 0.1, ..Default::default() })?;
/// let graph = b.finish();
/// assert_eq!(graph.nodes().last().unwrap().phase, Phase::Optimizer);
/// // A shape error names the op, the layer and the shapes:
/// let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
/// let a = b.input("a", &[2, 3], DType::F32)?;
/// let c = b.input("c", &[3, 2], DType::F32)?;
/// let err = b.in_layer("head", |b| b.add(a, c)).unwrap_err().to_string();
/// assert!(err.contains("add") && err.contains("head") && err.contains("[3, 2]"));
/// # Ok::<(), wick_graph::GraphError>(())
/// ```
#[derive(Debug)]
pub struct GraphBuilder {
    pub(crate) graph: Graph,
    pub(crate) mode: Mode,
    pub(crate) dtype: DType,
    pub(crate) phase: Phase,
    /// Per value: whether a gradient flows to it (a parameter, or computed from one).
    pub(crate) requires_grad: Vec<bool>,
    /// Per value: whether backward stops there whatever its inputs (a mask, indices, a
    /// detached value).
    pub(crate) stops_gradient: Vec<bool>,
    /// Inside [`in_eval_mode`](GraphBuilder::in_eval_mode): batch norm uses its running
    /// statistics and dropout is off, in a training graph.
    pub(crate) eval_modules: bool,
    /// The parameters that have an optimizer update.
    pub(crate) optimized: std::collections::HashSet<ValueId>,
    /// Under gradient accumulation: the optimizer's update count (Adam's step).
    pub(crate) update_count: Option<ValueId>,
    /// The origin the next recorded nodes get (see [`Origin`]).
    pub(crate) origin: Origin,
    /// What dropout nodes derive their seeds from.
    pub(crate) seed: u64,
    /// The precision policy and the casts it has recorded.
    pub(crate) autocast: crate::ir::Autocast,
}

impl GraphBuilder {
    /// A builder for a graph in `mode` whose parameters have dtype `dtype`: `F32`, or `F64`
    /// (16-bit compute is [`set_precision`](Self::set_precision)'s).
    pub fn new(mode: Mode, dtype: DType) -> Self {
        GraphBuilder {
            graph: Graph::default(),
            mode,
            dtype,
            phase: Phase::Forward,
            requires_grad: Vec::new(),
            stops_gradient: Vec::new(),
            eval_modules: false,
            optimized: Default::default(),
            update_count: None,
            origin: Origin::default(),
            seed: 0,
            autocast: Default::default(),
        }
    }

    /// Records what `f` records as layer `path` (a module path such as `layer1.0.conv2`:
    /// the torchvision state-dict prefix of its parameters). Layers nest: inside
    /// `in_layer("layer1.0", ...)`, `in_layer("conv1", ...)` is `layer1.0.conv1`. Profiles
    /// report time per layer, block and stage from these paths.
    pub fn in_layer<T>(&mut self, path: &str, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let outer = self.enter_layer(path);
        let result = f(self);
        self.leave_layer(outer);
        result
    }

    /// Enters layer `path` below the current one (what [`in_layer`](GraphBuilder::in_layer)
    /// does around its closure) and returns the layer to restore with
    /// [`leave_layer`](GraphBuilder::leave_layer): for module layers that keep their own
    /// state beside the builder.
    pub fn enter_layer(&mut self, path: &str) -> Option<String> {
        let outer = self.origin.layer.clone();
        self.origin.layer = Some(match &outer {
            Some(o) => format!("{o}.{path}"),
            None => path.to_string(),
        });
        outer
    }

    /// Restores the layer [`enter_layer`](GraphBuilder::enter_layer) returned.
    pub fn leave_layer(&mut self, outer: Option<String>) {
        self.origin.layer = outer;
    }

    /// The current layer's full path (`features.3.block.1`), if any.
    pub fn layer_path(&self) -> Option<&str> {
        self.origin.layer.as_deref()
    }

    /// The builder's mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Records what `f` records in eval mode inside a training graph, as PyTorch's
    /// `module.eval()` on part of a model: batch norm normalises with its running
    /// statistics (and leaves them unchanged), dropout is off. Gradients still flow
    /// through (to earlier layers, and to the batch norm's weight and bias unless they
    /// are frozen). A frozen, eval-mode backbone is a fine-tuning's usual setting.
    pub fn in_eval_mode<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let outer = self.enter_eval_mode();
        let result = f(self);
        self.leave_eval_mode(outer);
        result
    }

    /// Enters eval mode (what [`in_eval_mode`](GraphBuilder::in_eval_mode) does around its
    /// closure) and returns the setting to restore with
    /// [`leave_eval_mode`](GraphBuilder::leave_eval_mode), for module layers.
    pub fn enter_eval_mode(&mut self) -> bool {
        std::mem::replace(&mut self.eval_modules, true)
    }

    /// Restores what [`enter_eval_mode`](GraphBuilder::enter_eval_mode) returned.
    pub fn leave_eval_mode(&mut self, outer: bool) {
        self.eval_modules = outer;
    }

    /// The mode batch norm and dropout record in: the graph's, or eval inside
    /// [`in_eval_mode`](GraphBuilder::in_eval_mode).
    pub(crate) fn module_mode(&self) -> Mode {
        if self.eval_modules {
            Mode::Eval
        } else {
            self.mode
        }
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
        self.stops_gradient.push(false);
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
        self.check_parameter_dtype("param", &name)?;
        Ok(self.value(name, shape.to_vec(), self.dtype, ValueKind::Param))
    }

    /// Persistent non-trainable state (running statistics), named as in the state dict.
    pub fn state(&mut self, name: &str, shape: &[usize]) -> Result<ValueId> {
        let name = self.unique_name(name)?;
        self.check_parameter_dtype("state", &name)?;
        Ok(self.value(name, shape.to_vec(), self.dtype, ValueKind::State))
    }

    /// A tensor fixed when the graph is recorded (PyTorch's non-persistent buffer, such
    /// as a rotary embedding's cos and sin tables): the executor places it on its device
    /// before the first run. It is never fed, never updated and not in the state dict; no
    /// gradient flows into it. Its shape and dtype are `tensor`'s.
    ///
    /// # Examples
    ///
    /// ```
    /// use candle_core::{DType, Device, Tensor};
    /// use wick_graph::{Executor, GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    /// let x = b.input("x", &[2, 3], DType::F32)?;
    /// let offsets = Tensor::new(&[[1f32, 2., 3.]], &Device::Cpu)?;
    /// let c = b.constant("offsets", &offsets)?;
    /// let y = b.broadcast_add(x, c)?;
    /// b.output(y);
    /// let mut exec = Executor::new(b.finish(), &Device::Cpu);
    /// exec.set("x", &Tensor::zeros((2, 3), DType::F32, &Device::Cpu)?)?;
    /// exec.run()?;
    /// assert_eq!(exec.value(y)?.to_vec2::<f32>()?, [[1., 2., 3.], [1., 2., 3.]]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn constant(&mut self, name: &str, tensor: &candle_core::Tensor) -> Result<ValueId> {
        let name = self.unique_name(name)?;
        let host = tensor.to_device(&candle_core::Device::Cpu)?;
        let id = self.value(
            name,
            tensor.dims().to_vec(),
            tensor.dtype(),
            ValueKind::Constant,
        );
        self.graph.constants.push((id, host));
        Ok(id)
    }

    /// Parameters and state are float32 or float64. A 16-bit graph (PyTorch's
    /// `model.to(torch.bfloat16)`) is refused: its products would sum into float32
    /// activations beside 16-bit parameters, a mix nobody asked for. 16-bit compute with
    /// float32 master weights is the precision policy's job ([`Precision`]).
    ///
    /// [`Precision`]: crate::Precision
    fn check_parameter_dtype(&self, op: &'static str, name: &str) -> Result<()> {
        let why = match self.dtype {
            DType::F32 | DType::F64 => return Ok(()),
            DType::BF16 | DType::F16 => format!(
                "`{name}` would be {:?}: wick keeps parameters and state in float32 (master weights); for {:?} products build the graph in F32 and call set_precision(Precision::{}) (PyTorch's autocast)",
                self.dtype,
                self.dtype,
                if self.dtype == DType::BF16 { "Bf16Autocast" } else { "F16Autocast" }
            ),
            other => format!("`{name}` would be {other:?}: parameters and state are float32 or float64"),
        };
        Err(self.build_err(op)(OpError::invalid(op, why)))
    }

    /// Marks `v` as a graph output: kept after each iteration for the caller to read.
    pub fn output(&mut self, v: ValueId) {
        if !self.graph.outputs.contains(&v) {
            self.graph.outputs.push(v);
        }
    }

    /// [`push`](Self::push) for a node with one new output and nothing updated: that
    /// output's value.
    pub(crate) fn push_one(
        &mut self,
        op: Op,
        inputs: Vec<ValueId>,
        output: (impl AsRef<str>, Vec<usize>, DType),
        flops: u64,
    ) -> ValueId {
        self.push(op, inputs, vec![output], vec![], flops)[0]
    }

    /// Appends a node in the current phase and creates its new outputs (intermediates
    /// named `<stem>#<OP_ID>`), followed by the state values it updates in place.
    pub(crate) fn push<N: AsRef<str>>(
        &mut self,
        op: Op,
        inputs: Vec<ValueId>,
        new_outputs: Vec<(N, Vec<usize>, DType)>,
        updated: Vec<ValueId>,
        flops: u64,
    ) -> Vec<ValueId> {
        let op_id = self.graph.nodes.len();
        let rg = inputs.iter().any(|v| self.requires_grad[v.0]);
        let mut outputs = Vec::with_capacity(new_outputs.len() + updated.len());
        for (name, shape, dtype) in new_outputs {
            let id = self.value(
                format!("{}#{op_id}", name.as_ref()),
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
            origin: self.origin.clone(),
        });
        outputs
    }

    /// Maps a kernel's shape error into [`GraphError::Build`] for builder call `op`.
    pub(crate) fn build_err(&self, op: &'static str) -> impl FnOnce(OpError) -> GraphError {
        let layer = self.origin.layer.clone();
        move |source| GraphError::Build { op, layer, source }
    }

    /// An error unless the forward pass is still being recorded.
    pub(crate) fn forward_only(&self, op: &'static str) -> Result<()> {
        if self.phase != Phase::Forward {
            return Err(GraphError::Usage(format!(
                "{op} recorded after the backward pass was added: record the whole forward pass first"
            )));
        }
        Ok(())
    }

    /// The dtype of a recorded value.
    pub(crate) fn dtype_of(&self, v: ValueId) -> DType {
        self.graph.values[v.0].dtype
    }

    /// The dtype of a recorded value (its element type: float, or integer indices and
    /// `u8` masks).
    pub fn dtype(&self, v: ValueId) -> DType {
        self.dtype_of(v)
    }

    /// An error naming `op` unless `v` is a float tensor (`what` names the operand).
    pub(crate) fn expect_float(&self, op: &'static str, what: &str, v: ValueId) -> Result<()> {
        let dtype = self.dtype_of(v);
        if !dtype.is_float() {
            return Err(self.build_err(op)(wick_ops::invalid!(
                op,
                "{what} must be a float tensor, got {dtype:?}"
            )));
        }
        Ok(())
    }

    /// An error naming `op` unless `a` and `b` have one dtype.
    pub(crate) fn expect_same_dtype(&self, op: &'static str, a: ValueId, b: ValueId) -> Result<()> {
        let (da, db) = (self.dtype_of(a), self.dtype_of(b));
        if da != db {
            return Err(self.build_err(op)(wick_ops::invalid!(
                op,
                "the operands have dtypes {da:?} and {db:?}"
            )));
        }
        Ok(())
    }

    /// Marks `v` as carrying no gradient (a mask, indices, a detached or constant value):
    /// backward stops there.
    pub(crate) fn stop_gradient(&mut self, v: ValueId) {
        self.requires_grad[v.0] = false;
        self.stops_gradient[v.0] = true;
    }

    /// Finishes recording.
    pub fn finish(mut self) -> Graph {
        self.graph.precision = self.autocast.precision;
        self.graph
    }
}

impl NodeRecorder for GraphBuilder {
    fn value_info(&self, v: ValueId) -> &ValueInfo {
        &self.graph.values[v.0]
    }

    fn needs_grad(&self, v: ValueId) -> bool {
        self.requires_grad[v.0]
    }

    fn record(&mut self, op: Op, ins: Vec<ValueId>, outs: NewValues, flops: u64) -> Vec<ValueId> {
        self.push(op, ins, outs, vec![], flops)
    }
}
