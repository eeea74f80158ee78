//! Which reduction: the kernel's identity, its names and whether it has a gradient.

/// Which reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// The sum.
    Sum,
    /// The mean.
    Mean,
    /// The maximum (its gradient shared evenly among ties, as PyTorch's `amax`).
    Amax,
    /// The minimum (likewise).
    Amin,
    /// `log Σ exp(x)`, computed stably.
    LogSumExp,
    /// The variance with Bessel's `correction` (PyTorch's default 1).
    Var,
    /// The index of the maximum (the first of ties; `u32`; no gradient).
    Argmax,
    /// The index of the minimum (likewise).
    Argmin,
}

impl Reduction {
    /// The forward kernel's name.
    pub fn name(self) -> &'static str {
        match self {
            Reduction::Sum => "Sum",
            Reduction::Mean => "Mean",
            Reduction::Amax => "Amax",
            Reduction::Amin => "Amin",
            Reduction::LogSumExp => "LogSumExp",
            Reduction::Var => "Var",
            Reduction::Argmax => "Argmax",
            Reduction::Argmin => "Argmin",
        }
    }

    /// The gradient kernel's name.
    pub fn backward_name(self) -> &'static str {
        match self {
            Reduction::Sum => "SumBackward",
            Reduction::Mean => "MeanBackward",
            Reduction::Amax => "AmaxBackward",
            Reduction::Amin => "AminBackward",
            Reduction::LogSumExp => "LogSumExpBackward",
            Reduction::Var => "VarBackward",
            Reduction::Argmax => "ArgmaxBackward",
            Reduction::Argmin => "ArgminBackward",
        }
    }

    /// The builder call's name, for errors.
    pub fn op_name(self) -> &'static str {
        match self {
            Reduction::Sum => "sum",
            Reduction::Mean => "mean",
            Reduction::Amax => "amax",
            Reduction::Amin => "amin",
            Reduction::LogSumExp => "logsumexp",
            Reduction::Var => "var",
            Reduction::Argmax => "argmax",
            Reduction::Argmin => "argmin",
        }
    }

    /// Whether a gradient flows through it.
    pub fn differentiable(self) -> bool {
        !matches!(self, Reduction::Argmax | Reduction::Argmin)
    }
}
