//! The executor: runs a graph's nodes in OP_ID order on a candle device, many times.
//!
//! Parameters, optimizer state and batch-norm running statistics persist across
//! iterations; every intermediate tensor is freed right after its last consumer (liveness
//! is computed once, when the executor is made). Hooks are called around iterations,
//! phases and ops, and each op runs inside a `tracing` span (`op`, with its name, OP_ID
//! and phase), so any `tracing` subscriber sees the ops.

use candle_core::{DType, Device, Tensor};
use wick_ops::conv::ConvAlgorithm;
use wick_ops::gpu::Workspace;
use wick_ops::{DeviceKind, KernelPath};

use crate::error::{GraphError, Result};
use crate::hooks::{Hook, NodeInfo};
use crate::ir::Outputs;
use crate::ir::{Graph, Phase, ValueId, ValueKind};

mod skipped_updates;
mod values;

/// Runs a [`Graph`] on a device.
///
/// # Examples
///
/// ```
/// use candle_core::{DType, Device, Tensor};
/// use wick_graph::{Executor, GraphBuilder, Mode};
/// use wick_profiler::TimeProfiler; // the profiler is a hook (wick-profiler)
///
/// let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
/// let x = b.input("x", &[2, 3], DType::F32)?;
/// let y = b.gelu(x)?;
/// b.output(y);
/// let mut exec = Executor::new(b.finish(), &Device::Cpu);
/// exec.add_hook(TimeProfiler::new(2, 0))?; // hooks time each op
/// exec.set("x", &Tensor::zeros((2, 3), DType::F32, &Device::Cpu)?)?;
/// exec.run()?;
/// let out = exec.value(y)?; // outputs are kept after a run
/// assert_eq!(out.to_vec2::<f32>()?, vec![vec![0.0; 3]; 2]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Executor {
    graph: Graph,
    device: Device,
    slots: Vec<Option<Tensor>>,
    frees: Vec<Vec<ValueId>>,
    /// The first node writing each value ([`Graph::first_writers`]): `set_shared` takes
    /// only values no node writes.
    writers: Vec<Option<usize>>,
    infos: Vec<NodeInfo>,
    hooks: Vec<Box<dyn Hook>>,
    iteration: usize,
    detect_anomaly: bool,
    /// Whether a node talks to other ranks (MPI, NCCL): then iterations stay on the
    /// calling thread.
    communicates: bool,
    /// The kernels' scratch, lent to every kernel of an iteration; allocated at the first
    /// run, at `workspace_bytes`.
    workspace: Workspace,
    /// The largest scratch any node's kernel takes on this device (the memory plan's).
    workspace_bytes: u64,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("nodes", &self.graph.nodes.len())
            .field("device", &self.device)
            .field("hooks", &self.hooks.len())
            .field("iteration", &self.iteration)
            .finish()
    }
}

fn describe(shape: &[usize], dtype: DType) -> String {
    format!("shape {shape:?} {dtype:?}")
}

/// What hooks are told about node `op_id`, `n`, of `graph` on a device of kind `kind`.
fn node_info(
    graph: &Graph,
    plan: &crate::memory_plan::MemoryPlan,
    kind: DeviceKind,
    op_id: usize,
    n: &crate::ir::Node,
) -> NodeInfo {
    let shapes = |values: &[ValueId]| -> Vec<Vec<usize>> {
        values
            .iter()
            .map(|v| graph.values[v.0].shape.clone())
            .collect()
    };
    let input_shapes = shapes(&n.inputs);
    NodeInfo {
        op_id,
        param_slots: n.op.param_slots(),
        kernel: n.op.kernel(),
        name: n.op.kernel().name(kind),
        variant: n.op.variant(&input_shapes),
        phase: n.phase,
        input_shapes,
        output_shapes: shapes(&n.outputs),
        flops: n.flops,
        origin: n.origin.clone(),
        bytes: if !n.op.moves_data() {
            0
        } else {
            n.inputs
                .iter()
                .chain(&n.outputs)
                .fold(0u64, |a, v| a.saturating_add(plan.value_bytes[v.0]))
        },
        dtype: compute_dtype(graph, n),
    }
}

/// The dtype a node computes in: its own word ([`NodeOp::compute_dtype`](crate::NodeOp::compute_dtype)), else the narrowest float dtype among its inputs and outputs
/// (a convolution of bf16 operands with an f32 output computes in bf16; a cast to bf16
/// counts as bf16 work), else its first output's (integer-only nodes).
fn compute_dtype(graph: &Graph, n: &crate::ir::Node) -> DType {
    if let Some(d) = n.op.compute_dtype() {
        return d;
    }
    let dtypes = || {
        n.inputs
            .iter()
            .chain(&n.outputs)
            .map(|v| graph.values[v.0].dtype)
    };
    dtypes()
        .filter(|d| d.is_float())
        .min_by_key(|d| d.size_in_bytes())
        .or_else(|| dtypes().next())
        .unwrap_or(DType::F32)
}

