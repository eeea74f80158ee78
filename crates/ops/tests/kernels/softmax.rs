//! Softmax and log-softmax: wick's CPU kernel (rows when the dimension is the last,
//! columns side by side otherwise) against candle's generic ops, and in f32 against f64.

use candle_core::{DType, Tensor};
use wick_ops::tensor::nll::{log_softmax, log_softmax_backward};
use wick_ops::{norm, KernelPath};

use crate::common::*;

type Forward = fn(&Tensor, usize) -> wick_ops::Result<Tensor>;
type Backward = fn(&Tensor, &Tensor, usize) -> wick_ops::Result<Tensor>;

const KINDS: [(&str, Forward, Backward); 2] = [
    ("softmax", norm::softmax, norm::softmax_backward),
    ("log_softmax", log_softmax, log_softmax_backward),
];

/// Values spread over [-8, 8), with a masked (-inf) entry in the first row.
fn scores(seed: u64, dims: &[usize]) -> Tensor {
    let x = (rand_tensor(seed, dims) * 8.0).unwrap();
    let mut v = x.flatten_all().unwrap().to_vec1::<f64>().unwrap();
    v[1] = f64::NEG_INFINITY;
    Tensor::from_vec(v, dims, &candle_core::Device::Cpu).unwrap()
}

#[test]
fn cpu_kernel_matches_the_generic_path_along_every_dimension() {
    let cases: [(&[usize], usize); 6] = [
        (&[7, 13], 1),
        (&[2, 1000], 1),
        (&[3, 5, 4, 6], 1),
        (&[3, 5, 4, 6], 0),
        (&[3, 5, 4, 6], 3),
        (&[2, 4, 17, 17], 3),
    ];
    for (name, forward, backward) in KINDS {
        for (dims, dim) in cases {
            for dtype in [DType::F32, DType::F64] {
                let x = scores(1, dims).to_dtype(dtype).unwrap();
                let g = rand_tensor(2, dims).to_dtype(dtype).unwrap();
                let run = || {
                    let y = forward(&x, dim).unwrap();
                    let dx = backward(&g, &y, dim).unwrap();
                    (y, dx)
                };
                let (y, dx) = run();
                let (want_y, want_dx) = KernelPath::Generic.scope(run);
                let tol = if dtype == DType::F32 { 2e-6 } else { 1e-14 };
                let case = format!("{name} {dims:?} dim {dim} {dtype:?}");
                // The masked entry: softmax 0 on both paths, log-softmax -inf.
                let masked = y.flatten_all().unwrap().to_dtype(DType::F64).unwrap();
                let masked = masked.get(1).unwrap().to_scalar::<f64>().unwrap();
                assert!(
                    masked == 0.0 || masked == f64::NEG_INFINITY,
                    "{case}: {masked}"
                );
                let finite = |t: &Tensor| {
                    let t = t.to_dtype(DType::F64).unwrap();
                    let keep = t.abs().unwrap().le(1e300).unwrap();
                    keep.where_cond(&t, &t.zeros_like().unwrap()).unwrap()
                };
                assert_close(&format!("{case} y"), &finite(&y), &finite(&want_y), tol);
                assert_close(&format!("{case} dx"), &dx, &want_dx, tol);
            }
        }
    }
}

/// In f32 against the same kernel in f64: the f32 rows are as close as their rounding.
#[test]
fn float32_is_within_a_few_ulps_of_float64() {
    for (name, forward, backward) in KINDS {
        let x = (rand_tensor(3, &[16, 777]) * 8.0).unwrap();
        let g = rand_tensor(4, &[16, 777]);
        let y64 = forward(&x, 1).unwrap();
        let dx64 = backward(&g, &y64, 1).unwrap();
        let f32 = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
        let y32 = forward(&f32(&x), 1).unwrap();
        let dx32 = backward(&f32(&g), &y32, 1).unwrap();
        let back = |t: &Tensor| t.to_dtype(DType::F64).unwrap();
        assert_close(&format!("{name} y"), &back(&y32), &y64, 1e-6);
        assert_close(&format!("{name} dx"), &back(&dx32), &dx64, 1e-5);
    }
}

#[test]
fn a_nan_makes_its_row_nan_and_bad_input_names_the_op() {
    for (name, forward, backward) in KINDS {
        let x = Tensor::new(
            &[[1f32, f32::NAN, 2.0], [0.5, 0.25, 1.0]],
            &candle_core::Device::Cpu,
        )
        .unwrap();
        let y = forward(&x, 1).unwrap().to_vec2::<f32>().unwrap();
        assert!(y[0].iter().all(|v| v.is_nan()), "{name}: {y:?}");
        assert!(y[1].iter().all(|v| v.is_finite()), "{name}: {y:?}");
        assert_error_names(forward(&x, 2), &[name, "dimension 2", "[2, 3]"]);
        let g = x.to_dtype(DType::F64).unwrap();
        let y = forward(&x, 1).unwrap();
        assert_error_names(backward(&g, &y, 1), &[name, "F64", "F32"]);
    }
}
