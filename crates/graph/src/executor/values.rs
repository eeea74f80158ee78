//! Setting and reading the graph's values: parameters, state, inputs and outputs.

use candle_core::{DType, Device, Tensor};

use super::{describe, Executor};
use crate::error::{GraphError, Result};
use crate::ir::{ValueId, ValueKind};

impl Executor {
    /// Sets (or feeds) the value `name`, moved to the executor's device. Its shape and
    /// dtype must be the declared ones.
    pub fn set(&mut self, name: &str, tensor: &Tensor) -> Result<()> {
        let id = self.id(name)?;
        self.set_id(id, tensor)
    }

    /// [`set`](Executor::set) by id.
    pub fn set_id(&mut self, id: ValueId, tensor: &Tensor) -> Result<()> {
        self.place(id, tensor, true)
    }

    /// Sets a parameter or state that no node of the graph writes (an inference graph's
    /// weights) without copying it: the executor reads `tensor`'s storage from then on.
    ///
    /// [`set`](Executor::set) copies parameters and state so that the graph's in-place
    /// updates never reach the caller's tensor. A value no node updates needs no copy,
    /// which saves its memory and the copy's time: a decoder that records a graph per
    /// token sets every weight each time. The caller must not pass a tensor that
    /// something updates in place, such as another executor's live parameter from
    /// [`get`](Executor::get) (take its [`snapshot`](Executor::snapshot)): this graph
    /// would read values it was not given, and its kept casts would stay those of the old
    /// ones. An error for a value some node writes, and for inputs (which `set` never
    /// copies).
    pub fn set_shared(&mut self, name: &str, tensor: &Tensor) -> Result<()> {
        let id = self.id(name)?;
        let info = &self.graph.values[id.0];
        if !matches!(info.kind, ValueKind::Param | ValueKind::State) {
            return Err(GraphError::Usage(format!(
                "set_shared: `{name}` is not a parameter or state: set it (inputs are never copied)"
            )));
        }
        if let Some(op_id) = self.writers[id.0] {
            return Err(GraphError::Usage(format!(
                "set_shared: OP_ID{op_id} ({}) writes `{name}` in place: set it, which copies it",
                self.infos[op_id].name
            )));
        }
        self.place(id, tensor, false)
    }

    /// Puts `tensor` in value `id`'s slot, on the executor's device, copied when it is a
    /// parameter or state and `copy_params`.
    fn place(&mut self, id: ValueId, tensor: &Tensor, copy_params: bool) -> Result<()> {
        let info = &self.graph.values[id.0];
        if info.kind == ValueKind::Constant {
            return Err(GraphError::Usage(format!(
                "`{}` is a constant of the graph (GraphBuilder::constant): it is never set",
                info.name
            )));
        }
        if info.shape != tensor.dims() || info.dtype != tensor.dtype() {
            return Err(GraphError::ValueMismatch {
                name: info.name.clone(),
                expected: describe(&info.shape, info.dtype),
                found: describe(tensor.dims(), tensor.dtype()),
            });
        }
        // A 0-dim integer input (the step counter) stays on the host: only wick's kernels
        // read it, and on the host they do so without a device synchronisation.
        let host_scalar =
            info.kind == ValueKind::Input && info.shape.is_empty() && info.dtype == DType::I64;
        let on_device = if host_scalar {
            tensor.to_device(&Device::Cpu)?
        } else {
            tensor.to_device(&self.device)?
        };
        // Parameters and state are updated in place by later runs: take a private copy so
        // the caller's tensor never changes behind its back.
        let owned = match info.kind {
            ValueKind::Param | ValueKind::State if copy_params => on_device.copy()?,
            _ => on_device,
        };
        self.slots[id.0] = Some(owned);
        Ok(())
    }

    /// Puts each of the graph's constants that is not placed yet in its slot, on the
    /// executor's device.
    pub(super) fn place_constants(&mut self) -> Result<()> {
        for (id, host) in &self.graph.constants {
            if self.slots[id.0].is_none() {
                self.slots[id.0] = Some(host.to_device(&self.device)?);
            }
        }
        Ok(())
    }

    /// The current tensor of a value: a parameter, state, input, or a graph output of the
    /// last iteration (intermediates are freed after their last use), borrowed.
    ///
    /// Parameters and optimizer state are updated in place by later runs: the borrow
    /// cannot outlive the next `run`, but `Tensor::clone` shares the storage (candle's
    /// clone is a reference) and would change with it. To keep a value, take
    /// [`snapshot`](Executor::snapshot), an owned copy.
    ///
    /// `None` means not set yet (a parameter before its weights, an output before the first
    /// run); reading an intermediate that is not a graph output is
    /// [`GraphError::Freed`], naming it.
    pub fn get(&self, name: &str) -> Result<Option<&Tensor>> {
        self.get_id(self.id(name)?)
    }

    /// An owned copy of a value's current tensor, which later runs do not change
    /// ([`get`](Executor::get) borrows the live one).
    pub fn snapshot(&self, name: &str) -> Result<Option<Tensor>> {
        Ok(self.get(name)?.map(Tensor::copy).transpose()?)
    }

    /// The tensor of value `id`, which must have one: an error naming the value when it
    /// is not set yet (a parameter before its weights, an output before the first run).
    pub fn value(&self, id: ValueId) -> Result<&Tensor> {
        self.get_id(id)?.ok_or_else(|| {
            let name = &self.graph.values[id.0].name;
            GraphError::Usage(format!(
                "value `{name}` has no tensor yet: set it, or run the graph"
            ))
        })
    }

    /// [`get`](Executor::get) by id.
    pub fn get_id(&self, id: ValueId) -> Result<Option<&Tensor>> {
        let Some(info) = self.graph.values.get(id.0) else {
            return Err(GraphError::UnknownValue(format!("{id:?}")));
        };
        let slot = self.slots.get(id.0).and_then(|s| s.as_ref());
        if slot.is_none()
            && info.kind == ValueKind::Intermediate
            && !self.graph.outputs.contains(&id)
        {
            return Err(GraphError::Freed(info.name.clone()));
        }
        Ok(slot)
    }
}
