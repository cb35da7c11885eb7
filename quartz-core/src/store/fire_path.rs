//! The engine's four traits of the store's contract: membership
//! ([`NodeStore`]), the executes and their claim ([`ScheduleStore`]), the
//! open fires' lifecycle ([`FireStore`]) and retention ([`RetentionStore`]).
//! Every store implements them, beside the admin surface's three (the store
//! conformance suite checks each call on every backend); nothing but the
//! engine, its tests and the benchmarks calls them: an application goes
//! through [`Scheduler`](crate::engine::Scheduler) and
//! [`Admin`](crate::admin::Admin).

use std::time::Duration;

use async_trait::async_trait;

use super::*;
use crate::time::Timestamp;

/// How a fire of this node's incarnation ends: one per fire, recorded by
/// [`FireStore::end_fires`]. Every end is fenced: it is recorded only while
/// the fire is still this incarnation's (claimed or running under it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FireEnd {
    /// Its handler returned success. With `chain`, in the same transaction
    /// its job's chain starts: one fire of each child job (a job whose
    /// parent is this fire's job) under the same execute and fire time,
    /// attempt 1, claimed by this node, or recorded skipped when the child
    /// is paused; the answer is [`FollowUp::Chained`] with the children's
    /// claimed fires. The unique key holds chains to one fire per child and
    /// parent fire, so a cycle of jobs ends where it would repeat.
    Succeeded {
        /// Whether to start the job's chain.
        chain: bool,
        /// When the handler ran: recorded as the fire's start and finish
        /// (`None`: the start the fenced start recorded, finished now).
        ran: Option<HandlerSpan>,
    },
    /// Its handler failed, panicked or timed out (the error is cut to
    /// [`MAX_ERROR_BYTES`]). With `retry_in`, in the same transaction its
    /// next attempt is recorded pending, due that long from now
    /// ([`FollowUp::Pending`]): a retry waiting out its backoff is a row, so
    /// no node's death or restart loses it.
    Failed {
        /// What happened.
        error: String,
        /// When to try again, if at all.
        retry_in: Option<Duration>,
        /// When the handler ran, as for [`FireEnd::Succeeded`].
        ran: Option<HandlerSpan>,
    },
    /// Its handler did not start in time: claimed and refused by the pool,
    /// or marked running and found past the threshold when a thread took
    /// it. Recorded misfired with the reason, its start time cleared. With
    /// `run_late`, in the same transaction the late run its misfire policy
    /// promised is recorded as a pending next attempt, due now.
    Misfired {
        /// Why, in the ledger's words.
        reason: String,
        /// The late run its policy promised, if any.
        run_late: Option<LateRun>,
    },
    /// Claimed and not run: its job was paused or deleted after the claim.
    /// Recorded skipped, with the reason.
    Skipped {
        /// Why.
        reason: String,
    },
    /// Claimed and not run: no live node has its handler. Recorded failed,
    /// with the reason.
    Refused {
        /// Why.
        reason: String,
    },
    /// Claimed and not started, given up so that any node may take it at
    /// once (a graceful shutdown).
    Released,
}

/// Which late run a misfired fire's policy promised ([`FireEnd::Misfired`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LateRun {
    /// One late run for this fire (ignore misfires: each missed fire runs).
    Each,
    /// One late run for the execute (the fire-now policies): none is added
    /// while one of the same execute and job is pending, which stands for
    /// them all.
    OnePerExecute,
}

impl FireEnd {
    /// [`FireEnd::Skipped`], for `reason`.
    pub fn skipped(reason: impl Into<String>) -> FireEnd {
        FireEnd::Skipped { reason: reason.into() }
    }

    /// [`FireEnd::Misfired`] without a late run, for `reason`.
    pub fn misfired(reason: impl Into<String>) -> FireEnd {
        FireEnd::Misfired {
            reason: reason.into(),
            run_late: None,
        }
    }

    /// The fires of `ends`, each with when its handler ran, when every one
    /// is a plain success (`Succeeded` without a chain): the batch a store
    /// records in one transaction.
    pub fn plain_successes(ends: &[(i64, FireEnd)]) -> Option<Vec<(i64, Option<HandlerSpan>)>> {
        ends.iter()
            .map(|(id, end)| match end {
                FireEnd::Succeeded { chain: false, ran } => Some((*id, *ran)),
                _ => None,
            })
            .collect()
    }

