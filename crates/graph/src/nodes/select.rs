//! Slicing and joining (`narrow`, `expand`, `unsqueeze`, `squeeze`, `stack`; `split`
//! and `chunk` are in [`split`](super::split)) and selection by index (`index_select`, `gather`, `embedding`): recording,
//! backward rules, execution (kernels in `wick_ops::tensor::select`).

use std::sync::Arc;

use wick_ops::tensor::select::{self as kernels, check_index_dtype};
use wick_ops::tensor::{dim_index, TensorKernel};
use wick_ops::{broadcast, Kernel, OpError};

use crate::builder::GraphBuilder;
use crate::error::Result;
use crate::ir::{arg, args, one, BackwardCtx, Inputs, KernelResult, NodeOp, ValueId};

/// A range along one dimension, copied. in: x; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct Narrow {
    /// The dimension.
    pub dim: usize,
    /// Where the range starts.
    pub start: usize,
    /// Its length.
    pub len: usize,
}

/// `narrow`'s gradient. in: grad_y; out: grad_x (zeros outside the range).
#[derive(Debug, Clone, PartialEq)]
pub struct NarrowBackward {
    /// The forward's settings.
    pub narrow: Narrow,
    /// The input's shape.
    pub shape: Vec<usize>,
}

/// `x` broadcast to a larger shape, copied. in: x; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct Expand {
    /// The output shape.
    pub shape: Vec<usize>,
}

/// `expand`'s gradient: the sum over the expanded dimensions. in: grad_y; out: grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpandBackward {
    /// The input's shape.
    pub shape: Vec<usize>,
}

/// Selection by index: `index_select` (along `dim`, 1-D indices), `gather` (along `dim`,
/// indices of the input's rank) or `embedding` (rows of a weight). in: x (the weight for
/// embedding), indices; out: y.
#[derive(Debug, Clone, PartialEq)]
pub struct Select {
    /// Which selection.
    pub kind: SelectKind,
}

/// Which selection by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectKind {
    /// `index_select(x, dim, index)`.
    IndexSelect {
        /// The dimension.
        dim: usize,
    },
    /// `gather(x, dim, index)`.
    Gather {
        /// The dimension.
        dim: usize,
    },
    /// `embedding(indices, weight, padding_idx)`.
    Embedding {
        /// The row that gets no gradient.
        padding_idx: Option<usize>,
    },
}

/// A selection's gradient, a scatter-add into zeros. in: grad_y, indices; out: grad_x.
#[derive(Debug, Clone, PartialEq)]
pub struct SelectBackward {
    /// Which selection.
    pub kind: SelectKind,
    /// The input's (or weight's) shape.
    pub shape: Vec<usize>,
}

impl GraphBuilder {
    /// `torch.narrow(x, dim, start, length)`: `length` entries from `start` along `dim`.
    pub fn narrow(
        &mut self,
        x: ValueId,
        dim: isize,
        start: usize,
        length: usize,
    ) -> Result<ValueId> {
        self.forward_only("narrow")?;
        let xs = self.shape(x).to_vec();
        let d = dim_index("narrow", xs.len(), dim).map_err(self.build_err("narrow"))?;
        let out = kernels::narrow_shape(&xs, d, start, length).map_err(self.build_err("narrow"))?;
        let op = Narrow {
            dim: d,
            start,
            len: length,
        };
        let new = vec![("narrow", out, self.dtype_of(x))];
        Ok(self.push(Arc::new(op), vec![x], new, vec![], 0)[0])
    }

    /// `x.expand(sizes)`: dimensions of size 1 repeated, new ones in front; `-1` keeps a
    /// size (the ViT's class token: `[1, 1, C]` to `[N, 1, C]`).
    ///
    /// # Examples
    ///
    /// The ViT's class token joined to the patch embeddings:
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let patches = b.input("patches", &[8, 16, 64], DType::F32)?;
    /// let cls = b.param("class_token", &[1, 1, 64])?;
    /// let cls = b.expand(cls, &[8, -1, -1])?;
    /// let tokens = b.concat(&[cls, patches], 1)?;
    /// assert_eq!(b.shape(tokens), &[8, 17, 64]);
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn expand(&mut self, x: ValueId, sizes: &[isize]) -> Result<ValueId> {
        self.forward_only("expand")?;
        let out = kernels::expand_shape(self.shape(x), sizes).map_err(self.build_err("expand"))?;
        let new = vec![("expand", out.clone(), self.dtype_of(x))];
        Ok(self.push(Arc::new(Expand { shape: out }), vec![x], new, vec![], 0)[0])
    }

    /// `torch.unsqueeze(x, dim)`: a dimension of size 1 inserted at `dim` (`-1`: last).
    ///
    /// # Examples
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let x = b.input("x", &[4, 10], DType::F32)?;
    /// let y = b.unsqueeze(x, -1)?;
    /// assert_eq!(b.shape(y), &[4, 10, 1]);
    /// let z = b.squeeze(y, 2)?;
    /// assert_eq!(b.shape(z), &[4, 10]);
    /// assert_eq!(b.squeeze(z, 0)?, z); // a dimension that is not 1 stays
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn unsqueeze(&mut self, x: ValueId, dim: isize) -> Result<ValueId> {
        let mut s = self.shape(x).to_vec();
        let d = dim_index("unsqueeze", s.len() + 1, dim).map_err(self.build_err("unsqueeze"))?;
        s.insert(d, 1);
        self.reshape(x, &s)
    }

