//! How an optimizer's update node describes its inputs ([`ParamSlots`]) and what it found
//! about the parameters it updated ([`UpdateCheck`]). Passes, data parallelism, the
//! session's checks and the profiler read these instead of decoding each update's input
//! layout.

/// Where an update node reads one parameter's update: input indices of the parameter it
/// updates in place, of that parameter's gradient, and of its optimizer state (SGD's
/// momentum buffer, Adam's two moments). Inputs every member shares (Adam's step counter)
/// belong to no member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamSlots {
    /// The parameter, updated in place.
    pub param: usize,
    /// Its gradient.
    pub grad: usize,
    /// Its optimizer state, in the optimizer's order (empty for SGD without momentum).
    pub state: Vec<usize>,
}

impl ParamSlots {
    /// The slots of a member whose inputs run `param, grad, state...` from `first`, with
    /// `states` state inputs.
    pub fn consecutive(first: usize, states: usize) -> Self {
        ParamSlots {
            param: first,
            grad: first + 1,
            state: (first + 2..first + 2 + states).collect(),
        }
    }
}

/// What an update found about the parameter it wrote, since it was last asked
/// ([`NodeOp::take_update_checks`](crate::NodeOp::take_update_checks)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateCheck {
    /// The node has not run since it was last asked.
    NotRun,
    /// The updated parameter is finite.
    Finite,
    /// It holds a NaN or an infinity.
    NonFinite,
    /// The update did not check (a device, or another optimizer): look yourself.
    Unchecked,
}
