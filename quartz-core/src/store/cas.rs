//! The compare-and-set types: what a claim or an execute update expects to
//! find and what it writes.

use super::{Execute, ExecuteState, FireState, NodeRef};
use crate::time::Timestamp;
use crate::trigger::{Fire, NextFire, Trigger, TriggerState};

/// The compare-and-set of an execute row: if it still holds `expect`, it takes
/// `set`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecuteCas {
    /// The row.
    pub execute_id: i64,
    /// The state it must be in.
    pub expect_state: ExecuteState,
    /// The fire times it must hold (`times_triggered` and `awaiting_finish` are
    /// not compared).
    pub expect: TriggerState,
    /// When set, the owner it must have.
    pub expect_owner: Option<NodeRef>,
    /// The state it takes.
    pub set_state: ExecuteState,
    /// The fire times and count it takes.
    pub set: TriggerState,
    /// The owner it takes (`None` clears it).
    pub set_owner: Option<NodeRef>,
    /// A restarted trigger (a misfire policy's reschedule): its start and repeat
    /// limit are written too, with its signature.
    pub set_trigger: Option<Trigger>,
    /// When set, the schedule signature the row takes (a recomputed row);
    /// otherwise it keeps its own.
    pub set_signature: Option<i64>,
}

impl ExecuteCas {
    /// A compare-and-set from an execute's row as it was read to `set` in
    /// `set_state`, with no owner and the row's own schedule and signature.
    pub fn from_row(execute: &Execute, set_state: ExecuteState, set: TriggerState) -> ExecuteCas {
        ExecuteCas {
            execute_id: execute.id,
            expect_state: execute.state,
            expect: execute.fire_state.clone(),
            expect_owner: None,
            set_state,
            set,
            set_owner: None,
            set_trigger: None,
            set_signature: None,
        }
    }
}

/// A ledger row recording fires that did not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedRecord {
    /// The first scheduled time (the row's `fire_time`).
    pub from: Timestamp,
    /// The end of the range, exclusive.
    pub until: Timestamp,
    /// How many scheduled times the range holds.
    pub count: u64,
    /// [`FireState::Misfired`] or [`FireState::Skipped`].
    pub state: FireState,
    /// Why.
    pub reason: String,
}

/// A claim: win one fire of an execute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The execute's compare-and-set.
    pub cas: ExecuteCas,
    /// The scheduled fire time.
    pub fire_time: Timestamp,
    /// The attempt, from 1.
    pub attempt: u32,
    /// The claiming node's incarnation.
    pub node: NodeRef,
    /// The job disallows concurrency: the claim is lost while any fire of the
    /// job is claimed or running. Such claims are serialised on the job's row.
    pub exclusive: bool,
}

impl Claim {
    /// The claim of one fire of an expansion ([`Trigger::fires_until`]) by
    /// `node`: the row must be waiting and hold `fire.before`; it takes
    /// `fire.after`, owned by `node`, and stays waiting, or becomes running (a
    /// fixed-delay trigger awaiting the finish) or complete (no further fire).
    pub fn for_fire(execute_id: i64, fire: &Fire, node: &NodeRef) -> Claim {
        let set_state = match fire.next {
            NextFire::At(_) => ExecuteState::Waiting,
            NextFire::AfterFinish => ExecuteState::Running,
            NextFire::Done => ExecuteState::Complete,
        };
        Claim {
            cas: ExecuteCas {
                execute_id,
                expect_state: ExecuteState::Waiting,
                expect: fire.before.clone(),
                expect_owner: None,
                set_state,
                set: fire.after.clone(),
                set_owner: Some(node.clone()),
                set_trigger: None,
                set_signature: None,
            },
            fire_time: fire.fire_time,
            attempt: 1,
            node: node.clone(),
            exclusive: false,
        }
    }
}
