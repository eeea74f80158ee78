//! bf16 products in `matmul`: an activation and a weight (autocast's), two activations
//! (batched and broadcast), and a bf16 operand of a batched product, against float64.

use super::*;

#[test]
fn bf16_matmul_of_an_activation_and_a_weight_matches_float64() {
    use wick_ops::tensor::matmul::MatMulShape;
    let (a, b) = (randn(&[2, 5, 24], 80), randn(&[24, 7], 81));
    let shape = MatMulShape::new(a.dims(), b.dims()).unwrap();
    let (a64, b64) = (rounded64(&a), rounded64(&b));
    let y = shape.forward(&a, &bf16(&b)).unwrap();
    assert_eq!(y.dims(), [2, 5, 7]);
    against(
        "matmul forward",
        &y,
        |m| shape.forward(&m(&a64), &m(&b64)).unwrap(),
        24,
    );
    let gy = randn(&[2, 5, 7], 82);
    let gy64 = rounded64(&gy);
    let ga = shape.backward_a(&gy, &bf16(&b)).unwrap();
    against(
        "matmul input gradient",
        &ga,
        |m| shape.backward_a(&m(&gy64), &m(&b64)).unwrap(),
        7,
    );
    let gb = shape.backward_b(&gy, &bf16(&a)).unwrap();
    against(
        "matmul weight gradient",
        &gb,
        |m| shape.backward_b(&m(&gy64), &m(&a64)).unwrap(),
        10,
    );
    // The weight gradient with bf16 products forced (autocast's, reading f32 values) is
    // the one of a bf16 operand: the same rounding, as the product reads it.
    let forced = shape.backward_b_with(&gy, &a, Products::Bf16).unwrap();
    assert_eq!(
        max_of(&abs_diff(&forced, &gb.to_dtype(DType::F64).unwrap())),
        0.0
    );
    assert!(
        max_of(&abs_diff(
            &forced,
            &shape
                .backward_b(&gy, &a)
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap()
        )) > 0.0
    );
    // A bf16 operand with batch dimensions on the right takes the batched bf16 product,
    // forward and both gradients, as autocast's product of two activations does.
    let batched = MatMulShape::new(&[2, 5, 24], &[2, 24, 7]).unwrap();
    let b3 = randn(&[2, 24, 7], 83);
    let b3_64 = rounded64(&b3);
    let y = batched.forward(&a, &bf16(&b3)).unwrap();
    assert_eq!((y.dims(), y.dtype()), ([2, 5, 7].as_slice(), DType::F32));
    against(
        "batched matmul forward",
        &y,
        |m| batched.forward(&m(&a64), &m(&b3_64)).unwrap(),
        24,
    );
    let ga = batched.backward_a(&gy, &bf16(&b3)).unwrap();
    let want = batched.backward_a_with(&gy, &b3, Products::Bf16).unwrap();
    assert_eq!(
        max_of(&abs_diff(&ga, &want.to_dtype(DType::F64).unwrap())),
        0.0
    );
    let gb = batched.backward_b(&gy, &bf16(&a)).unwrap();
    against(
        "batched matmul gradient of b",
        &gb,
        |m| batched.backward_b(&m(&gy64), &m(&a64)).unwrap(),
        5,
    );
    // A bf16 operand beside a float64 one is refused by name, not run wrongly.
    let a64_operand = a.to_dtype(DType::F64).unwrap();
    let err = batched
        .forward(&a64_operand, &bf16(&b3))
        .unwrap_err()
        .to_string();
    assert_mentions(&err, &["matmul", "F64"]);
}

#[test]
fn bf16_batched_matmul_of_two_activations_matches_float64() {
    use wick_ops::tensor::matmul::MatMulShape;
    // Batched with broadcasting (b is shared by a's first batch dimension), and flat.
    for (ad, bd, seed) in [
        (&[2usize, 3, 5, 24][..], &[3usize, 24, 7][..], 100u64),
        (&[6, 24][..], &[24, 9][..], 110),
    ] {
        let (a, b) = (randn(ad, seed), randn(bd, seed + 1));
        let y = check_matmul(Products::Bf16, rounded64, &a, &b, seed + 2);
        let f32_product = MatMulShape::new(ad, bd).unwrap().forward(&a, &b).unwrap();
        assert!(max_of(&abs_diff(&y, &f32_product.to_dtype(DType::F64).unwrap())) > 0.0);
    }
}

/// A matmul of two activations with `products`, its forward and both gradients (output
/// gradient drawn with `seed`) against float64 on the operands as `rounded` rounds them;
/// returns the forward's output.
pub(crate) fn check_matmul(
    products: Products,
    rounded: fn(&Tensor) -> Tensor,
    a: &Tensor,
    b: &Tensor,
    seed: u64,
) -> Tensor {
    use wick_ops::tensor::matmul::MatMulShape;
    let what = format!("{products:?} matmul {:?} x {:?}", a.dims(), b.dims());
    let shape = MatMulShape::new(a.dims(), b.dims()).unwrap();
    let (a64, b64) = (rounded(a), rounded(b));
    let y = shape.forward_with(a, b, products).unwrap();
    let forward = |m: &dyn Fn(&Tensor) -> Tensor| shape.forward(&m(&a64), &m(&b64)).unwrap();
    against(&format!("{what} forward"), &y, forward, 24);
    let gy = randn(y.dims(), seed);
    let gy64 = rounded(&gy);
    let ga = shape.backward_a_with(&gy, b, products).unwrap();
    let grad_a = |m: &dyn Fn(&Tensor) -> Tensor| shape.backward_a(&m(&gy64), &m(&b64)).unwrap();
    against(&format!("{what} gradient of a"), &ga, grad_a, 9);
    let gb = shape.backward_b_with(&gy, a, products).unwrap();
    assert_eq!(gb.dims(), b.dims());
    // Summed over the batch dimensions b was broadcast along.
    let grad_b = |m: &dyn Fn(&Tensor) -> Tensor| shape.backward_b(&m(&gy64), &m(&a64)).unwrap();
    against(&format!("{what} gradient of b"), &gb, grad_b, 10);
    y
}
