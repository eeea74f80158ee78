//! Winograd F(2x2, 3x3) (the CPU's 3x3 stride-1 convolutions with 16+ channels) against
//! im2col + GEMM and against float64: forward, input gradient and weight gradient, with
//! bias/residual/ReLU, paddings 0 to 2, odd sizes (partial tiles), batches split into
//! chunks; and the shapes where im2col stays.

use candle_core::{DType, Tensor};

use crate::common::rand_tensor;
use wick_ops::conv::{
    conv2d_backward_data, conv2d_backward_filter, conv2d_fused, ConvAlgorithm, Epilogue,
};
use wick_ops::{max_rel_diff, Conv2dParams};

/// (n, c_in, h, w, c_out, padding): whole-batch and per-image chunks, odd sizes, pads 0-2.
const SHAPES: [[usize; 6]; 7] = [
    [2, 16, 16, 16, 16, 1],
    [32, 64, 4, 4, 64, 1],
    [8, 32, 9, 7, 24, 1],
    [32, 64, 8, 8, 64, 1],
    [1, 16, 33, 31, 16, 0],
    [3, 16, 12, 12, 32, 2],
    [8, 24, 8, 8, 16, 1],
];

/// Forward and input gradient of one shape in `dtype` under `algo`.
fn run(shape: [usize; 6], dtype: DType, algo: ConvAlgorithm) -> (Tensor, Tensor) {
    let [n, ci, h, w, co, pad] = shape;
    let p = Conv2dParams::new(1, pad);
    let x = rand_tensor(1, &[n, ci, h, w]).to_dtype(dtype).unwrap();
    let wt = (rand_tensor(2, &[co, ci, 3, 3]) * 0.2)
        .unwrap()
        .to_dtype(dtype)
        .unwrap();
    let (oh, ow) = (h + 2 * pad - 2, w + 2 * pad - 2);
    let bias = rand_tensor(3, &[co]).to_dtype(dtype).unwrap();
    let residual = rand_tensor(4, &[n, co, oh, ow]).to_dtype(dtype).unwrap();
    let gy = rand_tensor(5, &[n, co, oh, ow]).to_dtype(dtype).unwrap();
    algo.scope(|| {
        let epi = Epilogue {
            bias: Some(&bias),
            residual: Some(&residual),
            relu: true,
        };
        let y = conv2d_fused(&x, &wt, &epi, &p).unwrap();
        let dx = conv2d_backward_data(&gy, &wt, &[n, ci, h, w], &p).unwrap();
        (y, dx)
    })
}

#[test]
fn winograd_matches_im2col_and_float64_as_closely_as_im2col_does() {
    for shape in SHAPES {
        let (y64, dx64) = run(shape, DType::F64, ConvAlgorithm::Im2col);
        let (yw64, dxw64) = run(shape, DType::F64, ConvAlgorithm::Auto);
        // In float64 the two algorithms agree to float64 rounding.
        assert!(max_rel_diff(&yw64, &y64).unwrap() < 1e-13, "{shape:?}");
        assert!(max_rel_diff(&dxw64, &dx64).unwrap() < 1e-13, "{shape:?}");
        let (yi, dxi) = run(shape, DType::F32, ConvAlgorithm::Im2col);
        let (yw, dxw) = run(shape, DType::F32, ConvAlgorithm::Auto);
        // Winograd ran: its float32 rounding differs from im2col's.
        assert!(
            max_rel_diff(&yw, &yi).unwrap() > 0.0,
            "{shape:?}: Winograd did not run"
        );
        let err =
            |a: &Tensor, b: &Tensor| max_rel_diff(&a.to_dtype(DType::F64).unwrap(), b).unwrap();
        let (ey, eyi) = (err(&yw, &y64), err(&yi, &y64));
        let (edx, edxi) = (err(&dxw, &dx64), err(&dxi, &dx64));
        println!("{shape:?}: forward {ey:.1e} (im2col {eyi:.1e}), input gradient {edx:.1e} (im2col {edxi:.1e})");
        assert!(
            ey <= 4.0 * eyi.max(1e-7) && ey < 1e-5,
            "{shape:?}: forward {ey:.2e} vs {eyi:.2e}"
        );
        assert!(
            edx <= 4.0 * edxi.max(1e-7) && edx < 1e-5,
            "{shape:?}: input gradient {edx:.2e} vs {edxi:.2e}"
        );
    }
}

