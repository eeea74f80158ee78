//! A model ready to run: its graph (training or inference), executor and weights, for any
//! model of the registry ([`ModelConfig`]). The examples and the fixture
//! tests go through these same calls.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use candle_core::{DType, Device, Tensor};
use wick_graph::nodes::dropout::STEP_INPUT;
use wick_graph::passes::data_parallel::{DataParallel, DataParallelOptions};
use wick_graph::{Executor, GraphBuilder, Mode, PassSet, Precision, StepPart, ValueId};

use crate::checkpoint::{self, StateDict, ValueChecks};
use crate::error::{ModelError, Result};
use crate::image::ImageSize;
use crate::init::WeightInit;
use crate::model::ModelConfig;

mod checks;
mod loss_scaling;
mod options;

pub use options::TrainOptions;

/// A builder holding `config`'s forward pass in `mode` for batches of `batch` images of
/// `size`, with the image input and the logits. Images the model cannot take get an
/// error naming the smallest size it accepts.
fn forward_graph(
    config: &ModelConfig,
    mode: Mode,
    batch: usize,
    size: ImageSize,
    precision: Precision,
) -> Result<(GraphBuilder, ValueId, ValueId)> {
    let config = &config.for_images(size)?;
    let mut b = GraphBuilder::new(mode, DType::F32);
    b.set_precision(precision);
    let images = b.input("images", &[batch, 3, size.height, size.width], DType::F32)?;
    match config.forward(&mut b, images) {
        Ok(logits) => Ok((b, images, logits)),
        Err(e) => Err(match config.smallest_image_size(mode, batch) {
            Some(min) if min.height > size.height.min(size.width) => {
                let what = match mode {
                    Mode::Train => "training",
                    Mode::Eval => "inference",
                };
                ModelError::Config(format!(
                    "images of {size} (width x height) are too small for {} {what} at batch {batch}: the smallest square size it accepts is {min}, and every larger size works ({e})",
                    config.describe(),
                ))
            }
            _ => e,
        }),
    }
}

/// A model (any [`ModelConfig`]) as a buffered graph on a device, with
/// its weights.
#[derive(Debug)]
pub struct Session {
    config: ModelConfig,
    exec: Executor,
    images: ValueId,
    labels: Option<ValueId>,
    logits: ValueId,
    loss: Option<ValueId>,
    gradients: HashMap<String, ValueId>,
    batches_tracked: HashMap<String, i64>,
    batch: usize,
    image_size: ImageSize,
    /// Training steps run so far.
    steps: u64,
    /// Steps whose updates loss scaling skipped (a non-finite gradient).
    skipped_steps: u64,
    check_parameters: bool,
    /// The state dict's names, in order (made once: the per-step check reads them).
    state_names: std::sync::OnceLock<Vec<String>>,
    data_parallel: Option<DataParallel>,
    /// The classes' names, by index, saved with the weights ([`Session::set_class_names`]).
    class_names: Option<Vec<String>>,
}

/// What the data-parallel rewrite of a training graph needs: the ranks and the options.
type DataParallelRewrite<'a> = (
    std::sync::Arc<dyn wick_graph::collective::Communicator>,
    &'a DataParallelOptions,
);

impl Session {
    /// A training graph (forward, loss, backward, SGD) for batches of `batch` images of
    /// `image_size` (a side, or an [`ImageSize`] for non-square images).
    pub fn training(
        config: impl Into<ModelConfig>,
        batch: usize,
        image_size: impl Into<ImageSize>,
        options: TrainOptions,
        device: &Device,
    ) -> Result<Self> {
        Self::training_with(
            config.into(),
            batch,
            image_size.into(),
            options,
            None,
            device,
        )
    }

