//! `torch.matmul`: 1-D to N-D with PyTorch's promotion of vectors and broadcasting of the
//! batch dimensions, and both gradients. A product whose right side has no batch
//! dimensions (`[.., m, k] @ [k, n]`) runs as one GEMM over the flattened rows.

use candle_core::Tensor;

use super::{candle, matmul_cpu};
use crate::bf16::Products;
use crate::broadcast::{broadcast_shape, sum_to_shape};
use crate::cpu::{self, dispatch_float};
use crate::error::{OpError, Result};

const OP: &str = "matmul";

/// `t` rounded to float16 values, as float32.
fn f16_values(t: &Tensor) -> Result<Tensor> {
    crate::bf16::rounded_f32(OP, t, candle_core::DType::F16)
}

/// Both operands as float16 values in float32 when either is float16 (autocast's f16
/// weight): their float32 product is exactly that of float16 values, summed in float32.
fn f16_operands(x: &Tensor, y: &Tensor) -> Result<Option<(Tensor, Tensor)>> {
    if x.dtype() != candle_core::DType::F16 && y.dtype() != candle_core::DType::F16 {
        return Ok(None);
    }
    if x.dtype() == candle_core::DType::BF16 || y.dtype() == candle_core::DType::BF16 {
        return Err(OpError::invalid(
            OP,
            format!(
                "operands of dtypes {:?} and {:?}: one 16-bit dtype per product",
                x.dtype(),
                y.dtype()
            ),
        ));
    }
    Ok(Some((f16_values(x)?, f16_values(y)?)))
}

/// How a product with a bf16 operand runs ([`MatMulShape::bf16_operands`]).
enum Bf16Operands {
    /// Neither operand is bf16.
    None,
    /// The flat CPU product on wick's bf16 GEMM: (rows, inner size, columns).
    Flat((usize, usize, usize)),
    /// Both operands as bf16 values in f32.
    Widened(Tensor, Tensor),
}

/// The shapes of one `matmul(a, b)`: both sides promoted to at least 2-D, the broadcast
/// batch, and the output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatMulShape {
    /// `a`'s shape as given.
    pub a: Vec<usize>,
    /// `b`'s shape as given.
    pub b: Vec<usize>,
    /// `a` promoted: a vector `[k]` becomes `[1, k]`.
    a_nd: Vec<usize>,
    /// `b` promoted: a vector `[k]` becomes `[k, 1]`.
    b_nd: Vec<usize>,
    /// The broadcast batch dimensions.
    pub batch: Vec<usize>,
    /// Rows, inner size and columns.
    pub mkn: (usize, usize, usize),
    /// The output's shape (the promoted dimensions removed again).
    pub out: Vec<usize>,
}

impl MatMulShape {
    /// The shapes of `matmul(a, b)`, or an error naming both shapes.
    pub fn new(a: &[usize], b: &[usize]) -> Result<Self> {
        if a.is_empty() || b.is_empty() {
            return Err(OpError::invalid(
                OP,
                format!("both operands need at least one dimension, got {a:?} and {b:?}"),
            ));
        }
        let a_nd = if a.len() == 1 {
            vec![1, a[0]]
        } else {
            a.to_vec()
        };
        let b_nd = if b.len() == 1 {
            vec![b[0], 1]
        } else {
            b.to_vec()
        };
        let (ra, rb) = (a_nd.len(), b_nd.len());
        let (m, k, k2, n) = (a_nd[ra - 2], a_nd[ra - 1], b_nd[rb - 2], b_nd[rb - 1]);
        if k != k2 {
            return Err(OpError::invalid(
                OP,
                format!("{a:?} @ {b:?}: the inner sizes {k} and {k2} differ"),
            ));
        }
        let batch = broadcast_shape(OP, &a_nd[..ra - 2], &b_nd[..rb - 2])?;
        let mut out = batch.clone();
        if a.len() > 1 {
            out.push(m);
        }
        if b.len() > 1 {
            out.push(n);
        }
        Ok(MatMulShape {
            a: a.to_vec(),
            b: b.to_vec(),
            a_nd,
            b_nd,
            batch,
            mkn: (m, k, n),
            out,
        })
    }

    /// Multiply-adds counted twice: `2·batch·m·k·n` (each gradient costs as much).
    pub fn flops(&self) -> u64 {
        let (m, k, n) = self.mkn;
        let b: usize = self.batch.iter().product();
        2 * (b * m * k * n) as u64
    }

    /// Whether `b` has no batch dimensions, so the product is one GEMM over `a`'s rows.
    fn flat(&self) -> bool {
        self.b_nd.len() == 2
    }

    fn full(&self, last: [usize; 2]) -> Vec<usize> {
        let mut s = self.batch.clone();
        s.extend(last);
        s
    }