impl Executor {
    /// An executor for `graph` on `device`. Parameters and state start unset: set them with
    /// [`set`](Executor::set) before the first [`run`](Executor::run).
    pub fn new(mut graph: Graph, device: &Device) -> Self {
        let writers = graph.first_writers();
        crate::nodes::cast::keep_constant_casts(&mut graph, &writers);
        let kind = DeviceKind::of(device);
        let plan = graph.memory_plan_on(kind);
        let infos = graph
            .nodes
            .iter()
            .enumerate()
            .map(|(op_id, n)| node_info(&graph, &plan, kind, op_id, n))
            .collect();
        let frees = graph.last_uses();
        let communicates = graph.nodes.iter().any(|n| n.op.kernel().communicates());
        Executor {
            slots: vec![None; graph.values.len()],
            graph,
            device: device.clone(),
            frees,
            writers,
            infos,
            hooks: Vec::new(),
            iteration: 0,
            detect_anomaly: false,
            communicates,
            workspace: Workspace::default(),
            workspace_bytes: plan.split.kernel_workspace,
        }
    }

    /// The graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The device the graph runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// What hooks are told about each node, in OP_ID order.
    pub fn node_infos(&self) -> &[NodeInfo] {
        &self.infos
    }

    /// How many iterations have run.
    pub fn iterations(&self) -> usize {
        self.iteration
    }

    /// Anomaly detection (PyTorch's `detect_anomaly`): when on, every node's outputs are
    /// checked as it finishes, and the first NaN or infinity stops the iteration with
    /// [`GraphError::NonFinite`] naming the OP_ID, kernel, phase and layer. Costs a read
    /// of every output (and a synchronisation per op on a GPU): for debugging, not for
    /// timing.
    pub fn set_anomaly_detection(&mut self, on: bool) {
        self.detect_anomaly = on;
    }

    /// `, layer <name>` for node `op_id`'s layer, or nothing: the errors' layer note.
    fn layer_note(&self, op_id: usize) -> String {
        let layer = self.graph.nodes[op_id].origin.layer.as_deref();
        layer.map(|l| format!(", layer {l}")).unwrap_or_default()
    }

    /// The first non-finite element among node `op_id`'s outputs, as an error.
    fn check_outputs(&self, op_id: usize, outputs: &Outputs) -> Result<()> {
        let node = &self.graph.nodes[op_id];
        for (v, t) in node.outputs.iter().zip(outputs) {
            let Some(t) = t else { continue };
            let found = wick_ops::first_non_finite(t).map_err(|source| GraphError::Run {
                op_id,
                name: self.infos[op_id].name,
                phase: node.phase,
                layer: self.layer_note(op_id),
                source,
            })?;
            if let Some((index, value)) = found {
                let name = |v: &ValueId| self.graph.values[v.0].name.clone();
                // The recorded layer, else the one its parameters' names give.
                let from_params = || {
                    let param = node
                        .inputs
                        .iter()
                        .find(|v| self.graph.values[v.0].kind == ValueKind::Param);
                    param.map(|v| {
                        let n = name(v);
                        let layer = n.rsplit_once('.').map_or(n.clone(), |(l, _)| l.to_string());
                        format!(", layer {layer}")
                    })
                };
                let layer = match node.origin.layer {
                    Some(_) => self.layer_note(op_id),
                    None => from_params().unwrap_or_default(),
                };
                let inputs: Vec<String> = node
                    .inputs
                    .iter()
                    .map(|v| format!("`{}`", name(v)))
                    .collect();
                return Err(GraphError::NonFinite {
                    op_id,
                    kernel: self.infos[op_id].name,
                    phase: node.phase,
                    layer,
                    output: name(v),
                    index,
                    value,
                    inputs: inputs.join(", "),
                });
            }
        }
        Ok(())
    }

    /// Tells the hooks (the profiler) how long a part of the step outside the graph took:
    /// waiting for the batch, copying it in, reading the loss back. The caller times these
    /// with the host clock; the profiler adds them to its whole-step breakdown.
    pub fn report_step_part(&mut self, part: crate::hooks::StepPart, sec: f64) {
        for h in &mut self.hooks {
            h.on_step_part(part, sec);
        }
    }

    /// Tells the hooks about a batch a data loader thread prepared, as the training loop
    /// takes it (before the iteration that uses it): its stages' times, per thread.
    pub fn report_loader_work(&mut self, work: &crate::hooks::LoaderWork) {
        for h in &mut self.hooks {
            h.on_loader_work(work);
        }
    }

