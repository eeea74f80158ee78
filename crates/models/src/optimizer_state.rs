//! The optimizer state an executor's training graph holds (what its optimizer's nodes
//! write: momentum buffers, Adam's moments), read and restored by name, as training
//! checkpoints save it.

use std::collections::HashMap;

use candle_core::Tensor;
use wick_graph::Executor;

use crate::error::{ModelError, Result};

/// The optimizer state a training graph's executor holds (what its optimizer's nodes
/// write, [`Graph::optimizer_state`](wick_graph::ir::Graph::optimizer_state)), by name.
pub fn optimizer_state_of(exec: &Executor) -> Result<Vec<(String, Tensor)>> {
    let mut out = Vec::new();
    for v in exec.graph().optimizer_state() {
        if let Some(t) = exec.get_id(v)? {
            out.push((exec.graph().value(v).name.clone(), t.copy()?));
        }
    }
    Ok(out)
}

/// Sets optimizer state by name into `exec`, refusing a name that is not its graph's
/// optimizer state (a checkpoint of another optimizer or model).
pub fn set_optimizer_state_of(exec: &mut Executor, state: &HashMap<String, Tensor>) -> Result<()> {
    let known = exec.graph().optimizer_state();
    for (name, t) in state {
        let id = exec.graph().find(name);
        if !id.is_some_and(|id| known.contains(&id)) {
            return Err(ModelError::State(format!(
                "`{name}` is not optimizer state of this training graph (was the checkpoint written with another optimizer?)"
            )));
        }
        exec.set(name, t)?;
    }
    Ok(())
}
