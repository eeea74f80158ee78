//! The Chrome/Perfetto trace (JSON trace-event format) of the last timed iteration.

use super::profile::Profile;
use crate::ir::Phase;

impl Profile {
    /// The last timed iteration as a Chrome trace (`{"traceEvents": [...]}`), which
    /// Perfetto and chrome://tracing open: one complete event per op on its phase's
    /// thread. `None` without per-op timings (below verbosity 2): there is nothing to draw.
    pub fn chrome_trace(&self) -> Option<String> {
        if self.last_iteration_trace.is_empty() {
            return None;
        }
        let mut events = vec![serde_json::json!({
            "ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": format!("wick ({})", self.device)}
        })];
        for p in Phase::ALL {
            events.push(serde_json::json!({
                "ph": "M", "name": "thread_name", "pid": 0, "tid": p as usize, "args": {"name": p.as_str()}
            }));
        }
        for (op, (start, dur)) in self.ops.iter().zip(&self.last_iteration_trace) {
            events.push(serde_json::json!({
                "ph": "X", "name": op.name, "cat": op.phase.as_str(), "pid": 0, "tid": op.phase as usize,
                "ts": start * 1e6, "dur": dur * 1e6,
                "args": {
                    "op_id": op.op_id, "inputs": op.input_shapes, "outputs": op.output_shapes, "flops": op.flops,
                    "layer": op.origin.layer, "forward_op": op.origin.forward_op, "parameter": op.origin.parameter
                }
            }));
        }
        Some(serde_json::json!({"traceEvents": events, "displayTimeUnit": "ms"}).to_string())
    }
}
