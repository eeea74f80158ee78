//! The timer marks of one iteration and the slot each is recorded in. The layout is
//! derived from the phases and the node count, so a timer (or a test's fake clock) can
//! map any slot back to what it marks.

use wick_graph::ir::Phase;

/// One point in an iteration that the profiler marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Before the first node.
    IterationStart,
    /// After the last node.
    IterationEnd,
    /// Before the first node of a phase.
    PhaseStart(Phase),
    /// After the last node of a phase.
    PhaseEnd(Phase),
    /// Right before node `OP_ID`'s kernel.
    OpStart(usize),
    /// Right after node `OP_ID`'s kernel returned.
    OpEnd(usize),
}

/// The slots of a graph with `nodes` nodes: the iteration's two marks, then two per phase
/// (in [`Phase::ALL`] order), then two per node in OP_ID order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotLayout {
    nodes: usize,
}

const PHASE_BASE: usize = 2;
const OP_BASE: usize = PHASE_BASE + 2 * Phase::ALL.len();

impl SlotLayout {
    /// The layout for a graph of `nodes` nodes.
    pub fn new(nodes: usize) -> Self {
        SlotLayout { nodes }
    }

    /// How many slots a timer must prepare.
    pub fn len(&self) -> usize {
        OP_BASE + 2 * self.nodes
    }

    /// Whether there are no slots (never: the iteration marks are always there).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The slot of `mark`.
    pub fn slot(&self, mark: Mark) -> usize {
        let phase = |p: Phase| Phase::ALL.iter().position(|q| *q == p).unwrap_or(0);
        match mark {
            Mark::IterationStart => 0,
            Mark::IterationEnd => 1,
            Mark::PhaseStart(p) => PHASE_BASE + 2 * phase(p),
            Mark::PhaseEnd(p) => PHASE_BASE + 2 * phase(p) + 1,
            Mark::OpStart(op_id) => OP_BASE + 2 * op_id,
            Mark::OpEnd(op_id) => OP_BASE + 2 * op_id + 1,
        }
    }

    /// What slot `slot` marks, if it is one of this layout's.
    pub fn mark(&self, slot: usize) -> Option<Mark> {
        let start = slot.is_multiple_of(2);
        Some(match slot {
            0 => Mark::IterationStart,
            1 => Mark::IterationEnd,
            s if s < OP_BASE => {
                let p = Phase::ALL[(s - PHASE_BASE) / 2];
                if start {
                    Mark::PhaseStart(p)
                } else {
                    Mark::PhaseEnd(p)
                }
            }
            s if s < self.len() => {
                let op_id = (s - OP_BASE) / 2;
                if start {
                    Mark::OpStart(op_id)
                } else {
                    Mark::OpEnd(op_id)
                }
            }
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slot_maps_back_to_its_mark() {
        let layout = SlotLayout::new(5);
        assert_eq!(layout.len(), 2 + 2 * 3 + 2 * 5);
        for slot in 0..layout.len() {
            let mark = layout.mark(slot).expect("in range");
            assert_eq!(layout.slot(mark), slot, "{mark:?}");
        }
        assert_eq!(layout.mark(layout.len()), None);
        assert_eq!(layout.slot(Mark::PhaseEnd(Phase::Optimizer)), 7);
    }
}
