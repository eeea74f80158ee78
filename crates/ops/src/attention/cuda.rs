//! Attention on CUDA (`crates/ops/cuda/attention.cu`): one warp per query row for the
//! output and `dQ`, one per key row for `dK` and `dV`, the rows' vectors in the lanes'
//! registers (at most [`MAX_DIM`] wide; [`fits`] says which shapes). f32, f64, and bf16
//! and f16 computed in float, whose saved log-sum-exp is f32 ([`super::lse_dtype`]).
//! A float32 attention with 16-bit products (autocast's) multiplies the bf16 (f16) values
//! of its operands and weights, rounded as the kernels read them.

use candle_core::{DType, Tensor};

use super::mask::{additive, Addressing};
use super::params::{Attention, AttentionGrads, AttentionOutput, AttentionShape, Call, OP};
use crate::bf16::Products;
use crate::dropout::Draws;
use crate::error::{CandleContext, Result};
use crate::gpu::cuda::{
    contiguous, device_of, dispatch_with_16_bit, launch, output, suffix_with_16_bit, view, wrap,
    Source,
};
use crate::gpu::launch::kernel_int;
use crate::gpu::Launch;

/// The widest query, key or value vector the kernels hold in registers (8 per lane).
pub(super) const MAX_DIM: usize = 256;

/// The mask as the kernels read it: an additive tensor, each slice's offset into it, the
/// row and column strides. Without a mask, one zero read at offset 0 for every weight.
struct DeviceMask {
    bias: Tensor,
    offsets: Tensor,
    row: i64,
    col: i64,
}

impl DeviceMask {
    fn new(shape: &AttentionShape, q: &Tensor, mask: Option<&Tensor>) -> Result<Self> {
        let (bias, at) = match mask {
            Some(m) => (
                contiguous(OP, &additive(OP, m, q.dtype())?)?,
                Addressing::new(OP, m.dims(), shape)?,
            ),
            None => (
                Tensor::zeros(1, q.dtype(), q.device()).ctx(OP)?,
                Addressing {
                    offsets: vec![0; shape.heads()],
                    row: 0,
                    col: 0,
                },
            ),
        };
        let offsets: Vec<i64> = at.offsets.iter().map(|&o| o as i64).collect();
        Ok(DeviceMask {
            bias,
            offsets: Tensor::from_vec(offsets, shape.heads(), q.device()).ctx(OP)?,
            row: at.row as i64,
            col: at.col as i64,
        })
    }
}

/// Whether the kernels take this shape (vectors in registers, sizes in `int`).
pub(super) fn fits(shape: &AttentionShape) -> bool {
    let ints = [
        shape.heads(),
        shape.queries,
        shape.keys,
        shape.qk_dim,
        shape.v_dim,
    ];
    shape.qk_dim <= MAX_DIM
        && shape.v_dim <= MAX_DIM
        && ints.iter().all(|&n| kernel_int(OP, "size", n).is_ok())
        && ints.iter().product::<usize>() > 0
}

/// The kernels' `products`: 1 (2) where a float32 attention multiplies bf16 (f16) values,
/// else 0.
fn products(dtype: DType, a: &Attention) -> i32 {
    match (dtype, a.products) {
        (DType::F32, Products::Bf16) => 1,
        (DType::F32, Products::F16) => 2,
        _ => 0,
    }
}

/// The launch arguments after the buffers, in the kernels' order: `$t` the tensors' element
/// type (the mask's), `$s` the scalars' (the type the kernels compute in).
macro_rules! settings {
    ($shape:expr, $a:expr, $step:expr, $m:expr, $t:ty, $s:ty, $dtype:expr, |$args:ident| $body:expr) => {{
        let (h, l, s) = (
            $shape.heads() as i32,
            $shape.queries as i32,
            $shape.keys as i32,
        );
        let (e, ev) = ($shape.qk_dim as i32, $shape.v_dim as i32);
        let scale = $a.scale as $s;
        let causal = i32::from($a.causal);
        let (base, threshold) = Draws::new($a.dropout_p, $a.seed, $step).parts();
        let keep = if $a.dropout_p > 0.0 {
            (1.0 / (1.0 - $a.dropout_p)) as $s
        } else {
            0.0 as $s
        };
        let (bs, bl) = $m.bias.storage_and_layout();
        let (os, ol) = $m.offsets.storage_and_layout();
        let bias = view::<$t>(OP, &bs, bl)?;
        let offsets = view::<i64>(OP, &os, ol)?;
        let products = products($dtype, $a);
        let $args = (
            h, l, s, e, ev, scale, causal, bias, offsets, $m.row, $m.col, base, threshold, keep,
            products,
        );
        $body
    }};
}

