//! The compare-and-set types: what a claim or an execute update expects to
//! find and what it writes.

use super::{Execute, ExecuteState, FireState, NodeRef};
use crate::time::Timestamp;
use crate::trigger::{Fire, NextFire, Overlap, Trigger, TriggerState};

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

    /// Whether this compare-and-set takes an edited schedule into a
    /// waiting row (it sets a signature: a row whose schedule columns were
    /// written by hand): when it wins, the store also deletes, in the same
    /// transaction, the execute's fires claimed and not started whose time
    /// is after the database's now. They were claimed on the schedule as it
    /// was, a claim lead ahead (and a fire more with `Settings::claim_runs`);
    /// the row's next fire time is recomputed from now, so a time the new
    /// schedule keeps is claimed again and one it drops is no fire time any
    /// more. Their nodes' fenced starts find no claim and are refused.
    pub fn recomputes(&self) -> bool {
        self.set_signature.is_some() && self.expect_state == ExecuteState::Waiting
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
    /// The claim checks what runs before it wins: its job disallows
    /// concurrency, its trigger has an overlap policy, or its job has a
    /// concurrency limit. Such claims are serialised on the job's row (and
    /// a limited job's on its key's first job row).
    pub exclusive: bool,
    /// With `exclusive`, what the claim does while a fire of the job is
    /// claimed or running, a fire of its trigger waits, or its job's
    /// concurrency key is full ([`ClaimBusy`]): `None` loses it to a running
    /// fire of the job (a job that disallows concurrency: its trigger waits,
    /// as in Quartz) and waits for a full key; a policy still advances the
    /// execute and records the fire, as skipped ([`Overlap::Skip`], or a
    /// second [`Overlap::BufferOne`] fire) or as a pending fire due at its
    /// time, which waits for room; under [`Overlap::Cancel`] the job's open
    /// fires are also asked to stop. Either way the claim is not won:
    /// nothing runs now.
    pub overlap: Option<Overlap>,
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
            overlap: None,
        }
    }
}

/// What holds an exclusive claim back (see [`Claim::overlap`]): a fire of
/// the job claimed or running, an older fire of the trigger waiting, the
/// job's concurrency key full, or several. Every store words the ledger's
/// rows from it the same way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimBusy {
    /// A claimed or running fire of the job (none under
    /// [`Overlap::Allow`], whose fires run beside the job's own).
    pub open: Option<i64>,
    /// The trigger's oldest fire waiting under a policy or a limit.
    pub waiting: Option<i64>,
    /// The job's concurrency key, when it is full.
    pub full: Option<FullKey>,
}

/// A concurrency key found full at a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FullKey {
    /// The resolved key.
    pub key: String,
    /// Its claimed and running fires.
    pub open: i64,
    /// Its limit.
    pub max: i64,
}

impl ClaimBusy {
    /// Whether anything holds the claim back.
    pub fn any(&self) -> bool {
        self.open.is_some() || self.waiting.is_some() || self.full.is_some()
    }

    /// Why the fire does not run, as its skipped row says; `None` when it
    /// waits instead (as a pending fire due at its time).
    pub fn skip_reason(&self, policy: Overlap) -> Option<String> {
        match (policy, self.open, self.waiting, &self.full) {
            (Overlap::Skip, Some(open), _, _) => {
                Some(format!("overlap policy skip: fire {open} of the job was still running"))
            }
            (Overlap::Skip, None, Some(waiting), _) => Some(format!(
                "overlap policy skip: fire {waiting} of the trigger was still waiting"
            )),
            (Overlap::Skip, None, None, Some(full)) => Some(format!(
                "overlap policy skip: concurrency limit {:?} full ({} of {} fires claimed or running)",
                full.key, full.open, full.max
            )),
            (Overlap::BufferOne, _, Some(waiting), _) => Some(format!(
                "overlap policy buffer_one: fire {waiting} of the trigger already waits for the job's running fire \
                 or its concurrency limit"
            )),
            _ => None,
        }
    }

    /// Whether the waiting fire asks the job's open fires to stop: under
    /// cancel, when one of the job's own is open (not for the other jobs
    /// that fill its key).
    pub fn cancels(&self, policy: Overlap) -> bool {
        policy == Overlap::Cancel && self.open.is_some()
    }

    /// The skipped row's reason of an older waiting fire that a newer fire
    /// under cancel replaced.
    pub fn replaced_reason(newer: i64) -> String {
        format!("overlap policy cancel: replaced by fire {newer} before it started")
    }
}
