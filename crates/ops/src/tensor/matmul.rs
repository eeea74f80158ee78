//! `torch.matmul`: 1-D to N-D with PyTorch's promotion of vectors and broadcasting of the
//! batch dimensions, and both gradients. A product whose right side has no batch
//! dimensions (`[.., m, k] @ [k, n]`) runs as one GEMM over the flattened rows.

use candle_core::Tensor;

use super::{candle, matmul_cpu};
use crate::bf16::Products;
use crate::broadcast::{broadcast_shape, sum_to_shape};
use crate::cpu::{self, dispatch_float};
use crate::error::Result;

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
        return Err(crate::invalid!(
            OP,
            "operands of dtypes {:?} and {:?}: one 16-bit dtype per product",
            x.dtype(),
            y.dtype()
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

/// An operand of a product.
#[derive(Debug, Clone, Copy)]
enum Operand {
    /// The left side `a`.
    A,
    /// The right side `b`.
    B,
    /// The output gradient.
    Gy,
}

/// The three products of one matmul, each `x · y` of two of `a`, `b` and `gy`.
#[derive(Debug, Clone, Copy)]
enum Pass {
    /// `y = a · b`.
    Forward,
    /// `ga = gy · bᵀ`.
    GradA,
    /// `gb = aᵀ · gy`.
    GradB,
}

impl Pass {
    /// `x` and `y`, and whether the product reads each transposed.
    fn operands(self) -> [(Operand, bool); 2] {
        match self {
            Pass::Forward => [(Operand::A, false), (Operand::B, false)],
            Pass::GradA => [(Operand::Gy, false), (Operand::B, true)],
            Pass::GradB => [(Operand::A, true), (Operand::Gy, false)],
        }
    }

    /// The product's (rows, columns, inner size) for a matmul's `(m, k, n)`.
    fn dims(self, (m, k, n): (usize, usize, usize)) -> (usize, usize, usize) {
        match self {
            Pass::Forward => (m, n, k),
            Pass::GradA => (m, k, n),
            Pass::GradB => (k, n, m),
        }
    }

    /// The (row, column) strides at which the product reads `x` and `y`, each stored
    /// row-major.
    fn strides(self, (_, k, n): (usize, usize, usize)) -> ((usize, usize), (usize, usize)) {
        match self {
            Pass::Forward => ((k, 1), (n, 1)),
            Pass::GradA => ((n, 1), (1, n)),
            Pass::GradB => ((1, k), (n, 1)),
        }
    }
}

/// A flat pass on the bf16 GEMM, its operands f32 or bf16 tensors.
fn bf16_gemm(pass: Pass, x: &Tensor, y: &Tensor, mkn: (usize, usize, usize)) -> Result<Tensor> {
    let (xs, ys) = pass.strides(mkn);
    crate::bf16::tensor_product(OP, pass.dims(mkn), (x, xs), (y, ys))
}

/// A flat pass on wick's CPU GEMM; `aᵀ · gy` on its column-major kernel.
fn cpu_gemm<T: cpu::Float>(
    pass: Pass,
    products: Products,
    x: &Tensor,
    y: &Tensor,
    mkn: (usize, usize, usize),
) -> Result<Tensor> {
    if let Pass::GradB = pass {
        return matmul_cpu::backward_b::<T>(products, x, y, mkn);
    }
    let (xs, ys) = pass.strides(mkn);
    matmul_cpu::product::<T>(products, pass.dims(mkn), (x, xs), (y, ys))
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
            return Err(crate::invalid!(
                OP,
                "both operands need at least one dimension, got {a:?} and {b:?}"
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
            return Err(crate::invalid!(
                OP,
                "{a:?} @ {b:?}: the inner sizes {k} and {k2} differ"
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
        let mkn @ (rows, k, n) = self.flat_mkn();
        let cpu = cpu::on_cpu_kernel(x) && cpu::on_cpu_kernel(y) && x.dtype() == y.dtype();
        (self.flat() && cpu && rows * k * n > 0).then_some(mkn)
    }

    /// The flat product's `(rows, k, n)`: `a`'s rows with all batch dimensions flattened.
    fn flat_mkn(&self) -> (usize, usize, usize) {
        let (_, k, n) = self.mkn;
        (self.a.iter().product::<usize>() / k.max(1), k, n)
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
            return Err(crate::invalid!(OP, "bf16 products of {:?} @ {:?} ({:?} and {:?}): the other operand must be f32 or bf16", self.a, self.b, x.dtype(), y.dtype()));
        }
        let cpu = crate::route::route(x.device()) == crate::route::Route::Cpu;
        if self.flat() && cpu {
            return Ok(Bf16Operands::Flat(self.flat_mkn()));
        }
        let bf16_values = |t: &Tensor| crate::bf16::rounded_f32(OP, t, DType::BF16);
        Ok(Bf16Operands::Widened(bf16_values(x)?, bf16_values(y)?))
    }

    /// `a @ b`. With a bf16 or f16 operand (autocast's weight), the products are of
    /// that dtype and the sums f32: the other operand is rounded as the product reads it,
    /// the output is f32.
    pub fn forward(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        self.product(Pass::Forward, a, b)
    }

    /// The gradient of `a` for output gradient `gy`: `gy @ bᵀ`, summed over the batch
    /// dimensions `a` was broadcast along.
    pub fn backward_a(&self, gy: &Tensor, b: &Tensor) -> Result<Tensor> {
        self.product(Pass::GradA, gy, b)
    }

    /// The gradient of `b` for output gradient `gy`: `aᵀ @ gy`, summed over the batch
    /// dimensions `b` was broadcast along.
    pub fn backward_b(&self, gy: &Tensor, a: &Tensor) -> Result<Tensor> {
        self.product(Pass::GradB, a, gy)
    }

    /// [`forward`](Self::forward) with the given products and f32 sums whatever the
    /// operands' dtypes (autocast's product of two activations: both are rounded as the
    /// GEMM reads them). bf16 products off the CPU are f32 ones.
    pub fn forward_with(&self, a: &Tensor, b: &Tensor, products: Products) -> Result<Tensor> {
        self.product_with(Pass::Forward, a, b, products)
    }

    /// [`backward_a`](Self::backward_a) with the given products, as
    /// [`forward_with`](Self::forward_with).
    pub fn backward_a_with(&self, gy: &Tensor, b: &Tensor, products: Products) -> Result<Tensor> {
        self.product_with(Pass::GradA, gy, b, products)
    }

    /// [`backward_b`](Self::backward_b) with the given products whatever the operands'
    /// dtypes: the gradient of a weight autocast cast to a 16-bit float, or of an operand
    /// of [`forward_with`](Self::forward_with) (`a` and `gy` are rounded as the product
    /// reads them).
    pub fn backward_b_with(&self, gy: &Tensor, a: &Tensor, products: Products) -> Result<Tensor> {
        self.product_with(Pass::GradB, a, gy, products)
    }

    /// One pass's product `x · y` in its operands' precision: the 16-bit operands'
    /// products first, then wick's CPU GEMM where it runs the product, else candle's.
    fn product(&self, pass: Pass, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        if let Some((x, y)) = f16_operands(x, y)? {
            return self.product(pass, &x, &y);
        }
        match self.bf16_operands(x, y)? {
            Bf16Operands::Flat(mkn) => {
                let p = bf16_gemm(pass, x, y, mkn)?;
                return self.finish(Ok(p), self.result_shape(pass));
            }
            Bf16Operands::Widened(x, y) => return self.product_with(pass, &x, &y, Products::Bf16),
            Bf16Operands::None => {}
        }
        if let Some(mkn) = self.on_cpu(x, y) {
            let p = dispatch_float!(OP, x.dtype(), cpu_gemm(pass, Products::Native, x, y, mkn))?;
            return self.finish(Ok(p), self.result_shape(pass));
        }
        let [(ox, tx), (oy, ty)] = pass.operands();
        let read = |o, t: &Tensor, transposed: bool| {
            let m = if self.flat() {
                t.reshape(((), self.cols(o)))?.contiguous()?
            } else {
                self.batched_operand(o, t)?
            };
            if transposed {
                m.t()
            } else {
                Ok(m)
            }
        };
        let p = read(ox, x, tx).and_then(|x| x.matmul(&read(oy, y, ty)?));
        self.pass_result(pass, p)
    }

    /// Whether the forced-bf16 products below run on wick's CPU kernels: two float32 CPU
    /// operands and no empty dimension (a bf16 operand takes the flat bf16 path instead).
    fn bf16_on_cpu(&self, x: &Tensor, y: &Tensor) -> bool {
        let (m, k, n) = self.mkn;
        let f32s = x.dtype() == candle_core::DType::F32 && y.dtype() == candle_core::DType::F32;
        cpu::on_cpu_kernel(x) && cpu::on_cpu_kernel(y) && f32s && m * k * n > 0
    }

    /// [`product`](Self::product) with the given products and f32 sums.
    fn product_with(
        &self,
        pass: Pass,
        x: &Tensor,
        y: &Tensor,
        products: Products,
    ) -> Result<Tensor> {
        match products {
            Products::Native => return self.product(pass, x, y),
            Products::F16 => return self.product(pass, &f16_values(x)?, &f16_values(y)?),
            Products::Bf16 if !self.bf16_on_cpu(x, y) => return self.product(pass, x, y),
            Products::Bf16 => {}
        }
        if self.flat() {
            let p = match pass {
                Pass::GradB => bf16_gemm(pass, x, y, self.flat_mkn())?,
                _ => cpu_gemm::<f32>(pass, Products::Bf16, x, y, self.flat_mkn())?,
            };
            return self.finish(Ok(p), self.result_shape(pass));
        }
        let [(ox, _), (oy, _)] = pass.operands();
        let xb = self.batched_operand(ox, x).map_err(candle(OP))?;
        let yb = self.batched_operand(oy, y).map_err(candle(OP))?;
        let (xs, ys) = pass.strides(self.mkn);
        let bsz: usize = self.batch.iter().product();
        let dims = pass.dims(self.mkn);
        let p = matmul_cpu::batched::<f32>(Products::Bf16, bsz, dims, (&xb, xs), (&yb, ys))?;
        self.pass_result(pass, Ok(p))
    }

    /// The columns of an operand's matrix, row-major: `a [m, k]`, `b [k, n]`, `gy [m, n]`.
    fn cols(&self, o: Operand) -> usize {
        let (_, k, n) = self.mkn;
        match o {
            Operand::A => k,
            Operand::B | Operand::Gy => n,
        }
    }

    /// An operand as `[B, rows, cols]`, broadcast to the batch.
    fn batched_operand(&self, o: Operand, t: &Tensor) -> candle_core::Result<Tensor> {
        match o {
            Operand::A => self.batched(t, &self.a_nd),
            Operand::B => self.batched(t, &self.b_nd),
            Operand::Gy => self.batched_grad(t),
        }
    }

    /// The shape of a pass's result: the output's, `a`'s or `b`'s.
    fn result_shape(&self, pass: Pass) -> &[usize] {
        match pass {
            Pass::Forward => &self.out,
            Pass::GradA => &self.a,
            Pass::GradB => &self.b,
        }
    }

    /// A pass's product reshaped to its result, a gradient summed over the batch
    /// dimensions its operand was broadcast along.
    fn pass_result(&self, pass: Pass, p: candle_core::Result<Tensor>) -> Result<Tensor> {
        let (m, k, n) = self.mkn;
        match pass {
            _ if self.flat() => self.finish(p, self.result_shape(pass)),
            Pass::Forward => self.finish(p, &self.out),
            Pass::GradA => self.sum_back(p, [m, k], &self.a_nd, &self.a),
            Pass::GradB => self.sum_back(p, [k, n], &self.b_nd, &self.b),
        }
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