    /// The training graph, rewritten for data parallelism when `data_parallel` is given,
    /// before its one executor is built.
    fn training_with(
        config: ModelConfig,
        batch: usize,
        image_size: ImageSize,
        options: TrainOptions,
        data_parallel: Option<DataParallelRewrite<'_>>,
        device: &Device,
    ) -> Result<Self> {
        let config = config.for_images(image_size)?;
        let (mut b, images, logits) =
            forward_graph(&config, Mode::Train, batch, image_size, options.precision)?;
        let labels = b.input("labels", &[batch], DType::I64)?;
        let loss = b.in_layer("loss", |b| b.cross_entropy(logits, labels))?;
        b.output(logits);
        b.output(loss);
        if let Some(scaler) = options.loss_scaling() {
            b.set_grad_scaler(scaler)?;
        }
        let grads = b.backward(loss)?;
        let mut gradients = HashMap::new();
        if options.keep_gradients {
            for (p, g) in grads.iter() {
                b.output(g);
                gradients.insert(b.graph().value(p).name.clone(), g);
            }
        }
        b.optimize(&grads, &options.optimizer)?;
        Self::finish(
            config,
            b,
            images,
            Some(labels),
            logits,
            Some(loss),
            gradients,
            batch,
            image_size,
            options.passes,
            data_parallel,
            device,
        )
        .map(|s| Session {
            check_parameters: options.check_parameters,
            ..s
        })
    }

    /// A data-parallel training graph: [`training`](Session::training) for this rank's
    /// shard of `batch` images, with every gradient averaged over `comm`'s ranks before the
    /// optimizer applies it (`DistAllReduce` and `DistWait` nodes per bucket; see
    /// [`DataParallelOptions`]). Batch-norm statistics stay per rank, as in PyTorch DDP,
    /// unless `dp.sync_batch_norm` takes them over every rank's shard (PyTorch's
    /// `SyncBatchNorm`).
    pub fn training_data_parallel(
        config: impl Into<ModelConfig>,
        batch: usize,
        image_size: impl Into<ImageSize>,
        options: TrainOptions,
        comm: std::sync::Arc<dyn wick_graph::collective::Communicator>,
        dp: &DataParallelOptions,
        device: &Device,
    ) -> Result<Self> {
        let rewrite = Some((comm, dp));
        Self::training_with(
            config.into(),
            batch,
            image_size.into(),
            options,
            rewrite,
            device,
        )
    }

    /// What the data-parallel pass made (buckets, the collectives' queue and timings);
    /// `None` for a single-process session.
    pub fn data_parallel(&self) -> Option<&DataParallel> {
        self.data_parallel.as_ref()
    }

    /// An inference graph (batch norm with running statistics, no backward) for batches of
    /// `batch` images of `image_size` (a side, or an [`ImageSize`]), with the default
    /// passes: batch norms folded into the convolutions, residual adds and ReLUs fused
    /// into their output writes.
    pub fn inference(
        config: impl Into<ModelConfig>,
        batch: usize,
        image_size: impl Into<ImageSize>,
        device: &Device,
    ) -> Result<Self> {
        Self::inference_with_passes(config, batch, image_size, PassSet::default(), device)
    }

    /// [`inference`](Session::inference) with the given passes
    /// ([`PassSet::NONE`]: the graph as recorded, one node per op).
    pub fn inference_with_passes(
        config: impl Into<ModelConfig>,
        batch: usize,
        image_size: impl Into<ImageSize>,
        passes: PassSet,
        device: &Device,
    ) -> Result<Self> {
        Self::inference_with(config, batch, image_size, (passes, Precision::F32), device)
    }

