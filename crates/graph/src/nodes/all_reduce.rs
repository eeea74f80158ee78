//! Gradient all-reduce: per bucket of gradients, a [`DistAllReduce`] node that starts
//! the bucket's sum over the ranks on the communication thread, and a [`DistWait`] node
//! that waits for it and hands the optimizer the means. Both are made by
//! [`Graph::apply_data_parallel`](crate::Graph::apply_data_parallel) in the Backward
//! phase (never recorded by the builder); their kernel names say they are communication.

use std::sync::Arc;

use candle_core::{DType, Tensor};
use wick_ops::{Kernel, OpError};

use crate::collective::CommQueue;
use crate::ir::{Inputs, KernelResult, NodeOp};

const OP: &str = "dist_all_reduce";

/// Starts the sum over all ranks of a bucket of gradients, right after backward produces
/// its last one; the rest of backward runs while the engine works. in: the bucket's
/// gradients; no outputs ([`DistWait`] gives the means).
#[derive(Debug)]
pub struct DistAllReduce {
    /// The graph's collectives, in order.
    pub queue: Arc<CommQueue>,
    /// The bucket's number, from 0 in the order buckets become ready.
    pub bucket: usize,
}

/// Waits for a bucket's [`DistAllReduce`] and divides by the number of ranks: its time
/// is the communication that computation did not hide. in: the bucket's gradients (for
/// their shapes); out: their means, in the same order and shapes.
#[derive(Debug)]
pub struct DistWait {
    /// The graph's collectives, in order.
    pub queue: Arc<CommQueue>,
    /// The bucket's number.
    pub bucket: usize,
}

/// The bucket's gradients as one f32 buffer.
fn flatten(inputs: &Inputs<'_>, bucket: usize) -> Result<Vec<f32>, OpError> {
    let mut flat = Vec::new();
    for (i, t) in inputs.iter().enumerate() {
        let t = t.ok_or_else(|| wick_ops::invalid!(OP, "gradient {i} is not set"))?;
        if t.dtype() != DType::F32 {
            return Err(wick_ops::invalid!(
                OP,
                "bucket {bucket}: gradient {i} is {:?}; the all-reduce takes f32",
                t.dtype()
            ));
        }
        let v = t
            .flatten_all()
            .and_then(|f| f.to_vec1::<f32>())
            .map_err(|e| OpError::invalid(OP, e.to_string()))?;
        flat.extend_from_slice(&v);
    }
    Ok(flat)
}

impl DistAllReduce {
    fn failed(&self, values: usize, e: String) -> OpError {
        wick_ops::invalid!(
            OP,
            "bucket {} ({values} values) on {}: {e}",
            self.bucket,
            self.queue.who()
        )
    }
}

impl NodeOp for DistAllReduce {
    fn kernel(&self) -> Kernel {
        Kernel::DistAllReduce
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let flat = flatten(inputs, self.bucket)?;
        let n = flat.len();
        self.queue
            .start_bucket(self.bucket, flat)
            .map_err(|e| self.failed(n, e))?;
        Ok(Vec::new())
    }
}

impl NodeOp for DistWait {
    fn kernel(&self) -> Kernel {
        Kernel::DistWait
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let sum = self.queue.finish_bucket(self.bucket).map_err(|e| {
            wick_ops::invalid!(
                "dist_wait",
                "DistAllReduce of bucket {} on {}: {e}",
                self.bucket,
                self.queue.who()
            )
        })?;
        let scale = 1.0 / self.queue.comm().size() as f32;
        let mut at = 0;
        inputs
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let t = t.ok_or_else(|| wick_ops::invalid!(OP, "gradient {i} is not set"))?;
                let len = t.elem_count();
                let part = sum.get(at..at + len).ok_or_else(|| {
                    wick_ops::invalid!(
                        OP,
                        "bucket {}: the engine returned {} values",
                        self.bucket,
                        sum.len()
                    )
                })?;
                at += len;
                let mean: Vec<f32> = part.iter().map(|v| v * scale).collect();
                Tensor::from_vec(mean, t.dims(), t.device())
                    .map(Some)
                    .map_err(|e| OpError::invalid(OP, e.to_string()))
            })
            .collect()
    }
}
