//! The fused training nodes that the graph passes make (never recorded directly; see
//! [`passes`](crate::passes)): batch norm + ReLU forward and backward, add + ReLU, and
//! bias + activation forward and backward. Kernels in `wick_ops::batchnorm`,
//! `wick_ops::elementwise` and `wick_ops::bias_activation`.

use wick_ops::activation::Activation;
use wick_ops::batchnorm::{self, BatchNorm2dParams};
use wick_ops::bias_activation::{bias_activation, bias_activation_backward};
use wick_ops::{elementwise, DeviceKind, Kernel};

use crate::ir::{args, binary, one, Inputs, KernelResult, NodeOp, ValueInfo};
use crate::nodes::batchnorm::{grads, train_outputs, workspace_bytes};

/// Batch norm (batch statistics) then ReLU, in one output pass. in: x, weight, bias,
/// running_mean, running_var; out: z = relu(bn(x)), mean, inv_std, and the running
/// statistics, updated.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchNormReluTrain {
    /// eps and momentum.
    pub params: BatchNorm2dParams,
}

/// The backward of [`BatchNormReluTrain`], ReLU's mask folded in. in: grad_z, z, x,
/// weight, mean, inv_std; out: grad_x, grad_weight, grad_bias.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchNormReluTrainBackward;

/// `relu(a + b)`, one pass. in: a, b; out: z. Its backward is ReLU's (from z), then the
/// add's, as before the fusion.
#[derive(Debug, Clone, PartialEq)]
pub struct AddRelu;

/// `act(h + b)`, the bias `b` `[C]` over the last dimension of `h`. in: h, b; out: y.
/// Its backward is [`BiasActivationBackward`].
#[derive(Debug, Clone, PartialEq)]
pub struct BiasActivation {
    /// The activation (GELU, GELU tanh or SiLU).
    pub kind: Activation,
}

/// The backward of [`BiasActivation`], the bias's gradient included. in: grad_y, h, b;
/// out: grad_h, grad_b.
#[derive(Debug, Clone, PartialEq)]
pub struct BiasActivationBackward {
    /// The activation.
    pub kind: Activation,
}

impl NodeOp for BiasActivation {
    fn kernel(&self) -> Kernel {
        Kernel::BiasActivation(self.kind)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [h, b] = args(inputs, self.kind.bias_name())?;
        one(bias_activation(self.kind, h, b)?)
    }
}

impl NodeOp for BiasActivationBackward {
    fn kernel(&self) -> Kernel {
        Kernel::BiasActivationBackward(self.kind)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [gy, h, b] = args(inputs, self.kind.bias_backward_name())?;
        let (gh, gb) = bias_activation_backward(self.kind, gy, h, b)?;
        Ok(vec![Some(gh), Some(gb)])
    }
}

impl NodeOp for BatchNormReluTrain {
    fn kernel(&self) -> Kernel {
        Kernel::BatchNormReLUForwardTraining
    }

    fn workspace_bytes(&self, inputs: &[&ValueInfo], device: DeviceKind) -> u64 {
        workspace_bytes(inputs, device)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [x, w, b, mean, var] = args(inputs, "batch_norm_relu")?;
        let o = batchnorm::batch_norm_relu_train(x, w, b, mean, var, &self.params)?;
        Ok(train_outputs(o))
    }
}

impl NodeOp for BatchNormReluTrainBackward {
    fn kernel(&self) -> Kernel {
        Kernel::BatchNormReLUBackward
    }

    fn workspace_bytes(&self, inputs: &[&ValueInfo], device: DeviceKind) -> u64 {
        workspace_bytes(inputs, device)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [gz, z, x, w, mean, inv_std] = args(inputs, "batch_norm_relu")?;
        let g = batchnorm::batch_norm_relu_train_backward(gz, z, x, w, mean, inv_std)?;
        Ok(grads(g))
    }
}

impl NodeOp for AddRelu {
    fn kernel(&self) -> Kernel {
        Kernel::AddReLU
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        binary(inputs, "add_relu", elementwise::add_relu)
    }
}