    /// `a` or `b` broadcast to the batch and made `[B, rows, cols]`.
    fn batched(&self, t: &Tensor, nd: &[usize]) -> candle_core::Result<Tensor> {
        let last = [nd[nd.len() - 2], nd[nd.len() - 1]];
        let b: usize = self.batch.iter().product();
        t.reshape(nd)?
            .broadcast_as(self.full(last))?
            .contiguous()?
            .reshape((b, last[0], last[1]))
    }

    /// The flat product's `(rows, k, n)` when wick's CPU GEMM runs it: `b` without batch
    /// dimensions, no empty dimension, and `x` (`a`, or the output gradient) and `y` f32
    /// or f64 CPU tensors of one dtype; `rows` is `a`'s rows, all batch dimensions
    /// flattened.
    fn on_cpu(&self, x: &Tensor, y: &Tensor) -> Option<(usize, usize, usize)> {
        let (_, k, n) = self.mkn;
        let rows = self.a.iter().product::<usize>() / k.max(1);
        let cpu = cpu::on_cpu_kernel(x) && cpu::on_cpu_kernel(y) && x.dtype() == y.dtype();
        (self.flat() && cpu && rows * k * n > 0).then_some((rows, k, n))
    }

    /// How a product with a bf16 operand runs (an operand of another dtype must be f32):
    /// the flat CPU product on wick's bf16 GEMM (autocast's weight), or, for batched right
    /// operands and off the CPU, both operands as bf16 values in f32 (exact) for
    /// [`forward_with`](Self::forward_with) and its gradients with bf16 products.
    fn bf16_operands(&self, x: &Tensor, y: &Tensor) -> Result<Bf16Operands> {
        use candle_core::DType;
        if x.dtype() != DType::BF16 && y.dtype() != DType::BF16 {
            return Ok(Bf16Operands::None);
        }
        let floats = [x, y]
            .iter()
            .all(|t| matches!(t.dtype(), DType::F32 | DType::BF16));
        if !floats {
            return Err(OpError::invalid(
                OP,
                format!(
                    "bf16 products of {:?} @ {:?} ({:?} and {:?}): the other operand must be f32 or bf16",
                    self.a, self.b, x.dtype(), y.dtype()
                ),
            ));
        }
        let cpu = crate::route::route(x.device()) == crate::route::Route::Cpu;
        if self.flat() && cpu {
            let (_, k, n) = self.mkn;
            let rows = self.a.iter().product::<usize>() / k.max(1);
            return Ok(Bf16Operands::Flat((rows, k, n)));
        }
        let bf16_values = |t: &Tensor| crate::bf16::rounded_f32(OP, t, DType::BF16);
        Ok(Bf16Operands::Widened(bf16_values(x)?, bf16_values(y)?))
    }

    /// `a @ b`. With a bf16 or f16 operand (autocast's weight), the products are of
    /// that dtype and the sums f32: the other operand is rounded as the product reads it,
    /// the output is f32.
    pub fn forward(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        if let Some((a, b)) = f16_operands(a, b)? {
            return self.forward(&a, &b);
        }
        match self.bf16_operands(a, b)? {
            Bf16Operands::Flat(mkn) => {
                let y = crate::bf16::matmul_forward(a, b, mkn)?;
                return self.finish(Ok(y), &self.out);
            }
            Bf16Operands::Widened(a, b) => return self.forward_with(&a, &b, Products::Bf16),
            Bf16Operands::None => {}
        }
        let (_, k, n) = self.mkn;
        if let Some(mkn) = self.on_cpu(a, b) {
            let y = dispatch_float!(
                OP,
                a.dtype(),
                matmul_cpu::forward(Products::Native, a, b, mkn)
            )?;
            return self.finish(Ok(y), &self.out);
        }
        let y = if self.flat() {
            let rows = a.reshape(((), k)).and_then(|a| a.contiguous());
            rows.and_then(|r| r.matmul(&b.reshape((k, n))?.contiguous()?))
        } else {
            let (ab, bb) = (self.batched(a, &self.a_nd), self.batched(b, &self.b_nd));
            ab.and_then(|ab| ab.matmul(&bb?))
        };
        y.and_then(|y| y.reshape(self.out.as_slice()))
            .map_err(candle(OP))
    }

