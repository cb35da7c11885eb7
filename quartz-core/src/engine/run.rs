//! What travels between the stages: a won fire on its way to its handler
//! ([`RunFire`]), what its handler's lane reports ([`Ran`]), and a pending
//! fire (a retry or a late run) on its way to the backlog ([`PendingFire`]).

use std::sync::Arc;

use super::flight::Hold;
use super::handler::{JobResult, RunKind};
use crate::store::{FireRecord, FollowUp, Job, NodeRef};
use crate::time::Timestamp;
use crate::trigger::{Trigger, TriggerState};

/// A won fire, on its way to a handler.
#[derive(Debug, Clone)]
pub(super) struct RunFire {
    pub(super) fire_id: i64,
    pub(super) execute_id: i64,
    pub(super) job: Arc<Job>,
    pub(super) trigger: Option<Arc<Trigger>>,
    pub(super) fire_time: Timestamp,
    pub(super) attempt: u32,
    /// Why it runs.
    pub(super) kind: RunKind,
    pub(super) node: NodeRef,
    /// The claim moved the execute to running (a fixed-delay trigger awaiting
    /// the finish, or a job that disallows concurrency): the state it wrote,
    /// which the release after the run expects.
    pub(super) release: Option<TriggerState>,
    /// Its place in the pool's room, given back when its handler returns or
    /// when it ends without running.
    pub(super) hold: Option<Hold>,
}

impl RunFire {
    /// The misfire threshold that applies to the fire, if one does: a fire
    /// won by a poll, on its first attempt, is misfired when it starts past
    /// it (late runs, retries, recoveries and children are late by design).
    pub(super) fn misfire_limit(&self, threshold_ms: i64) -> Option<i64> {
        (self.attempt == 1 && self.trigger.is_some()).then_some(threshold_ms)
    }
}

/// What a fire's pool task reports.
pub(super) enum Ran {
    /// The handler ran, with this outcome.
    Done(JobResult),
    /// A thread took the fire this many milliseconds after its time, past the
    /// misfire threshold: the handler did not run.
    Late(i64),
    /// A thread took the fire late and found it no longer this incarnation's:
    /// the handler did not run.
    NotOwned,
    /// A thread took the fire late and the database could not confirm its
    /// start: the handler did not run, and the fire goes to its policy.
    Unconfirmed,
}

/// A pending fire, as the node queues it.
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingFire {
    pub(super) fire_id: i64,
    pub(super) execute_id: i64,
    pub(super) job_id: i64,
    pub(super) fire_time: Timestamp,
    pub(super) attempt: u32,
    pub(super) due_at: Timestamp,
}

impl PendingFire {
    pub(super) fn of(f: &FireRecord) -> PendingFire {
        PendingFire {
            fire_id: f.id,
            execute_id: f.execute_id,
            job_id: f.job_id,
            fire_time: f.fire_time,
            attempt: f.attempt,
            due_at: f.due_at.unwrap_or(f.claimed_at),
        }
    }

    /// The next attempt of `run`, pending as a follow-up said.
    pub(super) fn after(run: &RunFire, follow_up: FollowUp) -> Option<PendingFire> {
        match follow_up {
            FollowUp::Pending { fire_id, due_at } => Some(PendingFire {
                fire_id,
                execute_id: run.execute_id,
                job_id: run.job.id,
                fire_time: run.fire_time,
                attempt: run.attempt + 1,
                due_at,
            }),
            FollowUp::NotOwned | FollowUp::Recorded | FollowUp::Chained(_) => None,
        }
    }
}
