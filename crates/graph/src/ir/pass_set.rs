//! Which graph passes to run, and what each did: the graph keeps the log of the passes
//! that rewrote it. The passes themselves are in [`passes`](crate::passes).

use std::fmt;
use std::str::FromStr;

/// One graph pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PassName {
    /// Folds inference batch norms into the convolutions before them.
    FoldBatchNorm,
    /// Fuses the residual add and ReLU after a fused convolution into its output write.
    ConvEpilogue,
    /// Runs max poolings whose argmax indices nothing reads without computing them.
    MaxPoolValues,
    /// Fuses training batch norm + ReLU, forward and backward.
    BatchNormRelu,
    /// Fuses add + ReLU.
    AddRelu,
    /// Fuses a bias add + GELU or SiLU, forward and backward.
    BiasActivation,
    /// Merges the SGD (and the Adam) updates with equal settings into one node (one CUDA
    /// launch).
    MultiTensorUpdate,
}

impl PassName {
    /// Every pass, in the order the pipeline runs them.
    pub const ALL: [PassName; 7] = [
        PassName::FoldBatchNorm,
        PassName::ConvEpilogue,
        PassName::MaxPoolValues,
        PassName::BatchNormRelu,
        PassName::AddRelu,
        PassName::BiasActivation,
        PassName::MultiTensorUpdate,
    ];

    /// The pass's name (`fold_batch_norm`).
    pub fn as_str(self) -> &'static str {
        match self {
            PassName::FoldBatchNorm => "fold_batch_norm",
            PassName::ConvEpilogue => "conv_epilogue",
            PassName::MaxPoolValues => "max_pool_values",
            PassName::BatchNormRelu => "batch_norm_relu",
            PassName::AddRelu => "add_relu",
            PassName::BiasActivation => "bias_activation",
            PassName::MultiTensorUpdate => "multi_tensor_update",
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

/// Which passes to run: `default`, `all`, `none`, or a comma-separated list of names, as
/// the examples' `--passes` takes it. They always run in pipeline order
/// ([`PassName::ALL`]). `default` is every pass but `multi_tensor_update`, which would
/// merge the profiler's per-layer optimizer rows into one; a CUDA session adds it to
/// `default`, where it saves a launch per parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PassSet(u32);

impl PassSet {
    /// No pass: the graph runs as recorded.
    pub const NONE: PassSet = PassSet(0);

    /// Every pass.
    pub fn all() -> Self {
        PassSet(PassName::ALL.iter().fold(0, |acc, p| acc | p.bit()))
    }

    /// This set with `pass` too.
    pub fn with(self, pass: PassName) -> Self {
        PassSet(self.0 | pass.bit())
    }

    /// This set without `pass`.
    pub fn without(self, pass: PassName) -> Self {
        PassSet(self.0 & !pass.bit())
    }

    /// Whether `pass` is selected.
    pub fn contains(&self, pass: PassName) -> bool {
        self.0 & pass.bit() != 0
    }

    /// The selected passes in pipeline order.
    pub fn passes(&self) -> impl Iterator<Item = PassName> + '_ {
        PassName::ALL.into_iter().filter(|p| self.contains(*p))
    }
}

impl Default for PassSet {
    /// Every pass but `multi_tensor_update` (see [`PassSet`]).
    fn default() -> Self {
        PassSet::all().without(PassName::MultiTensorUpdate)
    }
}

impl FromStr for PassSet {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "default" => return Ok(PassSet::default()),
            "all" => return Ok(PassSet::all()),
            "none" | "" => return Ok(PassSet::NONE),
            _ => {}
        }
        let mut set = PassSet::NONE;
        for name in s.split(',').map(str::trim) {
            let pass = PassName::ALL
                .into_iter()
                .find(|p| p.as_str() == name)
                .ok_or_else(|| {
                    let known: Vec<&str> = PassName::ALL.iter().map(|p| p.as_str()).collect();
                    format!(
                        "unknown pass `{name}`: expected default, all, none or a comma-separated list of {}",
                        known.join(", ")
                    )
                })?;
            set.0 |= pass.bit();
        }
        Ok(set)
    }
}

impl fmt::Display for PassSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.passes().map(PassName::as_str).collect();
        if names.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&names.join(","))
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassRecord {
    /// The pass.
    pub pass: PassName,
    /// Subgraphs it matched and replaced.
    pub subgraphs: usize,
}

impl fmt::Display for PassRecord {
    /// Paddle's log line: `--- Running IR pass [NAME] --- detected N subgraphs`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "--- Running IR pass [{}] --- detected {} subgraphs",
            self.pass.as_str(),
            self.subgraphs
        )
    }
}