    /// `torch.squeeze(x, dim)`: dimension `dim` removed if its size is 1 (else `x`
    /// unchanged, as PyTorch's).
    pub fn squeeze(&mut self, x: ValueId, dim: isize) -> Result<ValueId> {
        let mut s = self.shape(x).to_vec();
        let d = dim_index("squeeze", s.len(), dim).map_err(self.build_err("squeeze"))?;
        if s[d] != 1 {
            return Ok(x);
        }
        s.remove(d);
        self.reshape(x, &s)
    }

    /// `torch.stack(parts, dim)`: the parts (one shape) joined along a new dimension.
    ///
    /// # Examples
    ///
    /// An RNN's hidden states, one `[N, H]` per step, as one `[N, T, H]` sequence:
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let steps: Vec<_> = (0..5)
    ///     .map(|t| b.input(&format!("h{t}"), &[4, 8], DType::F32))
    ///     .collect::<Result<_, _>>()?;
    /// let seq = b.stack(&steps, 1)?;
    /// assert_eq!(b.shape(seq), &[4, 5, 8]);
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn stack(&mut self, parts: &[ValueId], dim: isize) -> Result<ValueId> {
        let Some(first) = parts.first() else {
            return Err(self.build_err("stack")(OpError::invalid(
                "stack",
                "needs at least one part",
            )));
        };
        let rank = self.shape(*first).len();
        let d = dim_index("stack", rank + 1, dim).map_err(self.build_err("stack"))?;
        let lifted = parts
            .iter()
            .map(|p| self.unsqueeze(*p, d as isize))
            .collect::<Result<Vec<_>>>()?;
        self.concat(&lifted, d)
    }

    /// `torch.index_select(x, dim, index)` with `index` 1-D integers.
    ///
    /// # Examples
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let table = b.param("table", &[10, 4])?;
    /// let rows = b.input("rows", &[3], DType::I64)?;
    /// let picked = b.index_select(table, 0, rows)?;
    /// assert_eq!(b.shape(picked), &[3, 4]);
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn index_select(&mut self, x: ValueId, dim: isize, index: ValueId) -> Result<ValueId> {
        let xs = self.shape(x).to_vec();
        let d = dim_index("index_select", xs.len(), dim).map_err(self.build_err("index_select"))?;
        let is = self.shape(index).to_vec();
        if is.len() != 1 {
            return Err(self.build_err("index_select")(wick_ops::invalid!(
                "index_select",
                "the index must be 1-D, got shape {is:?}"
            )));
        }
        let mut out = xs;
        out[d] = is[0];
        self.record_select(SelectKind::IndexSelect { dim: d }, x, index, out)
    }

    /// `torch.gather(x, dim, index)`: `y[i][j] = x[i][index[i][j]]` along `dim`.
    ///
    /// # Examples
    ///
    /// Each row's log-probability of its own target:
    ///
    /// ```
    /// use candle_core::{DType, Device, Tensor};
    /// use wick_graph::{Executor, GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Eval, DType::F32);
    /// let logp = b.input("logp", &[2, 3], DType::F32)?;
    /// let target = b.input("target", &[2, 1], DType::I64)?;
    /// let picked = b.gather(logp, 1, target)?;
    /// b.output(picked);
    /// let mut exec = Executor::new(b.finish(), &Device::Cpu);
    /// exec.set("logp", &Tensor::new(&[[-1f32, -2., -3.], [-4., -5., -6.]], &Device::Cpu)?)?;
    /// exec.set("target", &Tensor::new(&[[2i64], [0]], &Device::Cpu)?)?;
    /// exec.run()?;
    /// assert_eq!(exec.value(picked)?.to_vec2::<f32>()?, [[-3.0], [-4.0]]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn gather(&mut self, x: ValueId, dim: isize, index: ValueId) -> Result<ValueId> {
        let (d, out) = kernels::gather_shape(self.shape(x), dim, self.shape(index))
            .map_err(self.build_err("gather"))?;
        self.record_select(SelectKind::Gather { dim: d }, x, index, out)
    }

    /// `F.embedding(indices, weight, padding_idx)`: row `i` of `weight`
    /// `[num_embeddings, dim]` for each index; the row `padding_idx` gets no gradient.
    ///
    /// # Examples
    ///
    /// Token and position embeddings of a GPT:
    ///
    /// ```
    /// use candle_core::DType;
    /// use wick_graph::{GraphBuilder, Mode};
    ///
    /// let mut b = GraphBuilder::new(Mode::Train, DType::F32);
    /// let tokens = b.input("tokens", &[4, 32], DType::I64)?;
    /// let wte = b.param("wte.weight", &[65, 128])?;
    /// let x = b.embedding(tokens, wte, None)?;
    /// assert_eq!(b.shape(x), &[4, 32, 128]);
    /// # Ok::<(), wick_graph::GraphError>(())
    /// ```
    pub fn embedding(
        &mut self,
        indices: ValueId,
        weight: ValueId,
        padding_idx: Option<usize>,
    ) -> Result<ValueId> {
        let ws = self.shape(weight).to_vec();
        let out = kernels::embedding_shape(self.shape(indices), &ws)
            .map_err(self.build_err("embedding"))?;
        if let Some(p) = padding_idx.filter(|&p| p >= ws[0]) {
            return Err(self.build_err("embedding")(wick_ops::invalid!(
                "embedding",
                "padding_idx {p} is out of range for {} embeddings",
                ws[0]
            )));
        }
        self.record_select(SelectKind::Embedding { padding_idx }, weight, indices, out)
    }

    fn record_select(
        &mut self,
        kind: SelectKind,
        x: ValueId,
        index: ValueId,
        out: Vec<usize>,
    ) -> Result<ValueId> {
        let name = kind.name();
        self.forward_only(name)?;
        check_index_dtype(name, "the indices", self.dtype_of(index))
            .map_err(self.build_err(name))?;
        let new = (name, out, self.dtype_of(x));
        Ok(self.push_one(Arc::new(Select { kind }), vec![x, index], new, 0))
    }
}

