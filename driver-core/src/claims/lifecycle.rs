//! A claim's life cycle on this node, as the checkpoint records it: every change the core
//! makes to a claim's entry is one of these steps, checked against this table, so that the
//! states a crash can leave behind are exactly the ones listed here.
//!
//! ```text
//!            Begin                 Complete
//!   Absent ────────▶ Started ──────────────▶ Completed ──┐ Refresh
//!     ▲  ▲              │                      │   ▲  ◀──┘
//!     │  └── RollBack ──┘                      │   │
//!     │  └──────────────────── Unprepare ──────┘   │ Rebuild (a corrupt checkpoint,
//!     │  └── Unprepare (of a Started claim)        │  from the claim's record)
//!     └── Discard (from any: a checkpoint of another boot)
//!        Redo (Completed without its record → Absent, prepared again)
//! ```
//!
//! Durable points of a prepare: `Started` is saved before any side effect (device setup,
//! record); the record is written after the setups; `Completed` is saved last. Unprepare
//! undoes the setups, removes the record, then the entry. So after a crash:
//! - `Started` (with or without setups done, with or without a record): the next prepare of
//!   the claim rolls it back and begins again; an unprepare, or the cleanup pass once the
//!   claim is gone from the API, rolls it back;
//! - `Completed` with its record: prepared;
//! - `Completed` without its record (a crash inside an unprepare): the next prepare redoes
//!   it, an unprepare finishes it.

use serde::{Deserialize, Serialize};

/// A claim's state on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// No entry: never prepared here, unprepared, rolled back, or of an earlier boot.
    Absent,
    /// `PrepareStarted`: devices reserved; setups and record may or may not exist yet.
    Started,
    /// `PrepareCompleted`: setups applied and the record written.
    Completed,
}

/// The persisted form of the two stages that have an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClaimState {
    /// Devices reserved; setups and record may or may not exist yet.
    PrepareStarted,
    /// Setups applied and the record written.
    PrepareCompleted,
}

impl From<ClaimState> for Stage {
    fn from(s: ClaimState) -> Self {
        match s {
            ClaimState::PrepareStarted => Stage::Started,
            ClaimState::PrepareCompleted => Stage::Completed,
        }
    }
}

/// What the core does to a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// Reserve the devices, before any side effect.
    Begin,
    /// Setups applied, record written.
    Complete,
    /// Prepared again: the pods holding it may have changed.
    Refresh,
    /// An interrupted prepare undone (its next prepare, or cleanup after its claim is gone).
    RollBack,
    /// A completed claim whose record is missing, taken back to begin again.
    Redo,
    /// The kubelet unprepares it.
    Unprepare,
    /// The checkpoint belongs to another boot.
    Discard,
    /// A corrupt checkpoint rebuilt from the claim's record.
    Rebuild,
}

/// A step the claim life cycle does not allow from a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("claim life cycle: {step:?} is not allowed from {from:?}")]
pub struct InvalidStep {
    /// The stage the claim was in.
    pub from: Stage,
    /// The step asked for.
    pub step: Step,
}

/// The stage `step` leads to from `from`, or why it cannot be taken.
pub fn next(from: Stage, step: Step) -> Result<Stage, InvalidStep> {
    use Stage::*;
    use Step::*;
    let to = match (from, step) {
        (Absent, Begin) => Started,
        (Started, Complete) => Completed,
        (Completed, Refresh) => Completed,
        (Started, RollBack) => Absent,
        (Completed, Redo) => Absent,
        (Started | Completed, Unprepare) => Absent,
        // Unpreparing what is not there is success: the kubelet may ask twice.
        (Absent, Unprepare) => Absent,
        (_, Discard) => Absent,
        (Absent, Rebuild) => Completed,
        _ => return Err(InvalidStep { from, step }),
    };
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAGES: [Stage; 3] = [Stage::Absent, Stage::Started, Stage::Completed];
    const STEPS: [Step; 8] = [
        Step::Begin,
        Step::Complete,
        Step::Refresh,
        Step::RollBack,
        Step::Redo,
        Step::Unprepare,
        Step::Discard,
        Step::Rebuild,
    ];

    /// Every (stage, step) pair: exactly these are allowed, and where they lead.
    #[test]
    fn the_whole_table() {
        use Stage::*;
        use Step::*;
        let allowed = [
            (Absent, Begin, Started),
            (Started, Complete, Completed),
            (Completed, Refresh, Completed),
            (Started, RollBack, Absent),
            (Completed, Redo, Absent),
            (Started, Unprepare, Absent),
            (Completed, Unprepare, Absent),
            (Absent, Unprepare, Absent),
            (Absent, Discard, Absent),
            (Started, Discard, Absent),
            (Completed, Discard, Absent),
            (Absent, Rebuild, Completed),
        ];
        let mut seen = 0;
        for from in STAGES {
            for step in STEPS {
                let want = allowed
                    .iter()
                    .find(|(f, s, _)| *f == from && *s == step)
                    .map(|(_, _, to)| *to);
                match (next(from, step), want) {
                    (Ok(to), Some(w)) => {
                        assert_eq!(to, w, "{from:?} --{step:?}-->");
                        seen += 1;
                    }
                    (Err(e), None) => assert_eq!(e, InvalidStep { from, step }),
                    (got, want) => panic!("{from:?} --{step:?}: got {got:?}, want {want:?}"),
                }
            }
        }
        assert_eq!(seen, allowed.len());
    }
}