#[test]
fn small_images_and_few_channels_keep_im2col() {
    // 2x2 outputs (1 tile per image), 4x4 outputs in a batch of 16 (64 tiles), 8
    // channels, or one 14x14 image (49 tiles): the transforms would cost more than they
    // save, so both choices give the same bits.
    for shape in [
        [128, 64, 2, 2, 64, 1],
        [16, 64, 4, 4, 64, 1],
        [8, 8, 16, 16, 8, 1],
        [1, 64, 14, 14, 64, 1],
    ] {
        let (yi, dxi) = run(shape, DType::F32, ConvAlgorithm::Im2col);
        let (ya, dxa) = run(shape, DType::F32, ConvAlgorithm::Auto);
        assert_eq!(max_rel_diff(&ya, &yi).unwrap(), 0.0, "{shape:?}");
        assert_eq!(max_rel_diff(&dxa, &dxi).unwrap(), 0.0, "{shape:?}");
    }
}

/// The weight gradient of one shape in `dtype` under `algo`.
fn weight_gradient(
    [n, ci, h, w, co, pad]: [usize; 6],
    dtype: DType,
    algo: ConvAlgorithm,
) -> Tensor {
    let p = Conv2dParams::new(1, pad);
    let x = rand_tensor(6, &[n, ci, h, w]).to_dtype(dtype).unwrap();
    let (oh, ow) = (h + 2 * pad - 2, w + 2 * pad - 2);
    let gy = rand_tensor(7, &[n, co, oh, ow]).to_dtype(dtype).unwrap();
    algo.scope(|| conv2d_backward_filter(&gy, &x, &[co, ci, 3, 3], &p).unwrap())
}

#[test]
fn winograd_weight_gradient_runs_where_it_pays_and_matches_float64() {
    // Where the Winograd weight gradient runs (true: 8x8 to 64x64 outputs, 512+ tiles in
    // the batch): whole and partial tiles (odd sizes), paddings 0 to 2, channel counts
    // that are not multiples of the 16-channel blocks, several images per chunk, chunks
    // split across threads (a dU per thread), past 128 x 128 channels one shared dU, and
    // images larger than a chunk (56x56 outputs, 784 tiles). Where it does not pay
    // (false: 4x4 outputs, 4 tiles per image; 66x66 outputs, 1089; batches of 128 and
    // 256 tiles), the same bits as im2col + GEMM.
    for (shape, winograd) in [
        ([8, 16, 16, 16, 24, 1], true),
        ([2, 32, 32, 31, 16, 1], true),
        ([5, 16, 20, 18, 40, 2], true),
        ([3, 24, 34, 33, 16, 0], true),
        ([16, 64, 16, 16, 64, 1], true),
        ([32, 16, 8, 8, 24, 1], true),
        ([8, 160, 16, 16, 128, 1], true),
        ([32, 32, 4, 4, 32, 1], false),
        ([1, 16, 56, 56, 16, 1], true),
        ([1, 16, 66, 66, 16, 1], false),
        ([8, 32, 8, 8, 32, 1], false),
        ([4, 256, 16, 16, 128, 1], false),
    ] {
        let dwi = weight_gradient(shape, DType::F32, ConvAlgorithm::Im2col);
        let dww = weight_gradient(shape, DType::F32, ConvAlgorithm::Auto);
        let diff = max_rel_diff(&dww, &dwi).unwrap();
        if !winograd {
            assert_eq!(diff, 0.0, "{shape:?}: Winograd ran");
            continue;
        }
        assert!(diff > 0.0, "{shape:?}: Winograd did not run");
        let dw64 = weight_gradient(shape, DType::F64, ConvAlgorithm::Im2col);
        let dww64 = weight_gradient(shape, DType::F64, ConvAlgorithm::Auto);
        assert!(max_rel_diff(&dww64, &dw64).unwrap() < 1e-13, "{shape:?}");
        let err = |a: &Tensor| max_rel_diff(&a.to_dtype(DType::F64).unwrap(), &dw64).unwrap();
        let (e, ei) = (err(&dww), err(&dwi));
        println!("{shape:?}: weight gradient {e:.1e} (im2col {ei:.1e})");
        assert!(
            e <= 4.0 * ei.max(1e-7) && e < 1e-5,
            "{shape:?}: {e:.2e} vs {ei:.2e}"
        );
    }
}
