//! Dropout: recording (train graphs only; identity in eval graphs), backward rule,
//! execution (kernels in `wick_ops::dropout`). The mask depends on the node's seed and the
//! graph input `step`, so a resumed run draws the masks the uninterrupted run would have.

use std::sync::Arc;

use candle_core::DType;
use wick_ops::{dropout, Kernel};

use crate::builder::{GraphBuilder, Mode};
use crate::error::Result;
use crate::ir::{arg, args, one, BackwardCtx, Inputs, KernelResult, NodeOp, ValueId, ValueKind};

/// The name of the graph input that counts the training steps done before the current
/// one (0-dim, i64): dropout masks and Adam's bias corrections read it.
pub const STEP_INPUT: &str = "step";

/// Dropout. in: x, step; out: y, mask (the kept elements scaled by `1 / (1 - p)`; one
/// value per sample, broadcast, for stochastic depth).
#[derive(Debug, Clone, PartialEq)]
pub struct Dropout {
    /// The probability of dropping an element (or a sample).
    pub p: f64,
    /// The node's seed (the builder's seed mixed with the OP_ID).
    pub seed: u64,
    /// The mask's shape: the input's, or `[N, 1, ...]` for stochastic depth.
    pub mask_shape: Vec<usize>,
}

/// Its gradient. in: grad_y, mask; out: grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct DropoutBackward;

impl GraphBuilder {
    /// The graph input [`STEP_INPUT`] (created on first use): the number of training steps
    /// done before this one, fed by the caller before each run (`Session` does). It stays
    /// on the host, so kernels read it without a device synchronisation.
    pub fn step_counter(&mut self) -> Result<ValueId> {
        match self.graph.find(STEP_INPUT) {
            Some(v) if self.graph.values[v.0].kind == ValueKind::Input => Ok(v),
            Some(_) => Err(crate::error::GraphError::Usage(format!(
                "a value named `{STEP_INPUT}` already exists and is not the step counter"
            ))),
            None => Ok(self.value(STEP_INPUT.into(), vec![], DType::I64, ValueKind::Input)),
        }
    }

    /// Sets the seed that dropout nodes recorded from now on derive theirs from (default 0).
    pub fn set_seed(&mut self, seed: u64) {
        self.seed = seed;
    }

    /// Dropout with drop probability `p`: in a training graph each element is zeroed with
    /// probability `p` and the rest scaled by `1 / (1 - p)`; in an eval graph, and for
    /// `p = 0`, `x` itself (no node).
    pub fn dropout(&mut self, x: ValueId, p: f64) -> Result<ValueId> {
        let shape = self.shape(x).to_vec();
        self.record_dropout(x, p, shape)
    }

    /// Stochastic depth in torchvision's "row" mode: in a training graph each sample of
    /// the batch is zeroed with probability `p` and the rest scaled by `1 / (1 - p)`; in an
    /// eval graph, and for `p = 0`, `x` itself (no node).
    pub fn stochastic_depth(&mut self, x: ValueId, p: f64) -> Result<ValueId> {
        let mut shape = self.shape(x).to_vec();
        shape.iter_mut().skip(1).for_each(|d| *d = 1);
        self.record_dropout(x, p, shape)
    }

    fn record_dropout(&mut self, x: ValueId, p: f64, mask_shape: Vec<usize>) -> Result<ValueId> {
        self.forward_only("dropout")?;
        dropout::check_probability(p).map_err(self.build_err("dropout"))?;
        if self.module_mode() == Mode::Eval || p == 0.0 {
            return Ok(x);
        }
        let step = self.step_counter()?;
        let xs = self.shape(x).to_vec();
        let seed = self.seed ^ (self.graph.nodes.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let flops = wick_ops::shape::flop_count(1, &xs);
        let dt = self.dtype_of(x);
        let new = vec![
            ("dropout", xs, dt),
            ("dropout.mask", mask_shape.clone(), dt),
        ];
        let op = Dropout {
            p,
            seed,
            mask_shape,
        };
        Ok(self.push(Arc::new(op), vec![x, step], new, vec![], flops)[0])
    }
}

impl NodeOp for Dropout {
    fn kernel(&self) -> Kernel {
        Kernel::Dropout
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [x, step] = args(inputs, "dropout")?;
        let step = dropout::read_step(step)?;
        let (y, mask) = dropout::dropout(x, &self.mask_shape, self.p, self.seed, step)?;
        Ok(vec![Some(y), Some(mask)])
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let xs = ctx.shape(ctx.input(0));
        let flops = wick_ops::shape::flop_count(1, &xs);
        let inputs = vec![gy, ctx.output(1)];
        ctx.record_grad_of(ctx.input(0), DropoutBackward, inputs, "grad.dropout", flops);
        Ok(())
    }
}

impl NodeOp for DropoutBackward {
    fn kernel(&self) -> Kernel {
        Kernel::DropoutBackward
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        one(dropout::dropout_backward(
            arg(inputs, 0, "dropout")?,
            arg(inputs, 1, "dropout")?,
        )?)
    }
}
