//! bfloat16 products on the path a CPU without AVX512-BF16 takes, forced on every CPU
//! with `Bf16Path::Widening.scope`: a convolution rounds its operands to bfloat16 once
//! and runs the float32 kernels (their own algorithm choices, Winograd included), so
//! each pass is, bit for bit, the float32 pass on the rounded operands.

use super::*;

/// The bfloat16 values of `t`, in float32.
fn rounded32(t: &Tensor) -> Tensor {
    cast(&bf16(t), DType::F32).unwrap()
}

fn bits(t: &Tensor) -> Vec<u32> {
    let v: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
    v.into_iter().map(f32::to_bits).collect()
}

#[test]
fn widening_convolutions_are_float32_convolutions_of_the_rounded_operands() {
    for (path, here) in [
        (Bf16Path::Native, has_avx512_bf16()),
        (Bf16Path::Amx, has_amx()),
    ] {
        assert_eq!(
            path.scope(Bf16Path::current),
            if here { path } else { Bf16Path::best() },
            "{path:?} only where the CPU has it"
        );
    }
    assert_eq!(
        Bf16Path::Widening.scope(Bf16Path::current),
        Bf16Path::Widening
    );
    // (input, weight, stride, padding, groups): a 3x3 with 128 output tiles (Winograd in
    // float32), a 7x7 stride-2 stem, a strided 1x1, a grouped 3x3, 4x4 planes over the batch.
    let cases: [Case; 5] = [
        (&[8, 16, 8, 8], &[16, 16, 3, 3], 1, 1, 1),
        (&[2, 3, 20, 20], &[8, 3, 7, 7], 2, 3, 1),
        (&[3, 32, 8, 8], &[16, 32, 1, 1], 2, 0, 1),
        (&[2, 8, 6, 6], &[8, 4, 3, 3], 1, 1, 2),
        (&[6, 20, 4, 4], &[24, 20, 3, 3], 1, 1, 1),
    ];
    for (i, (xs, ws, stride, pad, groups)) in cases.into_iter().enumerate() {
        let p = Conv2dParams {
            stride: [stride; 2],
            padding: [pad; 2],
            dilation: [1, 1],
            groups,
        };
        let (x, w, b) = (randn(xs, 90 + i as u64), randn(ws, 95), randn(&[ws[0]], 96));
        let gy = randn(&p.output_shape(xs, ws).unwrap(), 97);
        let [y, dx, dw] = Bf16Path::Widening.scope(|| {
            [
                conv::conv2d(&x, &bf16(&w), Some(&b), &p).unwrap(),
                conv::conv2d_backward_data(&gy, &bf16(&w), xs, &p).unwrap(),
                conv::conv2d_backward_filter_with(&gy, &x, ws, &p, Products::Bf16).unwrap(),
            ]
        });
        let (x, w, gy) = (rounded32(&x), rounded32(&w), rounded32(&gy));
        let want = [
            conv::conv2d(&x, &w, Some(&b), &p).unwrap(),
            conv::conv2d_backward_data(&gy, &w, xs, &p).unwrap(),
            conv::conv2d_backward_filter(&gy, &x, ws, &p).unwrap(),
        ];
        for (pass, (got, want)) in ["forward", "input gradient", "weight gradient"]
            .into_iter()
            .zip([y, dx, dw].iter().zip(&want))
        {
            assert!(
                bits(got) == bits(want),
                "case {i} {pass}: not the float32 pass's bits"
            );
        }
    }
}
