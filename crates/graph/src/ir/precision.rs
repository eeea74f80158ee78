//! Mixed precision as a graph policy, PyTorch's `torch.autocast` (the builder's side is
//! in `nodes::cast`): under [`Precision::Bf16Autocast`] (or
//! [`Precision::F16Autocast`]) the builder records a cast to bfloat16 (float16) of each
//! convolution's and linear layer's weight, and the product runs with 16-bit products
//! and float32 sums, giving a float32 output: its float32 input is rounded as the
//! product reads it (a cast fused into the product, with the same values a cast node
//! would give, and no bfloat16 copy of the activation kept), and its gradients are
//! computed the same way. Everything else (norms, softmax, losses, reductions,
//! element-wise ops, the optimizer) stays float32, and so do the parameters (the master
//! weights), the optimizer state and the checkpoints: a mixed-precision checkpoint loads
//! anywhere. Each weight is cast once per step however many products read it.
//! Depthwise convolutions (a few values deep per output) stay float32: they are
//! memory-bound, and bfloat16 products would only round them.

use std::collections::HashMap;

use candle_core::DType;

use super::value::ValueId;

/// The precision policy of a graph's products.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// Everything in float32.
    #[default]
    F32,
    /// Convolutions, linear layers, matmuls and attention with bfloat16 operands and
    /// float32 sums (`torch.autocast("cpu", dtype=torch.bfloat16)`).
    Bf16Autocast,
    /// The same with float16 operands (`torch.autocast(device, dtype=torch.float16)`):
    /// float16's narrow range needs loss scaling (`GradScaler`), which training under it
    /// turns on.
    F16Autocast,
}

impl Precision {
    /// Every policy, by its command-line name.
    pub const ALL: [(&'static str, Precision); 3] = [
        ("f32", Precision::F32),
        ("bf16", Precision::Bf16Autocast),
        ("f16", Precision::F16Autocast),
    ];

    /// The policy named `name` (`f32`, `bf16` or `f16`).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, p)| *p)
    }

    /// How profiles name it: `F32`, `BF16 autocast` or `F16 autocast` (16-bit products,
    /// f32 weights).
    pub fn profile_name(self) -> &'static str {
        match self {
            Precision::F32 => "F32",
            Precision::Bf16Autocast => "BF16 autocast",
            Precision::F16Autocast => "F16 autocast",
        }
    }

    /// Its command-line name.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, p)| *p == self)
            .map_or("f32", |(n, _)| n)
    }

    /// The dtype its products' operands are cast to, if any.
    pub fn low_dtype(self) -> Option<DType> {
        match self {
            Precision::F32 => None,
            Precision::Bf16Autocast => Some(DType::BF16),
            Precision::F16Autocast => Some(DType::F16),
        }
    }

    /// The products of a product of two float32 activations under this policy.
    pub fn products(self) -> wick_ops::Products {
        self.low_dtype()
            .map_or(wick_ops::Products::Native, wick_ops::Products::of)
    }
}

impl std::str::FromStr for Precision {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Self::parse(s).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
            format!("unknown precision `{s}`: use one of {}", names.join(", "))
        })
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The dtype of a product's output for an input and a weight of these dtypes: float32
/// when either is a low-precision dtype (float32 sums), the input's otherwise.
pub(crate) fn product_output_dtype(input: DType, weight: DType) -> DType {
    let low = |d: DType| matches!(d, DType::BF16 | DType::F16);
    if low(input) || low(weight) {
        DType::F32
    } else {
        input
    }
}

/// The builder's autocast state: the policy, and each value's cast so far.
#[derive(Debug, Default)]
pub(crate) struct Autocast {
    pub(crate) precision: Precision,
    pub(crate) casts: HashMap<ValueId, ValueId>,
}
