//! The CPU depthwise convolution (one filter per channel) against candle's grouped
//! convolution (the device-generic path, itself checked against PyTorch's grouped fixture)
//! and finite differences: kernel sizes 3, 5 and 7, strides 1 and 2, dilation, padding,
//! non-square planes, and the fused epilogue.

use wick_ops::conv::{self, Conv2dParams, Epilogue};
use wick_ops::KernelPath;

use crate::common::*;

struct Case {
    c: usize,
    h: usize,
    w: usize,
    k: usize,
    p: Conv2dParams,
}

fn cases() -> Vec<Case> {
    let p = |s, pad, d| Conv2dParams {
        stride: [s, s],
        padding: [pad, pad],
        dilation: [d, d],
        groups: 1,
    };
    vec![
        Case {
            c: 4,
            h: 7,
            w: 6,
            k: 3,
            p: p(1, 1, 1),
        },
        Case {
            c: 3,
            h: 9,
            w: 8,
            k: 3,
            p: p(2, 1, 1),
        },
        Case {
            c: 5,
            h: 11,
            w: 7,
            k: 5,
            p: p(2, 2, 1),
        },
        Case {
            c: 2,
            h: 10,
            w: 10,
            k: 7,
            p: p(1, 3, 1),
        },
        Case {
            c: 3,
            h: 9,
            w: 9,
            k: 3,
            p: p(1, 2, 2),
        },
        Case {
            c: 2,
            h: 5,
            w: 6,
            k: 5,
            p: p(1, 0, 1),
        },
        Case {
            c: 3,
            h: 3,
            w: 3,
            k: 3,
            p: p(3, 2, 1),
        },
        // Rows wider than a 16-value register block, with a tail: ConvNeXt's 7x7 and a
        // 3x3 without padding (the input gradient padded by k - 1).
        Case {
            c: 3,
            h: 12,
            w: 37,
            k: 7,
            p: p(1, 3, 1),
        },
        Case {
            c: 2,
            h: 5,
            w: 34,
            k: 3,
            p: p(1, 0, 1),
        },
        // A row of 16 + 8 + 4 + 2 (the weight gradient's blocks of every size).
        Case {
            c: 2,
            h: 3,
            w: 30,
            k: 3,
            p: p(1, 1, 1),
        },
        // Rows of 4 to 15: half and quarter blocks and a tail.
        Case {
            c: 2,
            h: 4,
            w: 7,
            k: 7,
            p: p(1, 3, 1),
        },
        // Rows of 8 to 15.
        Case {
            c: 2,
            h: 8,
            w: 11,
            k: 7,
            p: p(1, 3, 1),
        },
        // Planes smaller than the kernel: taps that read only padding.
        Case {
            c: 2,
            h: 1,
            w: 1,
            k: 3,
            p: p(1, 1, 1),
        },
        Case {
            c: 2,
            h: 1,
            w: 1,
            k: 5,
            p: p(1, 2, 1),
        },
        Case {
            c: 2,
            h: 2,
            w: 1,
            k: 5,
            p: p(2, 2, 1),
        },
        Case {
            c: 2,
            h: 1,
            w: 2,
            k: 7,
            p: p(1, 3, 1),
        },
    ]
}

#[test]
fn depthwise_matches_the_generic_grouped_convolution_forward_and_backward() {
    for (i, case) in cases().into_iter().enumerate() {
        let p = case.p.with_groups(case.c);
        let x = rand_tensor(10 + i as u64, &[2, case.c, case.h, case.w]);
        let w = rand_tensor(20 + i as u64, &[case.c, 1, case.k, case.k]);
        let y = conv::conv2d(&x, &w, None, &p).unwrap();
        let gy = rand_tensor(30 + i as u64, y.dims());
        let dx = conv::conv2d_backward_data(&gy, &w, x.dims(), &p).unwrap();
        let dw = conv::conv2d_backward_filter(&gy, &x, w.dims(), &p).unwrap();
        let generic = KernelPath::Generic.scope(|| {
            (
                conv::conv2d(&x, &w, None, &p).unwrap(),
                conv::conv2d_backward_data(&gy, &w, x.dims(), &p).unwrap(),
                conv::conv2d_backward_filter(&gy, &x, w.dims(), &p).unwrap(),
            )
        });
        assert_close(&format!("case {i} forward"), &y, &generic.0, 1e-13);
        assert_close(&format!("case {i} input gradient"), &dx, &generic.1, 1e-13);
        assert_close(&format!("case {i} weight gradient"), &dw, &generic.2, 1e-13);
        let numeric = numeric_grad(|t| conv::conv2d(t, &w, None, &p).unwrap(), &x, &gy);
        assert_close(
            &format!("case {i} input gradient vs finite differences"),
            &dx,
            &numeric,
            FD_TOL,
        );
        let numeric = numeric_grad(|t| conv::conv2d(&x, t, None, &p).unwrap(), &w, &gy);
        assert_close(
            &format!("case {i} weight gradient vs finite differences"),
            &dw,
            &numeric,
            FD_TOL,
        );
    }
}

#[test]
fn depthwise_epilogue_matches_the_unfused_ops() {
    let p = Conv2dParams::new(1, 1).with_groups(4);
    let x = rand_tensor(1, &[2, 4, 6, 5]);
    let w = rand_tensor(2, &[4, 1, 3, 3]);
    let b = rand_tensor(3, &[4]);
    let r = rand_tensor(4, &[2, 4, 6, 5]);
    let epilogue = Epilogue {
        bias: Some(&b),
        residual: Some(&r),
        relu: true,
    };
    let fused = conv::conv2d_fused(&x, &w, &epilogue, &p).unwrap();
    let plain = conv::conv2d(&x, &w, Some(&b), &p).unwrap();
    let expected = wick_ops::relu(&(plain + &r).unwrap()).unwrap();
    assert_close("depthwise epilogue", &fused, &expected, 1e-15);
    // f32 agrees with f64 to float32 rounding.
    let y32 = conv::conv2d(
        &x.to_dtype(candle_core::DType::F32).unwrap(),
        &w.to_dtype(candle_core::DType::F32).unwrap(),
        None,
        &p,
    )
    .unwrap();
    let y64 = conv::conv2d(&x, &w, None, &p).unwrap();
    assert_close(
        "f32",
        &y32.to_dtype(candle_core::DType::F64).unwrap(),
        &y64,
        1e-6,
    );
}
