//! SGD's fused update node (kernels in `wick_ops::optim`); the optimizer phase that
//! records it is in `optimizer.rs`.

use wick_ops::{optim, Kernel, SgdParams};

use crate::ir::{args, Inputs, KernelResult, NodeOp};

/// One parameter's fused SGD update. in: param, grad, `[momentum_buf]`; out: the param
/// and (with momentum) the momentum buffer, updated in place.
#[derive(Debug, Clone, PartialEq)]
pub struct SgdUpdate {
    /// lr, momentum, weight decay, dampening, nesterov.
    pub params: SgdParams,
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
