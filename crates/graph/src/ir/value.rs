//! Values: what a graph node reads and writes, and where a node comes from.

use candle_core::DType;

/// The index of a value in its graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub usize);

/// Where a value's tensor comes from and how long it lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueKind {
    /// Fed by the caller every iteration (images, labels).
    Input,
    /// A trainable parameter: set once, kept across iterations, updated by the optimizer.
    Param,
    /// Persistent non-trainable state (batch-norm running statistics, momentum buffers),
    /// kept across iterations and updated by the nodes that own it.
    State,
    /// Produced by a node and freed right after its last consumer.
    Intermediate,
    /// Fixed when the graph is recorded ([`GraphBuilder::constant`](crate::GraphBuilder::constant):
    /// rotary position tables): the executor places it on its device before the first
    /// run; never fed, never updated, not in the state dict (PyTorch's non-persistent
    /// buffer).
    Constant,
}

/// Everything the graph knows about one value.
#[derive(Debug, Clone)]
pub struct ValueInfo {
    /// A name: the parameter's state-dict name for params and state, a generated one otherwise.
    pub name: String,
    /// The static shape.
    pub shape: Vec<usize>,
    /// The dtype.
    pub dtype: DType,
    /// Its role.
    pub kind: ValueKind,
}

/// Where a node comes from, so that profiles can be read per layer.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Origin {
    /// The module path of the layer that recorded it (`layer1.0.conv2`, the torchvision
    /// state-dict prefix), set by the model through [`GraphBuilder::in_layer`](crate::GraphBuilder::in_layer).
    /// Backward nodes take their forward node's; optimizer nodes their parameter's.
    pub layer: Option<String>,
    /// For a backward node: the OP_ID of the forward node it differentiates.
    pub forward_op: Option<usize>,
    /// For an optimizer node: the name of the parameter it updates.
    pub parameter: Option<String>,
}