impl SelectKind {
    /// The builder call's name.
    pub fn name(self) -> &'static str {
        match self {
            SelectKind::IndexSelect { .. } => "index_select",
            SelectKind::Gather { .. } => "gather",
            SelectKind::Embedding { .. } => "embedding",
        }
    }
}

impl NodeOp for Narrow {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::Narrow)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        one(kernels::narrow(
            arg(inputs, 0, "narrow")?,
            self.dim,
            self.start,
            self.len,
        )?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let xs = ctx.shape(ctx.input(0));
        let op = NarrowBackward {
            narrow: self.clone(),
            shape: xs.clone(),
        };
        ctx.record_input_grad(op, vec![gy], "grad.narrow", 0)
    }
}

impl NodeOp for NarrowBackward {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::NarrowBackward)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let gy = arg(inputs, 0, "narrow")?;
        one(kernels::narrow_backward(
            gy,
            &self.shape,
            self.narrow.dim,
            self.narrow.start,
        )?)
    }
}

impl NodeOp for Expand {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::Expand)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        one(kernels::expand(arg(inputs, 0, "expand")?, &self.shape)?)
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let xs = ctx.shape(ctx.input(0));
        let flops = broadcast::flops(&self.shape);
        let op = ExpandBackward { shape: xs.clone() };
        ctx.record_input_grad(op, vec![gy], "grad.expand", flops)
    }
}

impl NodeOp for ExpandBackward {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(TensorKernel::ExpandBackward)
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let gy = arg(inputs, 0, "expand")?;
        one(broadcast::sum_to_shape("expand", gy, &self.shape)?)
    }
}

impl NodeOp for Select {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(match self.kind {
            SelectKind::IndexSelect { .. } => TensorKernel::IndexSelect,
            SelectKind::Gather { .. } => TensorKernel::Gather,
            SelectKind::Embedding { .. } => TensorKernel::Embedding,
        })
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [x, index] = args(inputs, self.kind.name())?;
        one(match self.kind {
            SelectKind::IndexSelect { dim } => kernels::index_select(x, dim, index)?,
            SelectKind::Gather { dim } => kernels::gather(x, dim, index)?,
            SelectKind::Embedding { .. } => kernels::embedding(index, x)?,
        })
    }

    fn backward(&self, ctx: &mut BackwardCtx<'_>) -> Result<()> {
        let gy = ctx.grad_y()?;
        let (x, index) = (ctx.input(0), ctx.input(1));
        if !ctx.needs_grad(x) {
            return Ok(());
        }
        let xs = ctx.shape(x);
        let flops = ctx.shape(ctx.output(0)).iter().product::<usize>() as u64;
        let op = SelectBackward {
            kind: self.kind,
            shape: xs.clone(),
        };
        ctx.record_grad_of(x, op, vec![gy, index], "grad.select", flops);
        Ok(())
    }
}

impl NodeOp for SelectBackward {
    fn kernel(&self) -> Kernel {
        Kernel::Tensor(match self.kind {
            SelectKind::IndexSelect { .. } => TensorKernel::IndexSelectBackward,
            SelectKind::Gather { .. } => TensorKernel::GatherBackward,
            SelectKind::Embedding { .. } => TensorKernel::EmbeddingBackward,
        })
    }

    fn execute(&self, inputs: &Inputs<'_>) -> KernelResult {
        let [gy, index] = args(inputs, self.kind.name())?;
        one(match self.kind {
            SelectKind::IndexSelect { dim } => {
                kernels::index_select_backward(gy, &self.shape, dim, index)?
            }
            SelectKind::Gather { dim } => kernels::gather_backward(gy, &self.shape, dim, index)?,
            SelectKind::Embedding { padding_idx } => {
                kernels::embedding_backward(gy, index, &self.shape, padding_idx)?
            }
        })
    }
}
