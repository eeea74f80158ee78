//! Batch norm: recording (training or inference by the builder's mode), backward rules,
//! execution (kernels in `wick_ops::batchnorm`).

use std::sync::Arc;

use wick_ops::batchnorm::{self, BatchNorm2dParams, BatchNormGrads};
use wick_ops::{DeviceKind, Kernel};

use crate::builder::{GraphBuilder, Mode};
use crate::error::{GraphError, Result};
use crate::ir::{args, one, BackwardCtx, Inputs, KernelResult, NodeOp, Outputs};
use crate::ir::{ValueId, ValueInfo, ValueKind};

const OP: &str = "batch_norm";

/// Batch norm forward with batch statistics. in: x, weight, bias, running_mean,
/// running_var; out: y, mean, inv_std, and the running_mean and running_var state values,
/// updated.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchNormTrain {
    /// eps and momentum.
    pub params: BatchNorm2dParams,
}

/// Batch norm forward with running statistics. in: x, weight, bias, running_mean,
/// running_var; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchNormEval {
    /// eps (momentum unused).
    pub params: BatchNorm2dParams,
}

/// Backward of [`BatchNormTrain`]. in: grad_y, x, weight, mean, inv_std; out: grad_x,
/// grad_weight, grad_bias.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchNormTrainBackward;

/// Backward of [`BatchNormEval`]. in: grad_y, x, weight, running_mean, running_var; out:
/// grad_x, grad_weight, grad_bias.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchNormEvalBackward {
    /// eps.
    pub params: BatchNorm2dParams,
}

impl GraphBuilder {
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
        self.forward_only(OP)?;
        let xs = self.shape(x).to_vec();
        let channel: Vec<(&str, &[usize])> = vec![
            ("weight", self.shape(weight)),
            ("bias", self.shape(bias)),
            ("running_mean", self.shape(running_mean)),
            ("running_var", self.shape(running_var)),
        ];
        p.output_shape(&xs, &channel).map_err(self.build_err(OP))?;
        if self.module_mode() == Mode::Train {
            p.check_training_input(&xs).map_err(self.build_err(OP))?;
        }
        for (v, what) in [(running_mean, "running_mean"), (running_var, "running_var")] {
            if self.graph.values[v.0].kind != ValueKind::State {
                return Err(GraphError::Usage(format!(
                    "batch_norm: {what} `{}` must be a state value (GraphBuilder::state)",
                    self.graph.values[v.0].name
                )));
            }
        }
        let (c, dt) = (xs[1], self.dtype_of(x));
        let inputs = vec![x, weight, bias, running_mean, running_var];
        let flops = p.flops(&xs);
        let outputs = match self.module_mode() {
            Mode::Train => self.push(
                Arc::new(BatchNormTrain { params: p }),
                inputs,
                vec![
                    ("bn", xs, dt),
                    ("bn.mean", vec![c], dt),
                    ("bn.inv_std", vec![c], dt),
                ],
                vec![running_mean, running_var],
                flops,
            ),
            Mode::Eval => self.push(
                Arc::new(BatchNormEval { params: p }),
                inputs,
                vec![("bn", xs, dt)],
                vec![],
                flops,
            ),
        };
        Ok(outputs[0])
    }
}

/// Records a batch norm backward node reading `inputs`, and hands its three gradients to
/// the forward node's x, weight and bias.
fn record_backward(
    ctx: &mut BackwardCtx<'_>,
    op: impl NodeOp,
    inputs: Vec<ValueId>,
    params: &BatchNorm2dParams,
) -> Result<()> {
    let (xs, cs) = (ctx.shape(ctx.input(0)), ctx.shape(ctx.input(1)));
    let dt = ctx.dtype();
    let flops = params.backward_flops(&xs);
    let outs = vec![
        ("grad.bn.x", xs, dt),
        ("grad.bn.weight", cs.clone(), dt),
        ("grad.bn.bias", cs, dt),
    ];
    let g = ctx.record(op, inputs, outs, flops);
    ctx.contribute_to_inputs(&g);
    Ok(())
}

/// The CUDA workspace of a training batch norm node, forward or backward, whose input 0
/// has the input's NCHW shape (x, or the output gradient).
pub(crate) fn workspace_bytes(inputs: &[&ValueInfo], device: DeviceKind) -> u64 {
    inputs.first().map_or(0, |x| {
        wick_ops::gpu::batch_norm_workspace_bytes(device, &x.shape, x.dtype)
    })
}

/// A training-mode forward's outputs in node order: y, mean, inv_std, running stats.
pub(crate) fn train_outputs(o: batchnorm::BatchNormOutput) -> Outputs {
    vec![
        Some(o.y),
        Some(o.mean),
        Some(o.inv_std),
        Some(o.running_mean),
        Some(o.running_var),
    ]
}

/// A backward's gradients in node order: x, weight, bias.
pub(crate) fn grads(g: BatchNormGrads) -> Outputs {
    vec![Some(g.x), Some(g.weight), Some(g.bias)]
}

impl NodeOp for BatchNormTrain {
    fn kernel(&self) -> Kernel {
        Kernel::BatchNormForwardTraining
    }

    fn workspace_bytes(&self, inputs: &[&ValueInfo], device: DeviceKind) -> u64 {
        workspace_bytes(inputs, device)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [x, w, b, mean, var] = args(inputs, OP)?;
        let o = batchnorm::batch_norm_train(x, w, b, mean, var, &self.params)?;
        Ok(train_outputs(o))
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let inputs = vec![gy, ctx.input(0), ctx.input(1), ctx.output(1), ctx.output(2)];
        record_backward(ctx, BatchNormTrainBackward, inputs, &self.params)
    }
}

impl NodeOp for BatchNormEval {
    fn kernel(&self) -> Kernel {
        Kernel::BatchNormForwardInference
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [x, w, b, mean, var] = args(inputs, OP)?;
        let y = batchnorm::batch_norm_eval(x, w, b, mean, var, &self.params)?;
        one(y)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let inputs = vec![gy, ctx.input(0), ctx.input(1), ctx.input(3), ctx.input(4)];
        let op = BatchNormEvalBackward {
            params: self.params,
        };
        record_backward(ctx, op, inputs, &self.params)
    }
}

impl NodeOp for BatchNormTrainBackward {
    fn kernel(&self) -> Kernel {
        Kernel::BatchNormBackward
    }

    fn workspace_bytes(&self, inputs: &[&ValueInfo], device: DeviceKind) -> u64 {
        workspace_bytes(inputs, device)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [gy, x, w, mean, inv_std] = args(inputs, OP)?;
        let g = batchnorm::batch_norm_train_backward(gy, x, w, mean, inv_std)?;
        Ok(grads(g))
    }
}

impl NodeOp for BatchNormEvalBackward {
    fn kernel(&self) -> Kernel {
        Kernel::BatchNormBackward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [gy, x, w, mean, var] = args(inputs, OP)?;
        let g = batchnorm::batch_norm_eval_backward(gy, x, w, mean, var, &self.params)?;
        Ok(grads(g))
    }
}