    /// A handler's outcome as its end, without a chain or a retry, with
    /// when the handler ran.
    pub fn of_outcome(outcome: &Outcome, ran: Option<HandlerSpan>) -> FireEnd {
        match outcome {
            Outcome::Succeeded => FireEnd::Succeeded { chain: false, ran },
            Outcome::Failed { error } => FireEnd::Failed {
                error: error.clone(),
                retry_in: None,
                ran,
            },
        }
    }
}

impl From<&Outcome> for FireEnd {
    /// A handler's outcome as its end, without a chain or a retry.
    fn from(outcome: &Outcome) -> FireEnd {
        FireEnd::of_outcome(outcome, None)
    }
}

impl FollowUp {
    /// A fenced end's answer: [`FollowUp::Recorded`] when it was recorded,
    /// [`FollowUp::NotOwned`] otherwise.
    pub fn recorded(done: bool) -> FollowUp {
        if done { FollowUp::Recorded } else { FollowUp::NotOwned }
    }

    /// Whether the end was recorded (anything but [`FollowUp::NotOwned`]).
    pub fn ended(&self) -> bool {
        !matches!(self, FollowUp::NotOwned)
    }

    /// The answers to a batch of plain successes, of which `recorded` were
    /// recorded, in the order of `ends`.
    pub fn of_batch(ends: &[(i64, FireEnd)], recorded: &[i64]) -> Vec<FollowUp> {
        ends.iter()
            .map(|(id, _)| FollowUp::recorded(recorded.contains(id)))
            .collect()
    }
}

/// Membership: a node registers, beats, leaves, and is declared dead by another.
///
/// Part of [`Store`]; see the [store module](crate::store).
#[async_trait]
pub trait NodeStore: Send + Sync {
    /// Registers a node, or re-registers it with a new incarnation (which
    /// retires the old one), live, heart-beating now.
    async fn register_node(&self, node: &NodeRegistration) -> Result<Node, StoreError>;

    /// Records a heartbeat with how busy the node is (fires running or queued
    /// on its pool); `false` when this incarnation is no longer live (it was
    /// declared dead or replaced) and must re-register.
    async fn heartbeat(&self, node: &NodeRef, busy: u64) -> Result<bool, StoreError>;

    /// Declares a node dead, if it is still live in that incarnation and its
    /// heartbeat is older than `dead_after_ms` (database time). `true` when this
    /// caller retired it.
    async fn retire_node(&self, node: &NodeRef, dead_after_ms: i64) -> Result<bool, StoreError>;

    /// Marks a node gone (a graceful leave), if still live in that incarnation.
    async fn leave(&self, node: &NodeRef) -> Result<bool, StoreError>;
}

/// The executes (one trigger and its state each): the due ones read, moved by compare-and-set, and their fires won by the claim.
///
/// Part of [`Store`]; see the [store module](crate::store).
#[async_trait]
pub trait ScheduleStore: Send + Sync {
    /// Executes in the waiting state whose next fire time is before `before`
    /// (or empty: rows written by hand that need initialising), in time order,
    /// at most `limit`. Rows that cannot be decoded are marked as errors and
    /// reported; the rest are served. With `after`, the page that follows
    /// the one that cursor ends ([`DueBatch::cursor`]); rows needing
    /// initialising come on the first page that has room for them.
    async fn due_executes(
        &self,
        before: Timestamp,
        after: Option<DueCursor>,
        limit: u32,
    ) -> Result<DueBatch, StoreError>;

    /// Executes in the running state owned by a node that is not live (or by
    /// no node), at most `limit`.
    async fn orphaned_executes(&self, limit: u32) -> Result<DueBatch, StoreError>;

    /// A compare-and-set on an execute row and, if it wins, the insert of the
    /// ledger records (skipped ranges) in the same transaction. A
    /// compare-and-set that [recomputes](ExecuteCas::recomputes) the row
    /// also deletes, in that transaction, the execute's fires claimed and
    /// not started whose time is after the database's now.
    async fn update_execute(&self, cas: &ExecuteCas, records: &[SkippedRecord]) -> Result<bool, StoreError>;