    /// [`inference`](Session::inference) with the given passes and precision policy.
    pub fn inference_with(
        config: impl Into<ModelConfig>,
        batch: usize,
        image_size: impl Into<ImageSize>,
        (passes, precision): (PassSet, Precision),
        device: &Device,
    ) -> Result<Self> {
        let image_size = image_size.into();
        let config = config.into().for_images(image_size)?;
        let (mut b, images, logits) =
            forward_graph(&config, Mode::Eval, batch, image_size, precision)?;
        b.output(logits);
        Self::finish(
            config,
            b,
            images,
            None,
            logits,
            None,
            HashMap::new(),
            batch,
            image_size,
            passes,
            None,
            device,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        config: ModelConfig,
        b: GraphBuilder,
        images: ValueId,
        labels: Option<ValueId>,
        logits: ValueId,
        loss: Option<ValueId>,
        gradients: HashMap<String, ValueId>,
        batch: usize,
        image_size: ImageSize,
        passes: PassSet,
        data_parallel: Option<DataParallelRewrite<'_>>,
        device: &Device,
    ) -> Result<Self> {
        let mut graph = b.finish();
        // On CUDA the default set merges the SGD updates: one launch for all parameters.
        let passes = match device.is_cuda() && passes == PassSet::default() {
            true => passes.with(wick_graph::PassName::MultiTensorUpdate),
            false => passes,
        };
        graph.apply_passes(passes);
        let data_parallel = match data_parallel {
            Some((comm, options)) => Some(graph.apply_data_parallel_with(comm, options)?),
            None => None,
        };
        if device.is_cpu() {
            crate::limits::check_allocation(
                &format!("{} for batches of {batch} at {image_size}", config.name()),
                graph.peak_bytes(),
            )?;
        }
        let batches_tracked = config
            .batch_norm_names()?
            .into_iter()
            .map(|n| (n, 0))
            .collect();
        Ok(Session {
            config,
            exec: Executor::new(graph, device),
            images,
            labels,
            logits,
            loss,
            gradients,
            batches_tracked,
            batch,
            image_size,
            steps: 0,
            skipped_steps: 0,
            check_parameters: false,
            state_names: std::sync::OnceLock::new(),
            data_parallel,
            class_names: None,
        })
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Images per batch.
    pub fn batch_size(&self) -> usize {
        self.batch
    }

    /// Height and width of the images.
    pub fn image_size(&self) -> ImageSize {
        self.image_size
    }

    /// The executor (to attach hooks such as the profiler).
    pub fn executor(&self) -> &Executor {
        &self.exec
    }

    /// The executor, mutably.
    pub fn executor_mut(&mut self) -> &mut Executor {
        &mut self.exec
    }

    /// Sets fresh weights from `init` (torchvision's from a seed, or the fixture formula),
    /// with every `num_batches_tracked` at 0.
    pub fn init_weights(&mut self, init: WeightInit) -> Result<()> {
        let weights = init.state_dict(&self.config)?;
        self.set_state(&weights)?;
        self.batches_tracked.values_mut().for_each(|v| *v = 0);
        Ok(())
    }

    /// Sets every tensor of `state` (fresh tensors: read from a file, initialised, or
    /// another session's copies). An inference graph writes none of them, so it reads
    /// them where they are instead of copying them (`Executor::set_shared`): the weights
    /// are held once.
    fn set_state(&mut self, state: &StateDict) -> Result<()> {
        let inference = self.loss.is_none();
        for (name, t) in state {
            if inference {
                self.exec.set_shared(name, t)?;
            } else {
                self.exec.set(name, t)?;
            }
        }
        Ok(())
    }

    /// Loads a torchvision-named safetensors checkpoint. Every tensor the model needs must
    /// be there with its shape; f16, bf16 and f64 tensors are converted to f32. Poisoned
    /// values (NaN, infinity, a negative variance or count) are refused: see
    /// [`load_checkpoint_with`](Session::load_checkpoint_with) to accept them.
    pub fn load_checkpoint(&mut self, path: &Path) -> Result<()> {
        self.load_checkpoint_with(path, ValueChecks::Strict)
    }

    /// [`load_checkpoint`](Session::load_checkpoint) with the given value checks.
    pub fn load_checkpoint_with(&mut self, path: &Path, checks: ValueChecks) -> Result<()> {
        let tensors = checkpoint::read_safetensors(path)?;
        let (state, tracked) = checkpoint::validate(&self.config, tensors, path, checks)?;
        self.set_state(&state)?;
        self.batches_tracked = tracked;
        Ok(())
    }

    /// The state dict as torchvision names it, `num_batches_tracked` (int64) included.
    pub fn state_dict(&self) -> Result<StateDict> {
        let mut out = StateDict::new();
        for spec in self.config.state_spec()? {
            let t = self.exec.get(&spec.name)?.ok_or_else(|| {
                ModelError::State(format!(
                    "`{}` has not been set: load a checkpoint or init the weights first",
                    spec.name
                ))
            })?;
            out.insert(spec.name, t.copy()?);
        }
        for (bn, n) in &self.batches_tracked {
            out.insert(
                format!("{bn}.num_batches_tracked"),
                Tensor::new(*n, &Device::Cpu)?,
            );
        }
        Ok(out)
    }

    /// Saves the state dict to `path` (atomically: temporary file, then rename).
    pub fn save_checkpoint(&self, path: &Path) -> Result<()> {
        if let Some((name, i, v)) = self.first_non_finite_parameter()? {
            return Err(ModelError::Checkpoint {
                path: path.to_path_buf(),
                message: format!(
                    "not written: parameter `{name}` has the non-finite value {v} at element {i}"
                ),
            });
        }
        let meta = self.class_names.as_ref().map(|names| {
            let list = serde_json::to_string(names).unwrap_or_default();
            HashMap::from([(checkpoint::CLASSES_KEY.to_string(), list)])
        });
        checkpoint::write_safetensors_with(&self.state_dict()?, meta, path)
    }

    /// Names the classes, by index (an [`ImageFolder`](crate::data::ImageFolder)'s): every
    /// checkpoint this session saves carries them ([`checkpoint::read_class_names`]).
    pub fn set_class_names(&mut self, names: Vec<String>) {
        self.class_names = Some(names);
    }

    /// Tells the profiler how long the training loop waited for the next batch (host
    /// clock), so that its whole-step breakdown and input-bound verdict include it. Call it
    /// right before [`step`](Session::step) with that batch.
    pub fn report_input_wait(&mut self, wait: Duration) {
        self.exec
            .report_step_part(StepPart::InputWait, wait.as_secs_f64());
    }

    /// Tells the profiler what the data loader's stages took for the batch the next
    /// [`step`](Session::step) trains on ([`Prefetcher::next_batch_timed`](crate::data::Prefetcher::next_batch_timed)),
    /// for its input pipeline view.
    pub fn report_loader_work(&mut self, work: &wick_graph::LoaderWork) {
        self.exec.report_loader_work(work);
    }

    /// Copies `other`'s weights and statistics into this session (a training session's
    /// into an inference session of the same model, to evaluate it).
    pub fn copy_weights_from(&mut self, other: &Session) -> Result<()> {
        for (name, t) in other.state_dict()? {
            if !name.ends_with("num_batches_tracked") {
                self.exec.set(&name, &t)?;
            }
        }
        Ok(())
    }

    /// The optimizer's momentum buffers that exist (after a first step), by parameter name.
    pub fn momentum_buffers(&self) -> Result<Vec<(String, Tensor)>> {
        let mut out = Vec::new();
        for spec in self.config.state_spec()? {
            let name = format!("{}.momentum_buffer", spec.name);
            if let Some(t) = self.exec.get(&name).ok().flatten() {
                out.push((spec.name, t.copy()?));
            }
        }
        Ok(out)
    }

    /// The optimizer's state that exists (after a first step), by its full name
    /// (`<param>.momentum_buffer`, `<param>.exp_avg`, `<param>.exp_avg_sq`): copies.
    pub fn optimizer_state(&self) -> Result<Vec<(String, Tensor)>> {
        crate::optimizer_state::optimizer_state_of(&self.exec)
    }

    /// Restores optimizer state (by full name, as [`optimizer_state`](Session::optimizer_state)
    /// gives it) and the step counter, as a training checkpoint recorded them.
    pub fn set_optimizer_state(
        &mut self,
        state: &HashMap<String, Tensor>,
        steps: u64,
    ) -> Result<()> {
        crate::optimizer_state::set_optimizer_state_of(&mut self.exec, state)?;
        self.steps = steps;
        Ok(())
    }

    /// Restores momentum buffers (by parameter name) and the step counter, as a training
    /// checkpoint recorded them.
    pub fn set_momentum_buffers(
        &mut self,
        buffers: &HashMap<String, Tensor>,
        steps: u64,
    ) -> Result<()> {
        for (param, t) in buffers {
            self.exec.set(&format!("{param}.momentum_buffer"), t)?;
        }
        self.steps = steps;
        Ok(())
    }

    /// Training steps this session has run.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    fn feed_images(&mut self, images: &Tensor) -> Result<()> {
        let images = if images.dtype() == DType::F32 {
            images.clone()
        } else {
            images.to_dtype(DType::F32)?
        };
        self.exec.set_id(self.images, &images)?;
        Ok(())
    }

    /// One training step on a batch: forward, loss, backward and SGD update. `labels` are
    /// integer class indices. Returns the batch's mean loss.
    pub fn step(&mut self, images: &Tensor, labels: &Tensor) -> Result<f32> {
        let (Some(label_id), Some(loss)) = (self.labels, self.loss) else {
            return Err(ModelError::State(
                "step needs a training session (Session::training)".into(),
            ));
        };
        // Checked here, once per batch and outside the timed graph: the loss kernel does
        // not read labels back from a device.
        wick_ops::loss::check_labels(labels, self.config.num_classes())
            .map_err(|e| ModelError::Config(format!("labels: {e}")))?;
        let copy = Instant::now();
        if let Some(step) = self.exec.graph().find(STEP_INPUT) {
            self.exec
                .set_id(step, &Tensor::new(self.steps as i64, &Device::Cpu)?)?;
        }
        self.feed_images(images)?;
        self.exec.set_id(label_id, &labels.to_dtype(DType::I64)?)?;
        let copy = copy.elapsed().as_secs_f64();
        self.exec.report_step_part(StepPart::HostToDevice, copy);
        self.exec.run()?;
        self.steps += 1;
        self.count_skipped_step()?;
        self.batches_tracked.values_mut().for_each(|v| *v += 1);
        let read_back = Instant::now();
        let loss = self
            .exec
            .get_id(loss)?
            .ok_or_else(|| ModelError::State("the loss was not kept".into()))?
            .to_dtype(DType::F32)?
            .to_scalar::<f32>()?;
        let read_back = read_back.elapsed().as_secs_f64();
        self.exec
            .report_step_part(StepPart::LossReadBack, read_back);
        let non_finite = |what: String| ModelError::NonFinite {
            step: self.steps,
            what,
        };
        if !loss.is_finite() {
            return Err(non_finite(format!("the loss is {loss}")));
        }
        if self.check_parameters {
            let check = Instant::now();
            let found = self.first_non_finite_after_update()?;
            self.exec
                .report_step_part(StepPart::NonFiniteCheck, check.elapsed().as_secs_f64());
            if let Some((name, i, v)) = found {
                return Err(non_finite(format!("`{name}` became {v} at element {i}")));
            }
        }
        Ok(loss)
    }

    /// Runs the graph on a batch of images and returns the logits. In a training session
    /// this is not allowed (it would update the weights): use [`step`](Session::step).
    pub fn forward(&mut self, images: &Tensor) -> Result<Tensor> {
        if self.labels.is_some() {
            return Err(ModelError::State(
                "forward needs an inference session (Session::inference)".into(),
            ));
        }
        self.feed_images(images)?;
        self.exec.run()?;
        self.logits()
            .cloned()
            .ok_or_else(|| ModelError::State("the logits were not kept".into()))
    }

    /// The logits of the last run.
    pub fn logits(&self) -> Option<&Tensor> {
        self.exec.get_id(self.logits).ok().flatten()
    }

    /// The gradient of parameter `name` from the last step (with `keep_gradients`).
    pub fn gradient(&self, name: &str) -> Option<&Tensor> {
        let g = self.gradients.get(name)?;
        self.exec.get_id(*g).ok().flatten()
    }
}
