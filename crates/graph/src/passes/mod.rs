//! Graph passes: rewrites of a recorded graph before it runs, Paddle-style. Each pass
//! matches subgraphs by pattern and replaces each with one fused node, and reports how
//! many it matched:
//!
//! ```text
//! --- Running IR pass [fold_batch_norm] --- detected 53 subgraphs
//! ```
//!
//! OP_IDs are the node indices after the passes. Inference passes:
//! - [`fold_batch_norm`](PassName::FoldBatchNorm): an inference batch norm after a
//!   bias-free convolution becomes that convolution's weights and bias (exact algebra,
//!   rounded once);
//! - [`conv_epilogue`](PassName::ConvEpilogue): the residual add and the ReLU after a
//!   fused convolution are applied as it writes its output;
//! - [`max_pool_values`](PassName::MaxPoolValues): a max pooling whose argmax indices
//!   nothing reads computes its values alone.
//!
//! Training passes (the same arithmetic as the unfused graph, bit for bit):
//! - [`batch_norm_relu`](PassName::BatchNormRelu): batch norm + ReLU forward in one
//!   output pass, and their backward with ReLU's mask read inside batch norm's;
//! - [`add_relu`](PassName::AddRelu): add + ReLU in one pass;
//! - [`bias_activation`](PassName::BiasActivation): a bias add + GELU (or SiLU) in one
//!   pass, forward and backward (the bias's gradient included);
//! - [`multi_tensor_update`](PassName::MultiTensorUpdate): the SGD (or Adam) updates
//!   with equal settings as one node, one launch on CUDA (not in `default` on the CPU: it merges the
//!   per-layer optimizer rows).
//!
//! Each pass leaves a graph it has no pattern in as recorded.

mod add_relu;
mod batch_norm_relu;
mod bias_activation;
mod conv_epilogue;
pub mod data_parallel;
mod fold_batch_norm;
mod max_pool_values;
pub mod multi_tensor_update;
mod rewrite;

use crate::ir::Graph;
pub use crate::ir::{PassName, PassRecord, PassSet};

/// Runs `pass` over `graph`; returns the number of subgraphs it replaced.
fn run(pass: PassName, graph: &mut Graph) -> usize {
    match pass {
        PassName::FoldBatchNorm => fold_batch_norm::run(graph),
        PassName::ConvEpilogue => conv_epilogue::run(graph),
        PassName::MaxPoolValues => max_pool_values::run(graph),
        PassName::BatchNormRelu => batch_norm_relu::run(graph),
        PassName::AddRelu => add_relu::run(graph),
        PassName::BiasActivation => bias_activation::run(graph),
        PassName::MultiTensorUpdate => multi_tensor_update::run(graph),
    }
}

impl Graph {
    /// Runs the selected passes in pipeline order, logs each (`tracing`, info) and keeps
    /// their records ([`Graph::passes`]). Nodes are renumbered: OP_IDs are assigned after
    /// the passes.
    pub fn apply_passes(&mut self, set: PassSet) -> &[PassRecord] {
        for pass in set.passes() {
            let subgraphs = run(pass, self);
            let record = PassRecord { pass, subgraphs };
            tracing::info!("{record}");
            self.passes.push(record);
        }
        &self.passes
    }

    /// The passes that ran on this graph, in order.
    pub fn passes(&self) -> &[PassRecord] {
        &self.passes
    }
}