    /// Many [`ScheduleStore::update_execute`]s in one transaction (a poll's overdue,
    /// paused and recomputed rows): each compare-and-set wins or loses on its
    /// own, and the result says, update by update, whether it won. An error
    /// means none was written.
    async fn update_executes(&self, updates: &[(ExecuteCas, Vec<SkippedRecord>)]) -> Result<Vec<bool>, StoreError>;

    /// Wins a fire: the execute's compare-and-set and the insert of its ledger
    /// row, in one transaction. `Some(fire id)` when this caller won.
    async fn claim(&self, claim: &Claim) -> Result<Option<i64>, StoreError>;

    /// Many claims, with the same guarantee for each; the result says, claim
    /// by claim, which were won. The claims share one transaction, except
    /// those of jobs that disallow concurrency, which take one each: such a
    /// claim that fails after others were stored counts as not won, so that
    /// an `Err` always means that no claim was stored.
    async fn claim_batch(&self, claims: &[Claim]) -> Result<Vec<Option<i64>>, StoreError>;

    /// The ids of the scheduler's jobs that have at least one child job.
    async fn chain_parents(&self) -> Result<Vec<i64>, StoreError>;
}

/// The ledger's open fires: started, ended ([`FireStore::end_fires`]), timed out, taken over from a dead node, and the pending ones (retries, late runs, fires by hand) claimed.
///
/// Part of [`Store`]; see the [store module](crate::store).
#[async_trait]
pub trait FireStore: Send + Sync {
    /// Marks claimed fires running, fenced: a fire is started only while it
    /// is still claimed by this node's incarnation and that incarnation is
    /// live; returns the ids that were started, each with the start time
    /// recorded. All or none: an error means none was started, however many
    /// fires the call names. A fire started ahead of its time (its node runs
    /// it at that time) records its fire time as `started_at`; otherwise the
    /// database's now. The node judges lateness by the recorded time, the one
    /// the ledger keeps, not by its own estimate of the database clock.
    async fn mark_running_all(&self, fire_ids: &[i64], node: &NodeRef) -> Result<Vec<(i64, Timestamp)>, StoreError>;

    /// For fires marked running that waited for a thread, or whose start's
    /// answer was lost: confirms, fenced as [`FireStore::mark_running_all`], that
    /// they are still running under this live incarnation, and sets their
    /// start time to now (their fire time, if that is later); returns the
    /// confirmed ones with that time. A fire left out is not this node's any
    /// more: it must not run. All or none, as [`FireStore::mark_running_all`].
    async fn confirm_starts(&self, fire_ids: &[i64], node: &NodeRef) -> Result<Vec<(i64, Timestamp)>, StoreError>;

    /// Records how fires of this node's incarnation end, fire by fire, and
    /// returns, in the same order, what each did: [`FollowUp::NotOwned`]
    /// for a fire that is no longer this incarnation's to end (so sending
    /// an end again after a lost answer is harmless), otherwise what
    /// [`FireEnd`] says of each kind. When every end is a plain success
    /// (`Succeeded { chain: false }`, the recorder's batch) they are one
    /// transaction, all or none; otherwise each end is its own transaction,
    /// in order, and an error stops there (those before it stand).
    async fn end_fires(&self, node: &NodeRef, ends: &[(i64, FireEnd)]) -> Result<Vec<FollowUp>, StoreError>;

    /// One end, as [`end_fires`](Self::end_fires) records it.
    async fn end_fire(&self, fire_id: i64, node: &NodeRef, end: FireEnd) -> Result<FollowUp, StoreError> {
        let mut done = self.end_fires(node, &[(fire_id, end)]).await?;
        Ok(done.pop().unwrap_or(FollowUp::NotOwned))
    }

    /// Records that a running fire passed its job's timeout: `timed_out_at`
    /// and the error are set, and the fire stays running until its code
    /// returns (then its end is recorded failed). Fenced like
    /// a finish; `true` when recorded.
    async fn fire_time_out(&self, fire_id: i64, node: &NodeRef, error: &str) -> Result<bool, StoreError>;

    /// Fires claimed or running whose owner is not a live incarnation (a dead
    /// node's, or released), at most `limit`, oldest first.
    async fn orphaned_fires(&self, limit: u32) -> Result<Vec<FireRecord>, StoreError>;

