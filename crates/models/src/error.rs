//! The error type of wick-models.

use std::path::{Path, PathBuf};

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
    /// A training step produced a non-finite loss or parameter: the run diverged (or its
    /// input held NaN), and the session's weights are no longer usable.
    #[error("training step {step}: {what}; stopped (the session's weights are no longer usable: do not save them)")]
    NonFinite {
        /// The step, counted from 1 in this session.
        step: u64,
        /// What was not finite, with its value.
        what: String,
    },
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
    #[error("checkpoint {path}: missing {} (expected by the model)", preview(.names))]
    MissingTensors {
        /// The file.
        path: PathBuf,
        /// The missing names.
        names: Vec<String>,
    },
    /// A checkpoint has tensors the model does not know.
    #[error("checkpoint {path}: unexpected {} (not in the model)", preview(.names))]
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
    /// A kernel's error outside a graph (a check of a checkpoint's values).
    #[error(transparent)]
    Op(#[from] wick_ops::OpError),
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

/// Names for a message: all of a few, or the first five and a count (a checkpoint of the
/// wrong model misses hundreds).
fn preview(names: &[String]) -> String {
    const SHOWN: usize = 5;
    let quoted: Vec<String> = names.iter().take(SHOWN).map(|n| format!("`{n}`")).collect();
    match names.len() {
        1 => format!("tensor {}", quoted[0]),
        n if n <= SHOWN => format!("tensors {}", quoted.join(", ")),
        n => format!(
            "{n} tensors: {}, ... and {} more",
            quoted.join(", "),
            n - SHOWN
        ),
    }
}

/// The result type of wick-models.
pub type Result<T> = std::result::Result<T, ModelError>;

impl ModelError {
    /// An I/O error on `path`, for `map_err`: `fs::read(p).map_err(ModelError::io(p))`.
    pub fn io(path: &Path) -> impl Fn(std::io::Error) -> ModelError + Copy + '_ {
        move |source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// What is wrong with the data at `path`, as a function of the message.
    pub fn data(path: &Path) -> impl Fn(String) -> ModelError + Copy + '_ {
        move |message| ModelError::Data {
            path: path.to_path_buf(),
            message,
        }
    }
}

impl From<wick_graph::GraphError> for ModelError {
    fn from(e: wick_graph::GraphError) -> Self {
        ModelError::Graph(Box::new(e))
    }
}