    /// The gradient of `a` for output gradient `gy`: `gy @ bᵀ`, summed over the batch
    /// dimensions `a` was broadcast along.
    pub fn backward_a(&self, gy: &Tensor, b: &Tensor) -> Result<Tensor> {
        if let Some((gy, b)) = f16_operands(gy, b)? {
            return self.backward_a(&gy, &b);
        }
        match self.bf16_operands(gy, b)? {
            Bf16Operands::Flat(mkn) => {
                let ga = crate::bf16::matmul_backward_a(gy, b, mkn)?;
                return self.finish(Ok(ga), &self.a);
            }
            Bf16Operands::Widened(gy, b) => return self.backward_a_with(&gy, &b, Products::Bf16),
            Bf16Operands::None => {}
        }
        let (m, k, n) = self.mkn;
        if let Some(mkn) = self.on_cpu(gy, b) {
            let ga = dispatch_float!(
                OP,
                gy.dtype(),
                matmul_cpu::backward_a(Products::Native, gy, b, mkn)
            )?;
            return self.finish(Ok(ga), &self.a);
        }
        if self.flat() {
            let rows = gy.reshape(((), n)).and_then(|g| g.contiguous());
            let bt = b.reshape((k, n)).and_then(|b| b.t());
            return self.finish(rows.and_then(|g| g.matmul(&bt?)), &self.a);
        }
        let g = self.batched_grad(gy);
        let bt = self.batched(b, &self.b_nd).and_then(|b| b.t());
        self.sum_back(g.and_then(|g| g.matmul(&bt?)), [m, k], &self.a_nd, &self.a)
    }

    /// Whether the forced-bf16 products below run on wick's CPU kernels: two float32 CPU
    /// operands and no empty dimension (a bf16 operand takes the flat bf16 path instead).
    fn bf16_on_cpu(&self, x: &Tensor, y: &Tensor) -> bool {
        let (m, k, n) = self.mkn;
        let f32s = x.dtype() == candle_core::DType::F32 && y.dtype() == candle_core::DType::F32;
        cpu::on_cpu_kernel(x) && cpu::on_cpu_kernel(y) && f32s && m * k * n > 0
    }

    /// `[B, rows, cols]` products of `x [B, ..]` and `y [B, ..]` (each entry's matrix with
    /// the given strides) in bf16 products, f32 sums.
    fn bf16_batched(
        &self,
        dims: (usize, usize, usize),
        x: (&Tensor, (usize, usize)),
        y: (&Tensor, (usize, usize)),
    ) -> Result<Tensor> {
        let bsz: usize = self.batch.iter().product();
        matmul_cpu::batched::<f32>(Products::Bf16, bsz, dims, x, y)
    }

    /// [`forward`](Self::forward) with the given products and f32 sums whatever the
    /// operands' dtypes (autocast's product of two activations: both are rounded as the
    /// GEMM reads them). bf16 products off the CPU are f32 ones.
    pub fn forward_with(&self, a: &Tensor, b: &Tensor, products: Products) -> Result<Tensor> {
        match products {
            Products::Native => return self.forward(a, b),
            Products::F16 => return self.forward(&f16_values(a)?, &f16_values(b)?),
            Products::Bf16 if !self.bf16_on_cpu(a, b) => return self.forward(a, b),
            Products::Bf16 => {}
        }
        let (m, k, n) = self.mkn;
        let y = if self.flat() {
            let rows = self.a.iter().product::<usize>() / k;
            matmul_cpu::forward::<f32>(Products::Bf16, a, b, (rows, k, n))?
        } else {
            let ab = self.batched(a, &self.a_nd).map_err(candle(OP))?;
            let bb = self.batched(b, &self.b_nd).map_err(candle(OP))?;
            self.bf16_batched((m, n, k), (&ab, (k, 1)), (&bb, (n, 1)))?
        };
        self.finish(Ok(y), &self.out)
    }

    /// [`backward_a`](Self::backward_a) with the given products, as
    /// [`forward_with`](Self::forward_with).
    pub fn backward_a_with(&self, gy: &Tensor, b: &Tensor, products: Products) -> Result<Tensor> {
        match products {
            Products::Native => return self.backward_a(gy, b),
            Products::F16 => return self.backward_a(&f16_values(gy)?, &f16_values(b)?),
            Products::Bf16 if !self.bf16_on_cpu(gy, b) => return self.backward_a(gy, b),
            Products::Bf16 => {}
        }
        let (m, k, n) = self.mkn;
        if self.flat() {
            let rows = self.a.iter().product::<usize>() / k;
            let ga = matmul_cpu::backward_a::<f32>(Products::Bf16, gy, b, (rows, k, n))?;
            return self.finish(Ok(ga), &self.a);
        }
        let g = self.batched_grad(gy).map_err(candle(OP))?;
        let bb = self.batched(b, &self.b_nd).map_err(candle(OP))?;
        let ga = self.bf16_batched((m, k, n), (&g, (n, 1)), (&bb, (1, n)))?;
        self.sum_back(Ok(ga), [m, k], &self.a_nd, &self.a)
    }

