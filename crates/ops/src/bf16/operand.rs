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

impl<'a> Matrix<'a> {
    /// `values` read with `strides`: `(cols, 1)` for a row-major matrix, `(1, cols)` for
    /// its transpose.
    pub fn new(values: impl Into<Values<'a>>, strides: (usize, usize)) -> Self {
        Matrix {
            values: values.into(),
            strides,
        }
    }
}

impl<'a> From<&'a [f32]> for Values<'a> {
    fn from(v: &'a [f32]) -> Self {
        Values::F32(v)
    }
}

impl<'a> From<&'a [u16]> for Values<'a> {
    fn from(v: &'a [u16]) -> Self {
        Values::Bf16(v)
    }
}

impl<'a> From<&'a Vec<f32>> for Values<'a> {
    fn from(v: &'a Vec<f32>) -> Self {
        Values::F32(v)
    }
}

impl<'a> From<&'a Vec<u16>> for Values<'a> {
    fn from(v: &'a Vec<u16>) -> Self {
        Values::Bf16(v)
    }
}
