//! Each fixture case as builder calls, line for line the PyTorch expression in
//! scripts/make_tensor_op_fixtures.py.

use wick_graph::GraphBuilder;
use wick_ops::tensor::nll::{LossReduction, NllLoss};

use crate::runner::Case;

macro_rules! case {
    ($name:literal, |$b:ident, $v:ident| $body:expr) => {
        case!($name, true, |$b, $v| $body)
    };
    ($name:literal, $smooth:expr, |$b:ident, $v:ident| $body:expr) => {
        Case {
            name: $name,
            build: |$b: &mut GraphBuilder, $v| $body,
            smooth: $smooth,
        }
    };
}

/// Cases where finite differences are not the gradient: at a kink (`abs` at 0, `clamp`
/// at a bound, `amax` on ties, `where` at its switch), or by definition (`embedding`'s
/// `padding_idx` row gets none; `detach` stops it).
const KINKED: bool = false;

fn nll(ignore_index: Option<i64>, label_smoothing: f64, reduction: LossReduction) -> NllLoss {
    NllLoss {
        ignore_index,
        label_smoothing,
        reduction,
    }
}

pub const CASES: &[Case] = &[
    case!("matmul_dot", |b, v| b.matmul(v["input"], v["other"])),
    case!("matmul_mv", |b, v| b.matmul(v["input"], v["other"])),
    case!("matmul_vm_batched", |b, v| b.matmul(v["input"], v["other"])),
    case!("matmul_rows", |b, v| b.matmul(v["input"], v["other"])),
    case!("matmul_batched_broadcast", |b, v| b
        .matmul(v["input"], v["other"])),
    case!("matmul_attention", |b, v| {
        let kt = b.transpose(v["other"], 2, 3)?;
        b.matmul(v["input"], kt)
    }),
    case!("exp", |b, v| b.exp(v["input"])),
    case!("log", |b, v| b.log(v["input"])),
    case!("sqrt", |b, v| b.sqrt(v["input"])),
    case!("rsqrt", |b, v| b.rsqrt(v["input"])),
    case!("pow_3", |b, v| b.pow(v["input"], 3.0)),
    case!("pow_half", |b, v| b.pow(v["input"], 0.5)),
    case!("pow_neg2", |b, v| b.pow(v["input"], -2.0)),
    case!("abs", KINKED, |b, v| b.abs(v["input"])),
    case!("neg", |b, v| b.neg(v["input"])),
    case!("sin", |b, v| b.sin(v["input"])),
    case!("cos", |b, v| b.cos(v["input"])),
    case!("clamp", KINKED, |b, v| b.clamp(
        v["input"],
        Some(-0.5),
        Some(0.5)
    )),
    case!("clamp_min", |b, v| b.clamp(v["input"], Some(0.1), None)),
    case!("add_scalar", |b, v| b.add_scalar(v["input"], 2.5)),
    case!("mul_scalar", |b, v| b.mul_scalar(v["input"], -1.5)),
    case!("sum_dim1", |b, v| b.sum(v["input"], &[1], false)),
    case!("sum_all", |b, v| b.sum(v["input"], &[], false)),
    case!("mean_last_keepdim", |b, v| b.mean(v["input"], &[-1], true)),
    case!("amax_ties", KINKED, |b, v| b.amax(
        v["input"],
        &[1, 2],
        false
    )),
    case!("amin_keepdim", |b, v| b.amin(v["input"], &[0], true)),
    case!("logsumexp", |b, v| b.logsumexp(v["input"], &[-1], false)),
    case!("logsumexp_large", |b, v| b.logsumexp(
        v["input"],
        &[1],
        false
    )),
    case!("var_dim0", |b, v| b.var(v["input"], &[0], 1, false)),
    case!("var_biased_keepdim", |b, v| b.var(
        v["input"],
        &[0, 2],
        0,
        true
    )),
    case!("argmax", |b, v| b.argmax(v["input"], 1, false)),
    case!("argmin_keepdim", |b, v| b.argmin(v["input"], -1, true)),
    case!("narrow", |b, v| b.narrow(v["input"], -1, 1, 3)),
    case!("split_cat", |b, v| {
        let mut parts = b.split(v["input"], 2, 1)?;
        parts.reverse();
        b.concat(&parts, 1)
    }),
    case!("chunk_cat", |b, v| {
        let mut parts = b.chunk(v["input"], 3, -1)?;
        parts.reverse();
        b.concat(&parts, 1)
    }),
    case!("expand", |b, v| b.expand(v["input"], &[2, 3, 4])),
    case!("expand_keep", |b, v| b.expand(v["input"], &[4, -1, 5])),
    case!("unsqueeze_squeeze", |b, v| {
        let u = b.unsqueeze(v["input"], -1)?;
        let u = b.mul_scalar(u, 2.0)?;
        b.squeeze(u, 1)
    }),
    case!("stack", |b, v| {
        let p = b.mul(v["input"], v["other"])?;
        b.stack(&[v["input"], v["other"], p], 1)
    }),
    case!("index_select", |b, v| b
        .index_select(v["input"], 0, v["index"])),
    case!("gather", |b, v| b.gather(v["input"], 1, v["index"])),
    case!("embedding", KINKED, |b, v| b.embedding(
        v["input"],
        v["weight"],
        Some(1)
    )),
    case!("where_broadcast", KINKED, |b, v| {
        let cond = b.compare_scalar(wick_ops::tensor::mask::Comparison::Gt, v["input"], 0.0)?;
        b.where_(cond, v["input"], v["other"])
    }),
    case!("masked_fill_causal", |b, v| {
        let x = b.masked_fill(v["input"], v["mask"], f64::NEG_INFINITY)?;
        b.softmax(x, 2)
    }),
    case!("gt_scalar", |b, v| b.compare_scalar(
        wick_ops::tensor::mask::Comparison::Gt,
        v["input"],
        0.2
    )),
    case!("le_broadcast", |b, v| b.le(v["input"], v["other"])),
    case!("detach", KINKED, |b, v| {
        let d = b.detach(v["input"])?;
        let p = b.mul(v["input"], d)?;
        b.mul_scalar(p, 3.0)
    }),
    case!("log_softmax", |b, v| b.log_softmax(v["input"], 1)),
    case!("nll_loss", |b, v| {
        let logp = b.log_softmax(v["input"], 1)?;
        b.nll_loss(logp, v["target"], NllLoss::default())
    }),
    case!("nll_loss_sum_ignore", |b, v| b.nll_loss(
        v["input"],
        v["target"],
        nll(Some(2), 0.0, LossReduction::Sum)
    )),
    case!("nll_loss_none", |b, v| b.nll_loss(
        v["input"],
        v["target"],
        nll(Some(-100), 0.0, LossReduction::None)
    )),
    case!("cross_entropy_pixels", |b, v| {
        b.cross_entropy_with(
            v["input"],
            v["target"],
            nll(Some(-100), 0.1, LossReduction::Mean),
        )
    }),
    case!("cross_entropy_smoothing", |b, v| {
        b.cross_entropy_with(
            v["input"],
            v["target"],
            nll(Some(0), 0.2, LossReduction::Mean),
        )
    }),
    case!("cross_entropy_1d", |b, v| b.cross_entropy_with(
        v["input"],
        v["target"],
        NllLoss::default()
    )),
    case!("binary_cross_entropy", |b, v| b
        .binary_cross_entropy(v["input"], v["target"])),
    case!("sdpa_plain", |b, v| b.scaled_dot_product_attention(
        v["query"], v["key"], v["value"], None, 0.0, false, None
    )),
    case!("sdpa_causal", |b, v| b.scaled_dot_product_attention(
        v["query"], v["key"], v["value"], None, 0.0, true, None
    )),
    case!("sdpa_causal_rect", |b, v| b.scaled_dot_product_attention(
        v["query"],
        v["key"],
        v["value"],
        None,
        0.0,
        true,
        Some(0.3)
    )),
    case!("sdpa_bool_mask", |b, v| b.scaled_dot_product_attention(
        v["query"],
        v["key"],
        v["value"],
        Some(v["mask"]),
        0.0,
        false,
        None
    )),
    // The mask is detached in the generator, as here: it gets no gradient.
    case!("sdpa_float_mask", KINKED, |b, v| {
        let mask = b.detach(v["mask"])?;
        b.scaled_dot_product_attention(
            v["query"],
            v["key"],
            v["value"],
            Some(mask),
            0.0,
            false,
            None,
        )
    }),
];