    /// [`backward_b`](Self::backward_b) with the given products whatever the operands'
    /// dtypes: the gradient of a weight autocast cast to a 16-bit float, or of an operand
    /// of [`forward_with`](Self::forward_with) (`a` and `gy` are rounded as the product
    /// reads them).
    pub fn backward_b_with(&self, gy: &Tensor, a: &Tensor, products: Products) -> Result<Tensor> {
        match products {
            Products::Native => return self.backward_b(gy, a),
            Products::F16 => return self.backward_b(&f16_values(gy)?, &f16_values(a)?),
            Products::Bf16 if !self.bf16_on_cpu(a, gy) => return self.backward_b(gy, a),
            Products::Bf16 => {}
        }
        let (m, k, n) = self.mkn;
        if self.flat() {
            let rows = self.a.iter().product::<usize>() / k;
            let gb = crate::bf16::matmul_backward_b(a, gy, (rows, k, n))?;
            return self.finish(Ok(gb), &self.b);
        }
        let ab = self.batched(a, &self.a_nd).map_err(candle(OP))?;
        let g = self.batched_grad(gy).map_err(candle(OP))?;
        let gb = self.bf16_batched((k, n, m), (&ab, (1, k)), (&g, (n, 1)))?;
        self.sum_back(Ok(gb), [k, n], &self.b_nd, &self.b)
    }

    /// The gradient of `b` for output gradient `gy`: `aᵀ @ gy`, summed over the batch
    /// dimensions `b` was broadcast along.
    pub fn backward_b(&self, gy: &Tensor, a: &Tensor) -> Result<Tensor> {
        if let Some((gy, a)) = f16_operands(gy, a)? {
            return self.backward_b(&gy, &a);
        }
        match self.bf16_operands(a, gy)? {
            Bf16Operands::Flat(mkn) => {
                let gb = crate::bf16::matmul_backward_b(a, gy, mkn)?;
                return self.finish(Ok(gb), &self.b);
            }
            Bf16Operands::Widened(a, gy) => return self.backward_b_with(&gy, &a, Products::Bf16),
            Bf16Operands::None => {}
        }
        let (_, k, n) = self.mkn;
        if let Some(mkn) = self.on_cpu(a, gy) {
            let gb = dispatch_float!(
                OP,
                a.dtype(),
                matmul_cpu::backward_b(Products::Native, a, gy, mkn)
            )?;
            return self.finish(Ok(gb), &self.b);
        }
        if self.flat() {
            let rows = gy.reshape(((), n)).and_then(|g| g.contiguous());
            let at = a.reshape(((), k)).and_then(|a| a.contiguous()?.t());
            return self.finish(at.and_then(|at| at.matmul(&rows?)), &self.b);
        }
        let g = self.batched_grad(gy);
        let at = self.batched(a, &self.a_nd).and_then(|a| a.t());
        self.sum_back(
            at.and_then(|at| at.matmul(&g?)),
            [k, n],
            &self.b_nd,
            &self.b,
        )
    }

    /// `gy` as `[B, m, n]`.
    fn batched_grad(&self, gy: &Tensor) -> candle_core::Result<Tensor> {
        let (m, _, n) = self.mkn;
        let bsz: usize = self.batch.iter().product();
        gy.reshape((bsz, m, n))?.contiguous()
    }

    /// A product reshaped to the operand's `shape`.
    fn finish(&self, g: candle_core::Result<Tensor>, shape: &[usize]) -> Result<Tensor> {
        g.and_then(|g| g.reshape(shape)).map_err(candle(OP))
    }

    /// A batched gradient `[B, rows, cols]` summed to the promoted operand `nd`, then
    /// reshaped to the operand's `shape`.
    fn sum_back(
        &self,
        g: candle_core::Result<Tensor>,
        last: [usize; 2],
        nd: &[usize],
        shape: &[usize],
    ) -> Result<Tensor> {
        let g = g
            .and_then(|g| g.reshape(self.full(last)))
            .map_err(candle(OP))?;
        self.finish(Ok(sum_to_shape(OP, &g, nd)?), shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_follow_torch_matmul() {
        let out = |a: &[usize], b: &[usize]| MatMulShape::new(a, b).map(|s| s.out);
        assert_eq!(out(&[3], &[3]).unwrap(), Vec::<usize>::new());
        assert_eq!(out(&[2, 3], &[3]).unwrap(), vec![2]);
        assert_eq!(out(&[3], &[3, 4]).unwrap(), vec![4]);
        assert_eq!(out(&[5, 2, 3], &[3, 4]).unwrap(), vec![5, 2, 4]);
        assert_eq!(out(&[3], &[5, 3, 4]).unwrap(), vec![5, 4]);
        assert_eq!(out(&[7, 1, 2, 3], &[5, 3, 4]).unwrap(), vec![7, 5, 2, 4]);
        let err = out(&[2, 3], &[4, 5]).unwrap_err().to_string();
        assert!(
            err.contains("[2, 3] @ [4, 5]") && err.contains("3 and 4"),
            "{err}"
        );
        assert!(out(&[2, 2, 3], &[3, 3, 4]).is_err());
    }
}