    /// Fires this incarnation has not started, scheduled and claimed before
    /// `before` (a retry or late run claimed now has an old fire time),
    /// oldest first, at most `limit` (read through the index of open fires:
    /// the ledger's size does not count).
    async fn claimed_by(&self, node: &NodeRef, before: Timestamp, limit: u32) -> Result<Vec<FireRecord>, StoreError>;

    /// Takes over an orphaned claimed fire, by compare-and-set on its owner.
    async fn take_over(&self, fire: &FireRecord, node: &NodeRef) -> Result<bool, StoreError>;

    /// An orphaned running fire whose job requests recovery: recorded failed
    /// ("node died mid-run") and its next attempt claimed by this node, in one
    /// transaction. `Some(new fire id)` when this caller won.
    async fn rerun(&self, fire: &FireRecord, node: &NodeRef) -> Result<Option<i64>, StoreError>;

    /// An orphaned running fire whose job does not request recovery: recorded
    /// abandoned. `true` when this caller won.
    async fn abandon(&self, fire: &FireRecord) -> Result<bool, StoreError>;

    /// Pending fires due before `before`, soonest first.
    async fn fires_pending(&self, before: Timestamp, limit: u32) -> Result<Vec<FireRecord>, StoreError>;

    /// Claims a pending fire for this (live) incarnation, by compare-and-set
    /// on its state. With `exclusive` (its job disallows concurrency), or a
    /// trigger with an overlap policy, the job's row is locked and the claim
    /// refused while a fire of the job is claimed or running; with a
    /// concurrency limit, while its key is full; and while the whole
    /// scheduler is on standby.
    async fn pending_claim(&self, fire_id: i64, node: &NodeRef, exclusive: bool) -> Result<PendingClaim, StoreError>;

    /// The ids of this incarnation's claimed or running fires that a newer
    /// fire of their job asked to stop under the cancel overlap policy
    /// ([`Overlap::Cancel`](crate::trigger::Overlap::Cancel)), read through
    /// the index of open fires.
    async fn cancel_requests(&self, node: &NodeRef) -> Result<Vec<i64>, StoreError>;

    /// What a fire of enqueued work `work_id` runs with (see
    /// [`Work`](super::Work)), read before a node claims one of its fires:
    /// its own payload (`None`: the job's applies) and the trace context
    /// of the span that enqueued it; both `None` when the work is gone.
    async fn work_run(&self, work_id: i64) -> Result<super::WorkRun, StoreError>;
}

/// Retention: one node's purge turn, the horizon the audit reads after, and the purges themselves.
///
/// Part of [`Store`]; see the [store module](crate::store).
#[async_trait]
pub trait RetentionStore: Send + Sync {
    /// Wins this scheduler's purge turn, by compare-and-set on when the last
    /// purge began: `true` for one caller per `every_ms` (database time).
    async fn purge_turn(&self, every_ms: i64) -> Result<bool, StoreError>;

    /// The fire time before which succeeded fires may have been purged: the
    /// audit checks only after it.
    async fn purge_horizon(&self) -> Result<Option<Timestamp>, StoreError>;

    /// Moves the purge horizon to `before` (never back).
    async fn purge_horizon_advance(&self, before: Timestamp) -> Result<(), StoreError>;

    /// Deletes at most `limit` fires in `state` (a finished state) scheduled
    /// before `before`, keeping each job's newest `keep_last` fires; returns
    /// how many it deleted.
    async fn fires_purge(
        &self,
        state: FireState,
        before: Timestamp,
        keep_last: u32,
        limit: u32,
    ) -> Result<u64, StoreError>;

    /// Deletes the rows of nodes dead or gone whose last heartbeat is before
    /// `before`, unless a fire or an execute still names their incarnation.
    async fn nodes_purge(&self, before: Timestamp) -> Result<u64, StoreError>;

    /// Deletes at most `limit` complete executes last changed before `before`
    /// that no open fire names, and as many pieces of enqueued work
    /// enqueued before `before` whose fires have all ended and whose unique
    /// window (if any) has passed.
    async fn executes_purge(&self, before: Timestamp, limit: u32) -> Result<u64, StoreError>;
}
