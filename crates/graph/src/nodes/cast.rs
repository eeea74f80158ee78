//! Casts between float dtypes, PyTorch's `x.to(dtype)`: recording, backward rule,
//! execution (kernel in `wick_ops::bf16::cast`); and autocast, the precision policy
//! ([`Precision`]) that records them for the products it runs with bfloat16 products.

use std::sync::{Arc, Mutex};

use candle_core::{DType, Tensor, TensorId};
use wick_ops::tensor::TensorKernel;
use wick_ops::{bf16, Kernel};

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::{
    arg, one, BackwardCtx, Graph, Inputs, KernelResult, NodeOp, Precision, ValueId, ValueKind,
};

const OP: &str = "to";

/// `x.to(dtype)`. in: x; out: y of dtype `to`.
#[derive(Debug, Clone, PartialEq)]
pub struct Cast {
    /// The dtype it converts to.
    pub to: DType,
}

/// A cast's gradient, converted to the cast input's dtype. in: grad_y; out: grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct CastBackward {
    /// The cast input's dtype.
    pub to: DType,
}

impl GraphBuilder {
    /// `x.to(dtype)`: `x` converted to the float dtype `dtype` (rounded to nearest, ties
    /// to even, when narrowing); `x` itself when it already has that dtype. Gradients flow
    /// back converted to `x`'s dtype.
    ///
    /// # Examples
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let x = b.input("x", &[2, 8], DType::F32)?;
    /// let w = b.param("fc.weight", &[4, 8])?;
    /// let (xh, wh) = (b.to_dtype(x, DType::BF16)?, b.to_dtype(w, DType::BF16)?);
    /// let y = b.linear(xh, wh, None)?; // bf16 products, f32 sums
    /// assert_eq!(b.dtype(y), DType::F32);
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn to_dtype(&mut self, x: ValueId, dtype: DType) -> Result<ValueId> {
        self.forward_only(OP)?;
        let from = self.dtype_of(x);
        if from == dtype {
            return Ok(x);
        }
        let floats = [DType::F32, DType::BF16, DType::F16, DType::F64];
        if !floats.contains(&from) || !floats.contains(&dtype) {
            return Err(self.build_err(OP)(wick_ops::invalid!(
                OP,
                "casts convert between float dtypes, not {from:?} to {dtype:?}"
            )));
        }
        let new = ("to", self.shape(x).to_vec(), dtype);
        Ok(self.push_one(Arc::new(Cast { to: dtype }), vec![x], new, 0))
    }
}

impl NodeOp for Cast {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::Cast)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        one(bf16::cast(arg(inputs, 0, OP)?, self.to)?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let x = ctx.input(0);
        let to = ctx.value_dtype(x);
        // Gradients of low-precision values are float32 already (the products' kernels
        // give float32 gradients): they pass through unchanged.
        if ctx.value_dtype(gy) == to {
            ctx.contribute(x, gy);
            return Ok(());
        }
        let g = ctx.record(
            CastBackward { to },
            vec![gy],
            vec![("grad.to", ctx.shape(x), to)],
            0,
        );
        ctx.contribute(x, g[0]);
        Ok(())
    }
}

impl NodeOp for CastBackward {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::CastBackward)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        one(bf16::cast(arg(inputs, 0, OP)?, self.to)?)
    }
}

/// A cast of a parameter or state that no node of its graph writes (an inference
/// graph's weights, a frozen layer's): converted once and kept until the executor's `set`
/// replaces the input, which makes a new tensor with a new id. PyTorch's autocast keeps
/// its weight casts the same way. Made by [`keep_constant_casts`]. in: x; out: y.
#[derive(Debug)]
pub(crate) struct KeptCast {
    from: DType,
    to: DType,
    kept: Mutex<Option<(TensorId, Tensor)>>,
}

impl NodeOp for KeptCast {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::Cast)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let x = arg(inputs, 0, OP)?;
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, y)) = kept.as_ref().filter(|(id, _)| *id == x.id()) {
            return one(y.clone());
        }
        let y = bf16::cast(x, self.to)?;
        *kept = Some((x.id(), y.clone()));
        one(y)
    }

    /// After its first run it hands out what it kept.
    fn moves_data(&self) -> bool {
        false
    }

    /// The kept output, between iterations. (The memory plan also counts it as the
    /// node's output while that is live: one weight's copy, counted twice for a node or
    /// two.)
    fn held_bytes(&self, input_bytes: &[u64]) -> u64 {
        let elements = input_bytes.first().copied().unwrap_or(0) / self.from.size_in_bytes() as u64;
        elements * self.to.size_in_bytes() as u64
    }
}

/// Makes each cast of a parameter, state or constant that no node writes (`writers`: the graph's
/// [`first_writers`](Graph::first_writers)) a [`KeptCast`]: under autocast, an inference
/// graph then casts its weights in its first run only.
pub(crate) fn keep_constant_casts(graph: &mut Graph, writers: &[Option<usize>]) {
    for n in &mut graph.nodes {
        let Some(cast) = n.op_as::<Cast>() else {
            continue;
        };
        let x = &graph.values[n.inputs[0].0];
        let fixed = matches!(
            x.kind,
            ValueKind::Param | ValueKind::State | ValueKind::Constant
        );
        if fixed && writers[n.inputs[0].0].is_none() {
            n.op = Arc::new(KeptCast {
                from: x.dtype,
                to: cast.to,
                kept: Mutex::new(None),
            });
        }
    }
}

impl GraphBuilder {
    /// Sets the precision policy for the products recorded from now on (before the
    /// forward pass, normally).
    ///
    /// # Examples
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode, Precision};
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// b.set_precision(Precision::Bf16Autocast);
    /// let x = b.input("x", &[2, 8], DType::F32)?;
    /// let w = b.param("fc.weight", &[4, 8])?;
    /// let y = b.linear(x, w, None)?;
    /// assert_eq!(b.dtype(y), DType::F32); // bf16 products, f32 output
    /// let g = b.finish();
    /// let casts = g.nodes().iter().filter(|n| n.op.kernel().name(wick_ops::DeviceKind::Cpu) == "Cast");
    /// assert_eq!(casts.count(), 1); // the weight's: the input is rounded in the product
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn set_precision(&mut self, precision: Precision) {
        self.autocast.precision = precision;
    }

    /// The precision policy in force.
    pub fn precision(&self) -> Precision {
        self.autocast.precision
    }

    /// `v` as the policy's products read it: cast to the low dtype (once per value) when
    /// the policy has one and `v` is float32; `v` itself otherwise.
    pub(crate) fn autocast(&mut self, v: ValueId) -> Result<ValueId> {
        let Some(low) = self.autocast.precision.low_dtype() else {
            return Ok(v);
        };
        if self.dtype_of(v) != DType::F32 {
            return Ok(v);
        }
        if let Some(&cast) = self.autocast.casts.get(&v) {
            return Ok(cast);
        }
        let cast = self.to_dtype(v, low)?;
        self.autocast.casts.insert(v, cast);
        Ok(cast)
    }
}