    /// Attaches a hook; it is called from the next iteration on.
    pub fn add_hook<H: Hook>(&mut self, mut hook: H) -> Result<()> {
        hook.on_attach(&self.infos, &self.device)?;
        hook.on_memory_plan(&self.graph.memory_plan_on(DeviceKind::of(&self.device)));
        self.hooks.push(Box::new(hook));
        Ok(())
    }

    /// The first attached hook of type `H`.
    pub fn hook<H: Hook>(&self) -> Option<&H> {
        self.hooks
            .iter()
            .find_map(|h| (&**h as &dyn std::any::Any).downcast_ref::<H>())
    }

    /// The first attached hook of type `H`, mutably.
    pub fn hook_mut<H: Hook>(&mut self) -> Option<&mut H> {
        self.hooks
            .iter_mut()
            .find_map(|h| (&mut **h as &mut dyn std::any::Any).downcast_mut::<H>())
    }

    /// Removes every hook of type `H` and returns the first.
    pub fn remove_hook<H: Hook>(&mut self) -> Option<H> {
        let pos = self
            .hooks
            .iter()
            .position(|h| (&**h as &dyn std::any::Any).is::<H>())?;
        let hook: Box<dyn std::any::Any> = self.hooks.remove(pos);
        hook.downcast::<H>().ok().map(|b| *b)
    }

    fn id(&self, name: &str) -> Result<ValueId> {
        self.graph
            .find(name)
            .ok_or_else(|| GraphError::UnknownValue(name.to_string()))
    }

    /// A snapshot of every parameter and state value that is set, by name (copies: later
    /// runs do not change them).
    pub fn state_dict(&self) -> Result<Vec<(String, Tensor)>> {
        let mut out = Vec::new();
        for (v, s) in self.graph.values.iter().zip(&self.slots) {
            if let (ValueKind::Param | ValueKind::State, Some(t)) = (v.kind, s) {
                out.push((v.name.clone(), t.copy()?));
            }
        }
        Ok(out)
    }

    /// Changes the learning rate of every SGD and Adam update node from the next iteration
    /// on (for a learning-rate schedule); `lr` must be finite and non-negative.
    pub fn set_learning_rate(&mut self, lr: f64) -> Result<()> {
        for node in &mut self.graph.nodes {
            if let Some(op) = node.op.with_learning_rate(lr) {
                node.op = op?;
            }
        }
        Ok(())
    }

    /// Runs one iteration: every node in OP_ID order.
    ///
    /// A CPU graph without communication runs on a thread of rayon's pool, the one wick's
    /// CPU kernels split their work over: each kernel's parallel loop then starts from
    /// inside the pool, instead of waking its threads from outside and putting the
    /// calling thread to sleep until they are done (one futex round trip per parallel
    /// loop, several per node). The calling thread waits; the
    /// [`KernelPath`] and [`ConvAlgorithm`] in force on it carry over, and the hooks are
    /// called on the pool's thread. CUDA graphs and graphs with communication (MPI, NCCL)
    /// stay on the calling thread.
    pub fn run(&mut self) -> Result<()> {
        if !self.runs_on_pool() {
            return self.run_here();
        }
        let (path, algorithm) = (KernelPath::current(), ConvAlgorithm::current());
        rayon::scope(|_| path.scope(|| algorithm.scope(|| self.run_here())))
    }

    /// Whether [`run`](Executor::run) moves the iteration onto rayon's pool: a CPU graph
    /// without communication, called from outside the pool.
    fn runs_on_pool(&self) -> bool {
        self.device.is_cpu() && rayon::current_thread_index().is_none() && !self.communicates
    }

    /// The kernels' scratch: allocated once, at the size of the memory plan's
    /// `kernel_workspace` (0 on the CPU), and lent to every kernel of an iteration. Its
    /// [`misses`](Workspace::misses) count kernel calls that had to allocate their own.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// [`run`](Executor::run) on the calling thread, with the workspace lent to the
    /// kernels.
    fn run_here(&mut self) -> Result<()> {
        self.place_constants()?;
        if self.workspace.bytes() < self.workspace_bytes {
            self.workspace = Workspace::new(&self.device, self.workspace_bytes).map_err(|e| {
                GraphError::Cuda {
                    what: "allocating the kernels' workspace",
                    message: e.to_string(),
                }
            })?;
        }
        let mut workspace = std::mem::take(&mut self.workspace);
        let done = workspace.lend(|| self.run_nodes());
        self.workspace = workspace;
        done
    }

