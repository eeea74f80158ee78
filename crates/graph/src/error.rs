//! The error type of wick-graph.

use wick_ops::OpError;

use crate::phase::Phase;

/// What went wrong while building or running a graph.
#[derive(Debug, thiserror::Error)]
pub enum GraphError {
    /// An op rejected its shapes or settings while the graph was being built.
    #[error("building {op}{}: {source}", in_layer(layer))]
    Build {
        /// The builder call (`conv2d`, `linear`, ...).
        op: &'static str,
        /// The layer being recorded (`layer4.1.bn2`), if any.
        layer: Option<String>,
        /// The kernel's error, naming the shapes.
        #[source]
        source: OpError,
    },
    /// A kernel failed while the graph ran.
    #[error("OP_ID{op_id} ({name}, {phase:?}{layer}): {source}")]
    Run {
        /// The node's OP_ID.
        op_id: usize,
        /// The node's kernel name.
        name: &'static str,
        /// The node's phase.
        phase: Phase,
        /// `, layer <name>` for a node recorded in a layer (a backward node: its forward
        /// node's; an update: its parameter's); empty otherwise.
        layer: String,
        /// The kernel's error.
        #[source]
        source: OpError,
    },
    /// A value was fed or set with the wrong shape or dtype.
    #[error("value `{name}`: expected {expected}, got {found}")]
    ValueMismatch {
        /// The value's name.
        name: String,
        /// Its declared shape and dtype.
        expected: String,
        /// What was given.
        found: String,
    },
    /// A value the graph needs has not been set or fed.
    #[error("value `{name}` has not been set or fed (OP_ID{op_id}, {kernel}, reads it)")]
    MissingValue {
        /// The value's name.
        name: String,
        /// The node that needed it.
        op_id: usize,
        /// That node's kernel name.
        kernel: &'static str,
    },
    /// An intermediate value was read after the executor freed it (it is not a graph
    /// output).
    #[error("value `{0}` is an intermediate, freed after its last use in each run: mark it with GraphBuilder::output to keep it")]
    Freed(String),
    /// No value of this name exists in the graph.
    #[error("the graph has no value named `{0}`")]
    UnknownValue(String),
    /// The graph is used in a way its construction does not allow.
    #[error("{0}")]
    Usage(String),
    /// The CUDA driver failed outside a kernel (the profiler's CUDA events).
    #[error("CUDA: {what}: {message}")]
    Cuda {
        /// What wick was doing (`recording an event`, ...).
        what: &'static str,
        /// The driver's message.
        message: String,
    },
    /// Anomaly detection ([`Executor::set_anomaly_detection`](crate::Executor::set_anomaly_detection))
    /// found a NaN or an infinity in a node's output.
    #[error("anomaly: OP_ID{op_id} ({kernel}, {phase:?}{layer}) wrote {value} at element {index} of `{output}` (inputs: {inputs})")]
    NonFinite {
        /// The first node whose output is not finite.
        op_id: usize,
        /// Its kernel name.
        kernel: &'static str,
        /// Its phase.
        phase: Phase,
        /// `, layer <name>`, as in [`GraphError::Run`] (or from the parameters it
        /// reads); empty when neither names one.
        layer: String,
        /// The output's name.
        output: String,
        /// The first non-finite element (flat index).
        index: usize,
        /// Its value (NaN, inf or -inf).
        value: f64,
        /// The node's inputs, by name.
        inputs: String,
    },
    /// A candle error outside any kernel (moving a tensor to the device, ...).
    #[error(transparent)]
    Candle(Box<candle_core::Error>),
}

/// The result type of wick-graph.
pub type Result<T> = std::result::Result<T, GraphError>;

impl From<candle_core::Error> for GraphError {
    fn from(e: candle_core::Error) -> Self {
        GraphError::Candle(Box::new(e))
    }
}

/// ` in layer `NAME`` for a build error's message, or nothing.
fn in_layer(layer: &Option<String>) -> String {
    layer
        .as_deref()
        .map(|l| format!(" in layer `{l}`"))
        .unwrap_or_default()
}
