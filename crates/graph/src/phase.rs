//! Which part of the training iteration a node belongs to.

/// Which part of the training iteration a node belongs to. Set when the node is recorded.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// The forward pass, including the loss.
    Forward,
    /// The backward pass (gradients).
    Backward,
    /// The optimizer's parameter updates.
    Optimizer,
}

impl Phase {
    /// All phases in execution order.
    pub const ALL: [Phase; 3] = [Phase::Forward, Phase::Backward, Phase::Optimizer];

    /// A lowercase name (`forward`, `backward`, `optimizer`).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
        }
    }
}
