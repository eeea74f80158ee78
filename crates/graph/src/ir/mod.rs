//! The graph IR: values, the ops nodes run ([`NodeOp`]), nodes, the graph that holds them,
//! and the log of the passes that rewrote it.
//!
//! The files form layers: `value` (ids, value info, origins) and `node_op` (the
//! [`NodeOp`] trait a node runs, with the context its backward rule records into) sit
//! below `graph`; `pass_set` names passes and records what they did.

mod graph;
mod loss_scale;
mod node_op;
mod pass_set;
mod precision;
mod update;
mod value;

pub use crate::phase::Phase;
pub use graph::{Graph, Node};
pub use loss_scale::{GradScaler, ScalerValues};
pub use node_op::{
    arg, args, binary, leading_args, one, AsAny, BackwardCtx, Inputs, KernelResult, NewValue,
    NodeOp, Op, Outputs,
};
pub(crate) use node_op::{NewValues, NodeRecorder};
pub use pass_set::{PassName, PassRecord, PassSet};
pub use precision::Precision;
pub(crate) use precision::{product_output_dtype, Autocast};
pub use update::{ParamSlots, UpdateCheck};
pub use value::{Origin, ValueId, ValueInfo, ValueKind};
