//! The 16-bit-product kernels (autocast's products: bfloat16, and float16 at the end)
//! against float64:
//! each output within float32's summation error of the float64 result on the same
//! bfloat16-rounded operands, forward and both gradients. The bound is relative to the
//! sum of the products' magnitudes (the same computation on absolute values), so a
//! wrong element, a wrong stride or a missing rounding fails it by orders of magnitude.

use candle_core::{DType, Device, Tensor};
use wick_ops::bf16::{cast, has_amx, has_avx512_bf16, Bf16Path};
use wick_ops::conv::ConvAlgorithm;
use wick_ops::{conv, linear, Conv2dParams, Products};

mod matmul;
mod widening;

fn randn(dims: &[usize], seed: u64) -> Tensor {
    let n: usize = dims.iter().product();
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect();
    Tensor::from_vec(v, dims, &Device::Cpu).unwrap()
}

fn bf16(t: &Tensor) -> Tensor {
    cast(t, DType::BF16).unwrap()
}

/// The bfloat16-rounded values of `t`, in float64.
fn rounded64(t: &Tensor) -> Tensor {
    bf16(t).to_dtype(DType::F64).unwrap()
}

fn abs64(t: &Tensor) -> Tensor {
    t.abs().unwrap()
}

/// Asserts `got` (f32) is within float32 summation error (depth `k`) of `want` (f64),
/// relative to `scale` (the same sums over absolute values).
fn close(what: &str, got: &Tensor, want: &Tensor, scale: &Tensor, k: usize) {
    assert_eq!(got.dtype(), DType::F32, "{what}: output dtype");
    let got: Vec<f64> = got
        .to_dtype(DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let want: Vec<f64> = want.flatten_all().unwrap().to_vec1().unwrap();
    let scale: Vec<f64> = scale.flatten_all().unwrap().to_vec1().unwrap();
    let bound = (k + 2) as f64 * 2f64.powi(-23);
    for (i, ((g, w), s)) in got.iter().zip(&want).zip(&scale).enumerate() {
        assert!(
            (g - w).abs() <= bound * s + 1e-30,
            "{what}: element {i}: {g} vs {w} (scale {s})"
        );
    }
}

/// Checks `got` against `op` on the f64 operands (`op` applies its argument to each
/// operand: as they are for the result, their magnitudes for the scale).
fn against(what: &str, got: &Tensor, op: impl Fn(&dyn Fn(&Tensor) -> Tensor) -> Tensor, k: usize) {
    let same = |t: &Tensor| t.clone();
    close(what, got, &op(&same), &op(&abs64), k);
}

/// `|a - b|` in float64.
fn abs_diff(a: &Tensor, b: &Tensor) -> Tensor {
    (a.to_dtype(DType::F64).unwrap() - b)
        .unwrap()
        .abs()
        .unwrap()
}

/// The largest element.
fn max_of(t: &Tensor) -> f64 {
    t.flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f64>()
        .unwrap()
}

/// (input shape, weight shape, stride, padding, groups).
type Case = (&'static [usize], &'static [usize], usize, usize, usize);

/// A tensor made 16-bit, or its 16-bit values in float64.
type Rounding = fn(&Tensor) -> Tensor;

/// Convolution case `i` with `products`: forward (with a bias), input and weight
/// gradients, each against float64 on the values as the products read them. `cast` makes
/// the weight (and, with `cast_input`, the input) 16-bit; `low64` gives a tensor's
/// rounded values in float64.
fn check_conv(
    i: usize,
    (xs, ws, stride, pad, groups): Case,
    (cast, low64): (Rounding, Rounding),
    products: Products,
    cast_input: bool,
) {
    let p = Conv2dParams {
        stride: [stride; 2],
        padding: [pad; 2],
        dilation: [1, 1],
        groups,
    };
    let what = format!("{products:?} case {i}");
    let (x, w, b) = (
        randn(xs, 3 * i as u64 + 1),
        randn(ws, 3 * i as u64 + 2),
        randn(&[ws[0]], 9),
    );
    let x_in = if cast_input { cast(&x) } else { x.clone() };
    let y = conv::conv2d(&x_in, &cast(&w), Some(&b), &p).unwrap();
    assert_eq!(y.dtype(), DType::F32, "{what}: output dtype");
    let (x64, w64) = (low64(&x), low64(&w));
    let b64 = b.to_dtype(DType::F64).unwrap();
    let op = |m: &dyn Fn(&Tensor) -> Tensor| {
        conv::conv2d(&m(&x64), &m(&w64), Some(&m(&b64)), &p).unwrap()
    };
    against(&format!("{what} forward"), &y, op, ws[1] * ws[2] * ws[3]);
    let full = conv::conv2d(&x, &w, Some(&b), &p).unwrap();
    assert!(max_of(&abs_diff(&y, &full.to_dtype(DType::F64).unwrap())) > 0.0);

    let gy = randn(y.dims(), 50 + i as u64);
    let gy64 = low64(&gy);
    let (depth_x, depth_w) = (ws[0] * ws[2] * ws[3], gy.elem_count() / ws[0]);
    let dx = conv::conv2d_backward_data(&gy, &cast(&w), xs, &p).unwrap();
    let data = |m: &dyn Fn(&Tensor) -> Tensor| {
        conv::conv2d_backward_data(&m(&gy64), &m(&w64), xs, &p).unwrap()
    };
    against(&format!("{what} input gradient"), &dx, data, depth_x);
    let dw = conv::conv2d_backward_filter_with(&gy, &x_in, ws, &p, products).unwrap();
    let filter = |m: &dyn Fn(&Tensor) -> Tensor| {
        conv::conv2d_backward_filter(&m(&gy64), &m(&x64), ws, &p).unwrap()
    };
    against(&format!("{what} weight gradient"), &dw, filter, depth_w);
}

#[test]
fn bf16_convolution_matches_float64_forward_and_gradients() {
    if !has_avx512_bf16() {
        eprintln!("note: no avx512_bf16 here: the widening path runs both rounds");
    }
    // (input, weight, stride, padding, groups): a 3x3, a strided 1x1, a 7x7 stem, a grouped 3x3.
    let cases: [Case; 4] = [
        (&[2, 16, 9, 9], &[24, 16, 3, 3], 1, 1, 1),
        (&[3, 32, 8, 8], &[16, 32, 1, 1], 2, 0, 1),
        (&[2, 3, 20, 20], &[8, 3, 7, 7], 2, 3, 1),
        (&[2, 8, 6, 6], &[8, 4, 3, 3], 1, 1, 2),
    ];
    for path in [Bf16Path::Amx, Bf16Path::Native, Bf16Path::Widening] {
        path.scope(|| {
            for (i, case) in cases.into_iter().enumerate() {
                check_conv(i, case, (bf16, rounded64), Products::Bf16, true);
            }
            // Autocast's operands on 4x4 planes, one GEMM over the batch: an f32 input
            // rounded as its im2col matrix is packed (conv/packed_columns.rs, native).
            let small: Case = (&[6, 20, 4, 4], &[24, 20, 3, 3], 1, 1, 1);
            check_conv(4, small, (bf16, rounded64), Products::Bf16, false);
        });
    }
}

/// On AMX, stride-1 convolutions with channels in multiples of 32 run as direct tile
/// products over pair planes (conv/amx_direct.rs, conv/amx_filter.rs): a 3x3 on 9x9
/// planes (the weight gradient in stacks of 2 images), one image split by output
/// channels, no padding on a non-square plane, a 5x5 kernel, and 8x8 planes at batch 16.
#[test]
fn amx_direct_convolutions_match_float64() {
    if !has_amx() {
        eprintln!("skipped: no amx_bf16 here (the direct AMX convolutions)");
        return;
    }
    let cases: [Case; 5] = [
        (&[3, 32, 9, 9], &[64, 32, 3, 3], 1, 1, 1),
        (&[1, 64, 12, 9], &[96, 64, 3, 3], 1, 0, 1),
        (&[2, 32, 11, 7], &[32, 32, 3, 3], 1, 0, 1),
        (&[4, 32, 6, 6], &[32, 32, 5, 5], 1, 2, 1),
        (&[16, 32, 8, 8], &[64, 32, 3, 3], 1, 1, 1),
    ];
    Bf16Path::Amx.scope(|| {
        for (i, case) in cases.into_iter().enumerate() {
            check_conv(10 + i, case, (bf16, rounded64), Products::Bf16, false);
        }
    });
}

#[test]
fn bf16_linear_matches_float64_forward_and_gradients() {
    for (i, (m, k, n)) in [(5, 7, 3), (64, 300, 130), (1, 768, 50)]
        .into_iter()
        .enumerate()
    {
        let (x, w, b) = (
            randn(&[m, k], i as u64 + 11),
            randn(&[n, k], i as u64 + 12),
            randn(&[n], 5),
        );
        let y = linear::linear(&bf16(&x), &bf16(&w), Some(&b)).unwrap();
        let (x64, w64, b64) = (
            rounded64(&x),
            rounded64(&w),
            b.to_dtype(DType::F64).unwrap(),
        );
        let op = |m: &dyn Fn(&Tensor) -> Tensor| {
            linear::linear(&m(&x64), &m(&w64), Some(&m(&b64))).unwrap()
        };
        against(&format!("linear {i} forward"), &y, op, k);

        let gy = randn(&[m, n], i as u64 + 40);
        let gy64 = rounded64(&gy);
        let got = linear::linear_backward(&gy, &bf16(&x), &bf16(&w), true).unwrap();
        let grads = |f: &dyn Fn(&Tensor) -> Tensor| {
            linear::linear_backward(&f(&gy64), &f(&x64), &f(&w64), false).unwrap()
        };
        against(
            &format!("linear {i} input gradient"),
            &got.x,
            |f| grads(f).x,
            n,
        );
        against(
            &format!("linear {i} weight gradient"),
            &got.weight,
            |f| grads(f).weight,
            m,
        );
    }
}

#[test]
fn a_float32_activation_is_rounded_as_the_product_reads_it() {
    // Autocast casts the weight; the f32 activation is rounded inside the product: the
    // same result as casting it first.
    let (x, w) = (randn(&[6, 40], 1), randn(&[5, 40], 2));
    let fused = linear::linear(&x, &bf16(&w), None).unwrap();
    let cast_first = linear::linear(&bf16(&x), &bf16(&w), None).unwrap();
    assert_eq!(
        fused.to_vec2::<f32>().unwrap(),
        cast_first.to_vec2::<f32>().unwrap()
    );
    let p = Conv2dParams {
        padding: [1, 1],
        ..Default::default()
    };
    let (x, w) = (randn(&[2, 8, 10, 10], 3), randn(&[16, 8, 3, 3], 4));
    let fused = conv::conv2d(&x, &bf16(&w), None, &p).unwrap();
    let cast_first = conv::conv2d(&bf16(&x), &bf16(&w), None, &p).unwrap();
    let (a, b) = (
        fused.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        cast_first.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
    );
    assert_eq!(a, b);
    let err = linear::linear(
        &x.to_dtype(DType::F64).unwrap().flatten(1, 3).unwrap(),
        &bf16(&randn(&[3, 800], 5)),
        None,
    )
    .unwrap_err()
    .to_string();
    assert_mentions(&err, &["linear", "input", "F64"]);
}

#[test]
fn casts_round_trip_and_keep_the_shape() {
    let x = randn(&[3, 5, 7], 4);
    let h = cast(&x, DType::BF16).unwrap();
    assert_eq!((h.dtype(), h.dims()), (DType::BF16, x.dims()));
    let back = cast(&h, DType::F32).unwrap();
    let candle_way = x
        .to_dtype(DType::BF16)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    assert_eq!(
        back.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        candle_way.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    );
    // float16: wick's slice conversion gives candle's (the half crate's) values, and
    // overflow to infinity past 65504.
    let big = (x.clone() * 40000.0).unwrap();
    let h = cast(&big, DType::F16).unwrap();
    assert_eq!((h.dtype(), h.dims()), (DType::F16, x.dims()));
    let widen = |t: &Tensor| -> Vec<f32> {
        t.to_dtype(DType::F32)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    let ours = widen(&h);
    assert_eq!(ours, widen(&big.to_dtype(DType::F16).unwrap()));
    assert!(ours.iter().any(|v| v.is_infinite()) && ours.iter().any(|v| v.is_finite()));
}

/// Where Winograd runs with float32 products but not with bfloat16 ones, whose GEMM gains
/// less from its fewer products than the transforms cost: 4x4 outputs (4 tiles an image,
/// 128 in the batch), and 7x7 outputs at batch 8 (128 tiles, but 98 tiles' worth of
/// pixels). There a bf16 forward and input gradient are im2col's, bit for bit; with 8x8
/// outputs at batch 8 (128 whole tiles) Winograd runs.
/// These are `vdpbf16ps`'s rules: on AMX these layers run as direct tile products.
#[test]
fn bf16_products_keep_im2col_where_winograd_does_not_pay() {
    Bf16Path::Native.scope(winograd_rules_of_the_native_path)
}

fn winograd_rules_of_the_native_path() {
    if !has_avx512_bf16() {
        // Without it, bfloat16 convolutions run the float32 kernels and their tile rules
        // (widening::widening_convolutions_are_float32_convolutions_of_the_rounded_operands).
        eprintln!("skipped: no avx512_bf16 here (these tile rules are the bf16 GEMM's)");
        return;
    }
    let p = Conv2dParams::new(1, 1);
    for (n, side, winograd) in [(32, 4, false), (8, 7, false), (8, 8, true)] {
        let xs = [n, 32, side, side];
        let ws = [32, 32, 3, 3];
        let (x, w) = (randn(&xs, 73), bf16(&randn(&ws, 74)));
        let gy = randn(&xs, 75);
        let both = |algo: ConvAlgorithm| {
            algo.scope(|| {
                let y = conv::conv2d(&x, &w, None, &p).unwrap();
                (y, conv::conv2d_backward_data(&gy, &w, &xs, &p).unwrap())
            })
        };
        let values = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let ((y, dx), (yi, dxi)) = (both(ConvAlgorithm::Auto), both(ConvAlgorithm::Im2col));
        let what = format!("{side}x{side} outputs at batch {n}");
        assert_eq!(values(&y) != values(&yi), winograd, "{what}: forward");
        assert_eq!(
            values(&dx) != values(&dxi),
            winograd,
            "{what}: input gradient"
        );
    }
}

/// Winograd's F(2x2, 3x3) runs 3x3 stride-1 layers with enough channels and tiles: its
/// transformed tiles are rounded to bfloat16 too, so the bound is bfloat16's rounding
/// (a few units of 2^-9 of the magnitudes' sum), not float32 summation's; still orders of
/// magnitude below what a wrong element gives.
#[test]
fn bf16_winograd_layers_stay_within_bf16_rounding_of_float64() {
    let p = Conv2dParams {
        padding: [1, 1],
        ..Default::default()
    };
    let (xs, ws): (&[usize], &[usize]) = (&[4, 16, 16, 16], &[24, 16, 3, 3]);
    let (x, w) = (randn(xs, 70), randn(ws, 71));
    let (x64, w64) = (rounded64(&x), rounded64(&w));
    let bound = |got: &Tensor, want: &Tensor, scale: &Tensor, what: &str| {
        let ratio = max_of(&(abs_diff(got, want) / scale).unwrap());
        assert!(
            ratio < 2f64.powi(-6),
            "{what}: worst error {ratio:e} of the magnitudes' sum"
        );
        assert!(
            ratio > 0.0,
            "{what}: exact: bf16 rounding of the transformed tiles expected"
        );
    };
    let y = conv::conv2d(&x, &bf16(&w), None, &p).unwrap();
    let want = conv::conv2d(&x64, &w64, None, &p).unwrap();
    bound(
        &y,
        &want,
        &conv::conv2d(&abs64(&x64), &abs64(&w64), None, &p).unwrap(),
        "forward",
    );
    let gy = randn(y.dims(), 72);
    let gy64 = rounded64(&gy);
    let dx = conv::conv2d_backward_data(&gy, &bf16(&w), xs, &p).unwrap();
    let want = conv::conv2d_backward_data(&gy64, &w64, xs, &p).unwrap();
    let scale = conv::conv2d_backward_data(&abs64(&gy64), &abs64(&w64), xs, &p).unwrap();
    bound(&dx, &want, &scale, "input gradient");
    let dw = conv::conv2d_backward_filter(&gy, &x, ws, &p).unwrap();
    let dw_bf16_input = conv::conv2d_backward_filter(&gy, &bf16(&x), ws, &p).unwrap();
    let want = conv::conv2d_backward_filter(&gy64, &x64, ws, &p).unwrap();
    let scale = conv::conv2d_backward_filter(&abs64(&gy64), &abs64(&x64), ws, &p).unwrap();
    // An f32 input gradient with an f32 input is the float32 path (no bf16 operand).
    assert!(max_of(&abs_diff(&dw, &want)) > 0.0);
    bound(&dw_bf16_input, &want, &scale, "weight gradient");
}

use wick_ops::attention::{
    scaled_dot_product_attention as sdpa, scaled_dot_product_attention_backward as sdpa_bwd,
    Attention,
};

/// What the attention checks compare: the output and the three gradients.
const ATTENTION_PARTS: [&str; 4] = ["output", "query gradient", "key gradient", "value gradient"];

/// Attention settings with `products`, and the same with float32 products.
fn attention_settings(products: Products, causal: bool, scale: f64) -> (Attention, Attention) {
    let a = Attention {
        scale,
        causal,
        dropout_p: 0.0,
        seed: 0,
        products,
    };
    let exact = Attention {
        products: Products::Native,
        ..a.clone()
    };
    (a, exact)
}

/// Attention's output and gradients ([`ATTENTION_PARTS`]) of `[q, k, v, output gradient]`.
fn attention_run([q, k, v, gy]: [&Tensor; 4], mask: Option<&Tensor>, a: &Attention) -> [Tensor; 4] {
    let y = sdpa(q, k, v, mask, a, 0).unwrap();
    let g = sdpa_bwd(q, k, v, &y, gy, mask, a, 0).unwrap();
    [y.out, g.q, g.k, g.v]
}

/// The fused attention with `products` against float64 on the operands as the products
/// read them (`low` rounds them), causal and not: every output within `bound` of the
/// largest value, and at least 16x float32's own error (the products were 16-bit).
fn check_attention(products: Products, low: Rounding, bound: f64) {
    for causal in [false, true] {
        // Two key tiles, a partial query tile, a key width that is not a multiple of 8.
        let operands = [
            randn(&[2, 3, 70, 12], 90),
            randn(&[2, 3, 150, 12], 91),
            randn(&[2, 3, 150, 10], 92),
            randn(&[2, 3, 70, 10], 93),
        ];
        let (a, exact) = attention_settings(products, causal, 0.3);
        // float64 on the operands as the products read them, and float32's own path.
        let want = attention_run(operands.each_ref().map(low).each_ref(), None, &exact);
        let rounded = operands
            .each_ref()
            .map(|t| low(t).to_dtype(DType::F32).unwrap());
        let f32_path = attention_run(rounded.each_ref(), None, &exact);
        let got = attention_run(operands.each_ref(), None, &a);
        for (i, what) in ATTENTION_PARTS.iter().enumerate() {
            assert_eq!(got[i].dtype(), DType::F32, "{what}: float32 out");
            let scale = max_of(&abs64(&want[i]));
            let err = max_of(&abs_diff(&got[i], &want[i])) / scale;
            let f32_err = max_of(&abs_diff(&f32_path[i], &want[i])) / scale;
            assert!(
                err < bound && err > 16.0 * f32_err,
                "{products:?}, causal {causal}: {what}: error {err:e}, float32 {f32_err:e} of the largest value"
            );
        }
    }
}

#[test]
fn bf16_attention_stays_within_bf16_rounding_of_float64() {
    // The weights and the logits' gradients are rounded to bf16 (2^-9 relative) before
    // their products: a few of those roundings, never float32's 1e-7.
    check_attention(Products::Bf16, rounded64, 2f64.powi(-6));
}

/// Off the CPU kernel (CUDA, and the generic path this test forces), autocast's attention
/// multiplies float32 `q`, `k`, `v` and output gradient rounded to the 16-bit values
/// autocast casts them to: within float32's error of float64 on those values, for bf16
/// and f16, with a mask; the unrounded operands would be 2^-9 (2^-12) off.
#[test]
fn generic_path_attention_multiplies_the_16_bit_values_of_its_operands() {
    use wick_ops::route::KernelPath;
    let operands = [
        randn(&[2, 40, 16], 94),
        randn(&[2, 50, 16], 95),
        randn(&[2, 50, 8], 96),
        randn(&[2, 40, 8], 97),
    ];
    let keep: Vec<u8> = (0..40 * 50).map(|i| u8::from(i % 7 != 3)).collect();
    let mask = Tensor::from_vec(keep, (40, 50), &Device::Cpu).unwrap();
    let low: [(Products, Rounding); 2] = [(Products::Bf16, rounded64), (Products::F16, f16_64)];
    for (products, low) in low {
        let (a, exact) = attention_settings(products, false, 0.25);
        let want = attention_run(operands.each_ref().map(low).each_ref(), Some(&mask), &exact);
        let got = KernelPath::Generic.scope(|| attention_run(operands.each_ref(), Some(&mask), &a));
        for (i, what) in ATTENTION_PARTS.iter().enumerate() {
            assert_eq!(
                got[i].dtype(),
                DType::F32,
                "{products:?} {what}: float32 out"
            );
            let err = max_of(&abs_diff(&got[i], &want[i])) / max_of(&abs64(&want[i]));
            assert!(
                err < 1e-5,
                "{products:?}: {what}: error {err:e} of the largest value"
            );
        }
    }
}

/// `t` rounded to float16 values, in float64.
fn f16_64(t: &Tensor) -> Tensor {
    t.to_dtype(DType::F16)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
}

fn f16(t: &Tensor) -> Tensor {
    cast(t, DType::F16).unwrap()
}

/// float16 products are exact in float32 (11-bit significands), so every f16 product,
/// forward and backward, is within float32 summation error of float64 on the float16
/// values, and differs from the float32 product of the unrounded operands.
#[test]
fn f16_products_match_float64_on_float16_values() {
    use wick_ops::tensor::matmul::MatMulShape;
    // Convolutions: an f16 weight (autocast's cast) and an f32 input rounded as read.
    let cases: [Case; 3] = [
        (&[3, 32, 8, 8], &[16, 32, 1, 1], 2, 0, 1),
        (&[2, 3, 20, 20], &[8, 3, 7, 7], 2, 3, 1),
        (&[2, 8, 6, 6], &[8, 4, 3, 3], 1, 1, 2),
    ];
    for (i, case) in cases.into_iter().enumerate() {
        check_conv(i, case, (f16, f16_64), Products::F16, false);
    }
    // A linear layer.
    let (x, w) = (randn(&[9, 70], 150), randn(&[11, 70], 151));
    let (x64, w64) = (f16_64(&x), f16_64(&w));
    let y = linear::linear(&x, &f16(&w), None).unwrap();
    against(
        "f16 linear",
        &y,
        |m| linear::linear(&m(&x64), &m(&w64), None).unwrap(),
        70,
    );
    let gy = randn(&[9, 11], 152);
    let gy64 = f16_64(&gy);
    let got = linear::linear_backward(&gy, &x, &f16(&w), false).unwrap();
    let grads = |m: &dyn Fn(&Tensor) -> Tensor| {
        linear::linear_backward(&m(&gy64), &m(&x64), &m(&w64), false).unwrap()
    };
    against("f16 linear input gradient", &got.x, |m| grads(m).x, 11);
    against(
        "f16 linear weight gradient",
        &got.weight,
        |m| grads(m).weight,
        9,
    );
    // A batched matmul of two activations.
    let (a, b) = (randn(&[2, 3, 5, 24], 160), randn(&[3, 24, 7], 161));
    matmul::check_matmul(Products::F16, f16_64, &a, &b, 162);
    let shape = MatMulShape::new(a.dims(), b.dims()).unwrap();
    // bf16 and f16 never meet in one product.
    let err = shape.forward(&bf16(&a), &f16(&b)).unwrap_err().to_string();
    assert_mentions(&err, &["matmul", "16-bit"]);
    let p = Conv2dParams::default();
    let (x, w) = (randn(&[1, 4, 3, 3], 1), randn(&[2, 4, 1, 1], 2));
    let err = conv::conv2d(&bf16(&x), &f16(&w), None, &p)
        .unwrap_err()
        .to_string();
    assert_mentions(&err, &["BF16", "F16"]);
}

#[test]
fn f16_attention_stays_within_f16_rounding_of_float64() {
    // f16 rounds to 2^-11 relative: a bound 4x tighter than bf16's.
    check_attention(Products::F16, f16_64, 2f64.powi(-8));
}

/// Asserts that `text` (an error message) mentions each of `words`, naming those missing.
#[track_caller]
pub fn assert_mentions(text: &str, words: &[&str]) {
    let missing: Vec<&&str> = words.iter().filter(|w| !text.contains(**w)).collect();
    assert!(missing.is_empty(), "{missing:?} missing from: {text}");
}
