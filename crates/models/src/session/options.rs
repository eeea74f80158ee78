//! What a training session needs beyond the model: [`TrainOptions`].

use wick_graph::nodes::optim::{GradScaler, Optimizer, OptimizerConfig};
use wick_graph::{PassSet, Precision};
use wick_ops::SgdParams;

/// What a training session needs beyond the model.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    /// The optimizer phase: SGD, Adam or AdamW, parameter groups, gradient clipping.
    pub optimizer: OptimizerConfig,
    /// Keep every parameter's gradient after each step (for tests and inspection; costs memory).
    pub keep_gradients: bool,
    /// After each step, check every updated parameter for NaN and infinity (one parallel
    /// read of the weights, about 1% of a ResNet-18 step on a CPU). The loss is always
    /// checked. Without this check a diverging update is caught one step later, by the
    /// loss, and the last step's is caught only by [`Session::save_checkpoint`](crate::Session::save_checkpoint).
    pub check_parameters: bool,
    /// The graph passes to run (see [`wick_graph::passes`]): in a training graph
    /// `batch_norm_relu` and `add_relu` match (the inference passes find nothing to fuse).
    pub passes: PassSet,
    /// The products' precision: float32, or bfloat16 or float16 autocast (16-bit
    /// products, f32 sums, f32 master weights, optimizer state and checkpoints; see
    /// [`wick_graph::Precision`]).
    pub precision: Precision,
    /// Dynamic loss scaling (PyTorch's `GradScaler`); `None` gives its defaults under
    /// float16 autocast and none otherwise ([`loss_scaling`](TrainOptions::loss_scaling)).
    pub grad_scaler: Option<GradScaler>,
}

impl TrainOptions {
    /// The loss scaling a session with these options runs: `grad_scaler`, or
    /// [`GradScaler::default`] under [`Precision::F16Autocast`], whose narrow range needs
    /// it.
    pub fn loss_scaling(&self) -> Option<GradScaler> {
        match (self.grad_scaler, self.precision) {
            (Some(s), _) => Some(s),
            (None, Precision::F16Autocast) => Some(GradScaler::default()),
            (None, _) => None,
        }
    }
}

impl From<SgdParams> for TrainOptions {
    /// Training with these SGD settings, without keeping the gradients, with the default
    /// passes.
    fn from(sgd: SgdParams) -> Self {
        Optimizer::Sgd(sgd).into()
    }
}

impl From<Optimizer> for TrainOptions {
    /// Training with this optimizer for every parameter, without keeping the gradients,
    /// with the default passes.
    fn from(optimizer: Optimizer) -> Self {
        OptimizerConfig::from(optimizer).into()
    }
}

impl From<OptimizerConfig> for TrainOptions {
    /// Training with this optimizer phase, without keeping the gradients, with the default
    /// passes.
    fn from(optimizer: OptimizerConfig) -> Self {
        TrainOptions {
            optimizer,
            keep_gradients: false,
            check_parameters: true,
            passes: PassSet::default(),
            precision: Precision::F32,
            grad_scaler: None,
        }
    }
}
