//! Gradient all-reduce: one node per bucket of gradients, made by
//! [`Graph::apply_data_parallel`](crate::Graph::apply_data_parallel) in the Backward
//! phase (never recorded by the builder). Its kernel name says it is communication
//! (`DistAllReduce`).

use std::sync::Arc;

use candle_core::{DType, Tensor};
use wick_ops::{Kernel, OpError};

use crate::dist::Communicator;
use crate::op::{Inputs, KernelResult, NodeOp};

const OP: &str = "dist_all_reduce";

/// The mean over all ranks of a bucket of gradients. in: the bucket's gradients; out:
/// their means, in the same order and shapes.
#[derive(Debug)]
pub struct DistAllReduce {
    /// The ranks to average over.
    pub comm: Arc<dyn Communicator>,
    /// The bucket's number, from 0 in the order buckets become ready.
    pub bucket: usize,
}

impl NodeOp for DistAllReduce {
    fn kernel(&self) -> Kernel {
        Kernel::DistAllReduce
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let mut flat = Vec::new();
        let mut parts = Vec::with_capacity(inputs.len());
        for (i, t) in inputs.iter().enumerate() {
            let t = t.ok_or_else(|| OpError::invalid(OP, format!("gradient {i} is not set")))?;
            if t.dtype() != DType::F32 {
                return Err(OpError::invalid(
                    OP,
                    format!(
                        "bucket {}: gradient {i} is {:?}; the all-reduce takes f32",
                        self.bucket,
                        t.dtype()
                    ),
                ));
            }
            let v = t
                .flatten_all()
                .and_then(|f| f.to_vec1::<f32>())
                .map_err(|e| OpError::invalid(OP, e.to_string()))?;
            parts.push((flat.len(), v.len(), t.dims().to_vec(), t.device().clone()));
            flat.extend_from_slice(&v);
        }
        self.comm.all_reduce_sum(&mut flat).map_err(|e| {
            OpError::invalid(
                OP,
                format!(
                    "bucket {} ({} values) on rank {} of {} ({}): {e}",
                    self.bucket,
                    flat.len(),
                    self.comm.rank(),
                    self.comm.size(),
                    self.comm.engine()
                ),
            )
        })?;
        let scale = 1.0 / self.comm.size() as f32;
        parts
            .into_iter()
            .map(|(at, len, dims, device)| {
                let mean: Vec<f32> = flat[at..at + len].iter().map(|v| v * scale).collect();
                Tensor::from_vec(mean, dims, &device)
                    .map(Some)
                    .map_err(|e| OpError::invalid(OP, e.to_string()))
            })
            .collect()
    }
}
