//! The bfloat16 GEMM's operands: values of either kind, with strides.

/// A GEMM operand's values: float32 (rounded as packed) or bfloat16 bits.
#[derive(Debug, Clone, Copy)]
pub enum Values<'a> {
    /// float32 values, rounded to the nearest bfloat16 (ties to even) as they are packed.
    F32(&'a [f32]),
    /// bfloat16 values, as their bits.
    Bf16(&'a [u16]),
}

/// A GEMM operand: values and the (row, column) strides of its element (r, c).
#[derive(Debug, Clone, Copy)]
pub struct Matrix<'a> {
    /// The elements.
    pub values: Values<'a>,
    /// Element (r, c) is `values[r * strides.0 + c * strides.1]`.
    pub strides: (usize, usize),
}
