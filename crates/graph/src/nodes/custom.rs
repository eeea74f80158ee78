//! The public extension point: a user's own [`NodeOp`] recorded into a graph, timed,
//! named and traced like a built-in op. Its kernel is usually a
//! [`Kernel::Custom`](wick_ops::Kernel::Custom) with the user's name, class and phase.

use std::sync::Arc;

use crate::builder::GraphBuilder;
use crate::error::{GraphError, Result};
use candle_core::DType;

use crate::ir::{NodeOp, ValueId};

impl GraphBuilder {
    /// Records a node running `op` on `inputs`, creating `outputs` (name stem, shape,
    /// dtype: the values are named `<stem>#<OP_ID>`; a stem may be a `&str` or an owned
    /// `String`), with `flops` for the roofline. Returns the new values. In the forward
    /// pass, `op`'s [`backward`](NodeOp::backward) rule is asked for gradients like any
    /// built-in op's, whenever any of its outputs has one
    /// ([`BackwardCtx::grad_output`](crate::BackwardCtx::grad_output) gives each).
    ///
    /// The shapes are the caller's promise: the executor checks each output's shape
    /// against them when the node runs, and reports a mismatch naming the op.
    pub fn custom_op<N: AsRef<str>>(
        &mut self,
        op: impl NodeOp + 'static,
        inputs: &[ValueId],
        outputs: Vec<(N, Vec<usize>, DType)>,
        flops: u64,
    ) -> Result<Vec<ValueId>> {
        let name = op.kernel().name(wick_ops::DeviceKind::Cpu);
        if outputs.is_empty() {
            return Err(GraphError::Usage(format!(
                "custom op {name}: it must create at least one output"
            )));
        }
        if let Some(v) = inputs.iter().find(|v| v.0 >= self.graph.values.len()) {
            return Err(GraphError::Usage(format!(
                "custom op {name}: input {v:?} is not a value of this graph"
            )));
        }
        Ok(self.push(Arc::new(op), inputs.to_vec(), outputs, vec![], flops))
    }
}
