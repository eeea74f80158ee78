//! The SGD optimizer pass: one fused update node per parameter (kernels in
//! `wick_ops::optim`).

use std::sync::Arc;

use wick_ops::{optim, Kernel, SgdParams};

use crate::autodiff::Gradients;
use crate::builder::GraphBuilder;
use crate::error::{GraphError, Result};
use crate::ir::{args, Inputs, KernelResult, NodeOp};
use crate::ir::{Origin, Phase, ValueKind};

/// One parameter's fused SGD update. in: param, grad, `[momentum_buf]`; out: the param
/// and (with momentum) the momentum buffer, updated in place.
#[derive(Debug, Clone, PartialEq)]
pub struct SgdUpdate {
    /// lr, momentum, weight decay, dampening, nesterov.
    pub params: SgdParams,
}

impl GraphBuilder {
    /// Appends one fused SGD update per parameter that has a gradient, in parameter
    /// creation order. With momentum, each parameter gets a state value
    /// `<name>.momentum_buffer`, empty until the first step.
    pub fn sgd(&mut self, grads: &Gradients, p: SgdParams) -> Result<()> {
        p.validate().map_err(self.build_err("sgd"))?;
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
            let op = Arc::new(SgdUpdate { params: p });
            self.origin = Origin {
                layer: crate::autodiff::param_layer(&info.name),
                forward_op: None,
                parameter: Some(info.name.clone()),
            };
            self.push(op, inputs, vec![], updated, flops);
        }
        self.origin = Origin::default();
        Ok(())
    }
}

impl NodeOp for SgdUpdate {
    fn kernel(&self) -> Kernel {
        Kernel::SgdUpdate
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        // Parameters and buffers are owned by the executor (copied in by `set`), so the
        // CPU kernel may update them in place.
        let [param, grad] = args(inputs, "sgd")?;
        let buf = inputs.get(2).copied().flatten();
        let (p, b) = optim::sgd_step_in_place(param, grad, buf, &self.params)?;
        Ok(if inputs.len() > 2 {
            vec![Some(p), b]
        } else {
            vec![Some(p)]
        })
    }

    /// The momentum buffer is empty before the first step.
    fn optional_input(&self, i: usize) -> bool {
        i == 2
    }
}