pub(super) fn forward(c: &Call<'_>) -> Result<AttentionOutput> {
    let (shape, [q, k, v], mask, a, step) = c.parts();
    let dev = device_of(OP, q)?;
    let (q, k, v) = (contiguous(OP, q)?, contiguous(OP, k)?, contiguous(OP, v)?);
    let m = DeviceMask::new(shape, &q, mask)?;
    let rows = shape.heads() * shape.queries;
    let name = format!("attention_forward_{}", suffix_with_16_bit(OP, q.dtype())?);
    dispatch_with_16_bit!(OP, q.dtype(), T, S => {
        let (qs, ql) = q.storage_and_layout();
        let (ks, kl) = k.storage_and_layout();
        let (vs, vl) = v.storage_and_layout();
        let (qv, kv, vv) = (view::<T>(OP, &qs, ql)?, view::<T>(OP, &ks, kl)?, view::<T>(OP, &vs, vl)?);
        let mut out = output::<T>(OP, &dev, rows * shape.v_dim)?;
        let mut lse = output::<S>(OP, &dev, rows)?;
        settings!(shape, a, step, m, T, S, q.dtype(), |x| {
            launch!(OP, dev, Source::Attention, name, Launch::warp_per_row(rows),
                [&qv, &kv, &vv, &mut out, &mut lse, &x.0, &x.1, &x.2, &x.3, &x.4, &x.5, &x.6, &x.7, &x.8, &x.9, &x.10, &x.11, &x.12, &x.13, &x.14]);
        });
        Ok(AttentionOutput { out: wrap(out, &dev, &shape.out()), lse: wrap(lse, &dev, &shape.lse()) })
    })
}

pub(super) fn backward(c: &Call<'_>, y: &AttentionOutput, dy: &Tensor) -> Result<AttentionGrads> {
    let (shape, [q, k, v], mask, a, step) = c.parts();
    let dev = device_of(OP, q)?;
    let c = |t: &Tensor| contiguous(OP, t);
    let (q, k, v, dout, out, lse) = (c(q)?, c(k)?, c(v)?, c(dy)?, c(&y.out)?, c(&y.lse)?);
    let m = DeviceMask::new(shape, &q, mask)?;
    let (queries, keys) = (shape.heads() * shape.queries, shape.heads() * shape.keys);
    let sfx = suffix_with_16_bit(OP, q.dtype())?;
    dispatch_with_16_bit!(OP, q.dtype(), T, S => {
        let (qs, ql) = q.storage_and_layout();
        let (ks, kl) = k.storage_and_layout();
        let (vs, vl) = v.storage_and_layout();
        let (ds, dl) = dout.storage_and_layout();
        let (os, ol) = out.storage_and_layout();
        let (ls, ll) = lse.storage_and_layout();
        let (qv, kv, vv) = (view::<T>(OP, &qs, ql)?, view::<T>(OP, &ks, kl)?, view::<T>(OP, &vs, vl)?);
        let (dov, ov, lv) = (view::<T>(OP, &ds, dl)?, view::<T>(OP, &os, ol)?, view::<S>(OP, &ls, ll)?);
        let mut delta = output::<S>(OP, &dev, queries)?;
        let (rows, ev) = (queries as i64, shape.v_dim as i32);
        launch!(OP, dev, Source::Attention, format!("attention_delta_{sfx}"), Launch::warp_per_row(queries),
            [&dov, &ov, &mut delta, &rows, &ev]);
        let mut dq = output::<T>(OP, &dev, queries * shape.qk_dim)?;
        let mut dk = output::<T>(OP, &dev, keys * shape.qk_dim)?;
        let mut dv = output::<T>(OP, &dev, keys * shape.v_dim)?;
        settings!(shape, a, step, m, T, S, q.dtype(), |x| {
            launch!(OP, dev, Source::Attention, format!("attention_backward_q_{sfx}"), Launch::warp_per_row(queries),
                [&qv, &kv, &vv, &dov, &lv, &delta, &mut dq, &x.0, &x.1, &x.2, &x.3, &x.4, &x.5, &x.6, &x.7, &x.8, &x.9, &x.10, &x.11, &x.12, &x.13, &x.14]);
            launch!(OP, dev, Source::Attention, format!("attention_backward_kv_{sfx}"), Launch::warp_per_row(keys),
                [&qv, &kv, &vv, &dov, &lv, &delta, &mut dk, &mut dv, &x.0, &x.1, &x.2, &x.3, &x.4, &x.5, &x.6, &x.7, &x.8, &x.9, &x.10, &x.11, &x.12, &x.13, &x.14]);
        });
        Ok(AttentionGrads {
            q: wrap(dq, &dev, q.dims()),
            k: wrap(dk, &dev, k.dims()),
            v: wrap(dv, &dev, v.dims()),
        })
    })
}
