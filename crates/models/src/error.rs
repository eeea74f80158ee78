//! The error type of wick-models.

use std::path::PathBuf;

/// What went wrong with a model or a checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The graph could not be built or run.
    #[error(transparent)]
    Graph(Box<wick_graph::GraphError>),
    /// An invalid configuration (model name, input size, class count).
    #[error("{0}")]
    Config(String),
    /// A session used in a way its state does not allow (a step on an inference session,
    /// a state dict before any weights, a result that was not kept).
    #[error("{0}")]
    State(String),
    /// A checkpoint file could not be read or parsed.
    #[error("checkpoint {path}: {message}")]
    Checkpoint {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A data file (CIFAR-10 binary, batch file) could not be used.
    #[error("data file {path}: {message}")]
    Data {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A checkpoint lacks tensors the model needs.
    #[error("checkpoint {path}: missing tensor(s) {names:?} (expected by the model)")]
    MissingTensors {
        /// The file.
        path: PathBuf,
        /// The missing names.
        names: Vec<String>,
    },
    /// A checkpoint has tensors the model does not know.
    #[error("checkpoint {path}: unexpected tensor(s) {names:?} (not in the model)")]
    ExtraTensors {
        /// The file.
        path: PathBuf,
        /// The unknown names.
        names: Vec<String>,
    },
    /// A tensor has the wrong shape.
    #[error(
        "checkpoint {path}: tensor `{name}` has shape {found:?}, the model expects {expected:?}"
    )]
    ShapeMismatch {
        /// The file.
        path: PathBuf,
        /// The tensor's name.
        name: String,
        /// The model's shape.
        expected: Vec<usize>,
        /// The file's shape.
        found: Vec<usize>,
    },
    /// An output file that could not be written, or that wick will not write.
    #[error(transparent)]
    Output(#[from] wick_graph::OutputError),
    /// A candle error outside a graph.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// A file-system error, with the path.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// The result type of wick-models.
pub type Result<T> = std::result::Result<T, ModelError>;

impl From<wick_graph::GraphError> for ModelError {
    fn from(e: wick_graph::GraphError) -> Self {
        ModelError::Graph(Box::new(e))
    }
}
