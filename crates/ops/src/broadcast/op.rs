//! The element-wise binary ops and their operands.

/// A binary element-wise operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
}

/// Which operand of a binary op a gradient is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operand {
    /// The left operand, `a`.
    Lhs,
    /// The right operand, `b`.
    Rhs,
}

impl BinaryOp {
    /// The forward kernel's name.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "BroadcastAdd",
            BinaryOp::Sub => "Sub",
            BinaryOp::Mul => "Mul",
            BinaryOp::Div => "Div",
        }
    }

    /// The backward kernel's name.
    pub fn backward_name(self) -> &'static str {
        match self {
            BinaryOp::Add => "BroadcastAddBackward",
            BinaryOp::Sub => "SubBackward",
            BinaryOp::Mul => "MulBackward",
            BinaryOp::Div => "DivBackward",
        }
    }

    /// Whether an operand's gradient needs the operands' values (not only the output
    /// gradient).
    pub fn backward_reads_operands(self) -> bool {
        matches!(self, BinaryOp::Mul | BinaryOp::Div)
    }
}
