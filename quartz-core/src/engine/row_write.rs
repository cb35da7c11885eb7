//! What a poll decides for a due execute: queue its fires, or first move
//! its row (paused, initialised or recomputed, overdue), as a
//! compare-and-set with the ledger records that go with it.

use std::sync::Arc;

use super::context::{first_at_or_after, waiting_or_complete};
use crate::misfire::MisfireDecision;
use crate::store::{Execute, ExecuteCas, Job, SkippedRecord, TriggerColumns};
use crate::time::Timestamp;
use crate::trigger::{Schedule, Trigger, TriggerState};

/// What a poll does with an execute (short-lived: sizes do not matter).
#[allow(clippy::large_enum_variant)]
pub(super) enum Decision {
    /// Queue its fires as the row stands.
    Queue(Execute),
    /// Move its row first.
    Write(RowWrite),
}

/// Why a row is written.
pub(super) enum WriteKind {
    Paused,
    Recomputed,
    Misfire(Box<MisfireDecision>),
}

/// A row write a poll decided: the compare-and-set, the ledger records that
/// go with it, and the state whose fires are queued when it wins.
pub(super) struct RowWrite {
    pub(super) cas: ExecuteCas,
    pub(super) records: Vec<SkippedRecord>,
    pub(super) job: Arc<Job>,
    pub(super) then: Option<(Arc<Trigger>, TriggerState)>,
    pub(super) kind: WriteKind,
}

/// Initialises a row written without a next fire time, or recomputes one
/// whose schedule was edited: the first fire time at or after now. A cron or
/// fixed-rate row at a checkpoint resumes its search from the checkpoint
/// instead, so that an included time between it and now is found (and
/// handled by the misfire policy at the next poll) rather than passed over.
pub(super) fn recompute(execute: Execute, job: &Arc<Job>, db_now: Timestamp) -> RowWrite {
    let checkpoint = execute
        .fire_state
        .next_fire_time
        .filter(|t| !execute.schedule_changed && execute.trigger.is_checkpoint(*t))
        .filter(|_| {
            matches!(
                execute.trigger.schedule(),
                Schedule::Cron { .. } | Schedule::FixedRate { .. }
            )
        });
    let next = match checkpoint {
        Some(t) => execute.trigger.fire_time_after(t),
        None => first_at_or_after(&execute.trigger, &execute.fire_state, db_now),
    };
    let state = TriggerState {
        prev_fire_time: execute.fire_state.prev_fire_time,
        next_fire_time: next,
        times_triggered: execute.fire_state.times_triggered,
        awaiting_finish: false,
        calendar_stamp: execute.fire_state.calendar_stamp,
    };
    let mut cas = ExecuteCas::from_row(&execute, waiting_or_complete(next), state.clone());
    // Signed again when its schedule was edited (or never signed): only
    // then are its fires claimed ahead unclaimed (see `ExecuteCas::recomputes`);
    // a checkpoint's or a calendar's recompute keeps them.
    if execute.schedule_changed {
        cas.set_signature = Some(TriggerColumns::from_trigger(&execute.trigger).signature());
    }
    RowWrite {
        cas,
        records: Vec::new(),
        job: Arc::clone(job),
        then: next.is_some().then(|| (Arc::new(execute.trigger), state)),
        kind: WriteKind::Recomputed,
    }
}