    /// One iteration: every node in OP_ID order, with the hooks around them.
    fn run_nodes(&mut self) -> Result<()> {
        let hooked = !self.hooks.is_empty();
        let iteration = self.iteration;
        if hooked {
            self.hooks
                .iter_mut()
                .for_each(|h| h.on_iteration_start(iteration));
        }
        let mut phase: Option<Phase> = None;
        let skip_updates = self.accumulating()?;
        // Set by a grad scaler's unscale that found a non-finite gradient: the step's
        // parameter updates are skipped (PyTorch's `scaler.step`).
        let mut skip_parameter_updates = false;
        for op_id in 0..self.graph.nodes.len() {
            let node_phase = self.graph.nodes[op_id].phase;
            let skipped = (skip_updates && self.is_update(op_id))
                || (skip_parameter_updates && !self.graph.nodes[op_id].op.param_slots().is_empty());
            if skipped {
                for v in &self.frees[op_id] {
                    self.slots[v.0] = None;
                }
                continue;
            }
            if hooked && phase != Some(node_phase) {
                if let Some(p) = phase {
                    self.hooks.iter_mut().for_each(|h| h.on_phase_end(p));
                }
                self.hooks
                    .iter_mut()
                    .for_each(|h| h.on_phase_start(node_phase));
            }
            phase = Some(node_phase);
            let info = &self.infos[op_id];
            let span =
                tracing::debug_span!("op", name = info.name, op_id, phase = node_phase.as_str());
            let _entered = span.enter();
            if hooked {
                self.hooks.iter_mut().for_each(|h| h.before_op(info));
            }
            let outputs = self.execute(op_id)?;
            self.check_declared(op_id, &outputs)?;
            if self.detect_anomaly {
                self.check_outputs(op_id, &outputs)?;
            }
            if hooked {
                let info = &self.infos[op_id];
                self.hooks.iter_mut().for_each(|h| h.after_op(info));
            }
            for (v, t) in self.graph.nodes[op_id].outputs.iter().zip(outputs) {
                self.slots[v.0] = t;
            }
            skip_parameter_updates |= self.found_non_finite_gradient(op_id)?;
            for v in &self.frees[op_id] {
                self.slots[v.0] = None;
            }
        }
        if hooked {
            if let Some(p) = phase {
                self.hooks.iter_mut().for_each(|h| h.on_phase_end(p));
            }
            for h in &mut self.hooks {
                h.on_iteration_end(iteration)?;
            }
        }
        self.iteration += 1;
        Ok(())
    }

    /// Checks that node `op_id` returned as many outputs as it declares, each of its
    /// declared shape and dtype (a custom op's promise, or a kernel bug).
    fn check_declared(&self, op_id: usize, outputs: &Outputs) -> Result<()> {
        let node = &self.graph.nodes[op_id];
        let name = self.infos[op_id].name;
        let fail = |message: String| GraphError::Run {
            op_id,
            name,
            phase: node.phase,
            layer: self.layer_note(op_id),
            source: wick_ops::OpError::invalid(name, message),
        };
        // Trailing unset outputs beyond the declared ones are allowed (an absent bias's
        // gradient).
        let returned = outputs
            .iter()
            .rposition(Option::is_some)
            .map_or(0, |i| i + 1);
        if outputs.len() < node.outputs.len() || returned > node.outputs.len() {
            return Err(fail(format!(
                "returned {} outputs, the graph declares {}",
                outputs.len(),
                node.outputs.len()
            )));
        }
        for (i, (v, t)) in node.outputs.iter().zip(outputs).enumerate() {
            let info = &self.graph.values[v.0];
            if let Some(t) = t {
                if t.dims() != info.shape.as_slice() || t.dtype() != info.dtype {
                    return Err(fail(format!(
                        "output {i} (`{}`) is {}, the graph declares {}",
                        info.name,
                        describe(t.dims(), t.dtype()),
                        describe(&info.shape, info.dtype)
                    )));
                }
            }
        }
        Ok(())
    }

    /// Runs node `op_id`'s kernel on its inputs and returns its outputs in order; an
    /// unset input the op needs is a [`GraphError::MissingValue`].
    fn execute(&self, op_id: usize) -> Result<Outputs> {
        let node = &self.graph.nodes[op_id];
        let mut inputs = Vec::with_capacity(node.inputs.len());
        for (i, v) in node.inputs.iter().enumerate() {
            let tensor = self.slots[v.0].as_ref();
            if tensor.is_none() && !node.op.optional_input(i) {
                return Err(GraphError::MissingValue {
                    name: self.graph.values[v.0].name.clone(),
                    op_id,
                    kernel: self.infos[op_id].name,
                });
            }
            inputs.push(tensor);
        }
        node.op.execute(&inputs).map_err(|source| GraphError::Run {
            op_id,
            name: self.infos[op_id].name,
            phase: node.phase,
            layer: self.layer_note(op_id),
            source,
        })
    }
}
