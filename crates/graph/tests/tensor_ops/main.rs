//! The tensor language against PyTorch (fixtures/tensor-ops, made by
//! scripts/make_tensor_op_fixtures.py): every case built from builder calls, run in
//! float64 (to 1e-10 of PyTorch's float64) and float32 (next to PyTorch's own float32
//! error), and every gradient against central differences, on wick's CPU kernels and on
//! candle's generic path; and the ops' errors.

#[path = "../common/mod.rs"]
mod common;

mod cases;
mod errors;
mod runner;

use runner::{check_case, Precision};

#[test]
fn every_case_matches_pytorch_in_float64_and_finite_differences() {
    let mut rows = Vec::new();
    for case in cases::CASES {
        let f64_err = check_case(case, Precision::F64);
        let f32_err = check_case(case, Precision::F32);
        rows.push((case.name, f64_err, f32_err.0, f32_err.1));
    }
    println!(
        "{:<28} {:>11} {:>11} {:>13}",
        "case", "wick f64", "wick f32", "PyTorch f32"
    );
    for (name, e64, e32, torch32) in &rows {
        println!("{name:<28} {:>11.2e} {e32:>11.2e} {torch32:>13.2e}", e64.0);
    }
    assert_eq!(rows.len(), cases::CASES.len());
}

/// candle's device-generic path, which CUDA tensors take for these ops, against the same
/// fixtures (the test above runs wick's CPU kernels).
#[test]
fn every_case_matches_pytorch_on_candles_generic_path_too() {
    for case in cases::CASES {
        wick_ops::KernelPath::Generic.scope(|| {
            check_case(case, Precision::F64);
            check_case(case, Precision::F32);
        });
    }
}
