//! The engine's own calls on a store: node membership, the due executes, the
//! claim, the fire lifecycle, take-overs, reruns, change waits and retention.
//! Every store implements them, beside [`Store`] (the store
//! conformance suite checks each one on every backend); nothing but the
//! engine, its tests and the benchmarks calls them, and an application never
//! needs to: it goes through [`Scheduler`](crate::engine::Scheduler) and
//! [`Admin`](crate::admin::Admin).

use std::future::Future;

use super::*;
use crate::time::Timestamp;

/// The engine's own calls on a store. See the [module docs](self).
pub trait EngineStore: Send + Sync + 'static {
    /// Registers a node, or re-registers it with a new incarnation (which
    /// retires the old one), live, heart-beating now.
    fn register_node(&self, node: &NodeRegistration) -> impl Future<Output = Result<Node, StoreError>> + Send;

    /// Records a heartbeat with how busy the node is (fires running or queued
    /// on its pool); `false` when this incarnation is no longer live (it was
    /// declared dead or replaced) and must re-register.
    fn heartbeat(
        &self,
        scheduler: &str,
        node: &NodeRef,
        busy: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Declares a node dead, if it is still live in that incarnation and its
    /// heartbeat is older than `dead_after_ms` (database time). `true` when this
    /// caller retired it.
    fn retire_node(
        &self,
        scheduler: &str,
        node: &NodeRef,
        dead_after_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Marks a node gone (a graceful leave), if still live in that incarnation.
    fn leave(&self, scheduler: &str, node: &NodeRef) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Executes in the waiting state whose next fire time is before `before`
    /// (or empty: rows written by hand that need initialising), in time order,
    /// at most `limit`. Rows that cannot be decoded are marked as errors and
    /// reported; the rest are served.
    fn due_executes(
        &self,
        scheduler: &str,
        before: Timestamp,
        limit: u32,
    ) -> impl Future<Output = Result<DueBatch, StoreError>> + Send;

    /// Executes in the running state owned by a node that is not live (or by
    /// no node), at most `limit`.
    fn orphaned_executes(
        &self,
        scheduler: &str,
        limit: u32,
    ) -> impl Future<Output = Result<DueBatch, StoreError>> + Send;

    /// A compare-and-set on an execute row and, if it wins, the insert of the
    /// ledger records (skipped ranges) in the same transaction.
    fn update_execute(
        &self,
        cas: &ExecuteCas,
        records: &[SkippedRecord],
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Many [`EngineStore::update_execute`]s in one transaction (a poll's overdue,
    /// paused and recomputed rows): each compare-and-set wins or loses on its
    /// own, and the result says, update by update, whether it won. An error
    /// means none was written.
    fn update_executes(
        &self,
        updates: &[(ExecuteCas, Vec<SkippedRecord>)],
    ) -> impl Future<Output = Result<Vec<bool>, StoreError>> + Send;

    /// Wins a fire: the execute's compare-and-set and the insert of its ledger
    /// row, in one transaction. `Some(fire id)` when this caller won.
    fn claim(&self, claim: &Claim) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send;

    /// Many claims, with the same guarantee for each; the result says, claim
    /// by claim, which were won. The claims share one transaction, except
    /// those of jobs that disallow concurrency, which take one each: such a
    /// claim that fails after others were stored counts as not won, so that
    /// an `Err` always means that no claim was stored.
    fn claim_batch(&self, claims: &[Claim]) -> impl Future<Output = Result<Vec<Option<i64>>, StoreError>> + Send;

    /// Marks claimed fires running, fenced: a fire is started only while it
    /// is still claimed by this node's incarnation and that incarnation is
    /// live; returns the ids that were started, each with the start time
    /// recorded. All or none: an error means none was started, however many
    /// fires the call names. A fire started ahead of its time (its node runs
    /// it at that time) records its fire time as `started_at`; otherwise the
    /// database's now. The node judges lateness by the recorded time, the one
    /// the ledger keeps, not by its own estimate of the database clock.
    fn mark_running_all(
        &self,
        fire_ids: &[i64],
        node: &NodeRef,
    ) -> impl Future<Output = Result<Vec<(i64, Timestamp)>, StoreError>> + Send;

    /// For fires marked running that waited for a thread, or whose start's
    /// answer was lost: confirms, fenced as [`EngineStore::mark_running_all`], that
    /// they are still running under this live incarnation, and sets their
    /// start time to now (their fire time, if that is later); returns the
    /// confirmed ones with that time. A fire left out is not this node's any
    /// more: it must not run. All or none, as [`EngineStore::mark_running_all`].
    fn confirm_starts(
        &self,
        fire_ids: &[i64],
        node: &NodeRef,
    ) -> impl Future<Output = Result<Vec<(i64, Timestamp)>, StoreError>> + Send;

    /// Records the success of many running fires of this node's incarnation;
    /// returns the ids recorded (a fire no longer this incarnation's is left
    /// out). All or none, as [`EngineStore::mark_running_all`].
    fn succeed_all(
        &self,
        fire_ids: &[i64],
        node: &NodeRef,
    ) -> impl Future<Output = Result<Vec<i64>, StoreError>> + Send;

    /// Records the outcome of a running fire of this node's incarnation.
    fn finish(
        &self,
        fire_id: i64,
        node: &NodeRef,
        outcome: &Outcome,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Records the success of a running fire of this node's incarnation and,
    /// in the same transaction, starts its job's chain: one fire of each child
    /// job (a job whose parent is this fire's job) under the same execute and
    /// fire time, attempt 1, claimed by this node, or recorded skipped when
    /// the child is paused. The unique key holds chains to one fire per child
    /// and parent fire, so a cycle of jobs ends where it would repeat.
    ///
    /// `None` when the fire is not this incarnation's to finish; otherwise
    /// the children's claimed fires (none when the job has no children).
    fn succeed_and_chain(
        &self,
        fire_id: i64,
        node: &NodeRef,
    ) -> impl Future<Output = Result<Option<Vec<ChainedFire>>, StoreError>> + Send;

    /// The ids of the scheduler's jobs that have at least one child job.
    fn chain_parents(&self, scheduler: &str) -> impl Future<Output = Result<Vec<i64>, StoreError>> + Send;

    /// Records a fire of this incarnation whose handler did not start as
    /// misfired, with the reason: claimed (the pool refused it), or marked
    /// running but found past the threshold when a thread took it. Its start
    /// time is cleared.
    fn misfire_claimed(
        &self,
        fire_id: i64,
        node: &NodeRef,
        reason: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Records a claimed fire as skipped without running it (its job was
    /// paused or deleted after the claim), with the reason. Fenced like a
    /// start; `true` when recorded.
    fn skip_claimed(
        &self,
        fire_id: i64,
        node: &NodeRef,
        reason: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Records a claimed fire as failed without running it (no live node has
    /// its handler), with the reason.
    fn fail_claimed(
        &self,
        fire_id: i64,
        node: &NodeRef,
        reason: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Gives up a claimed, unstarted fire so that any node may take it at once
    /// (a graceful shutdown).
    fn release_fire(&self, fire_id: i64, node: &NodeRef) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Fires claimed or running whose owner is not a live incarnation (a dead
    /// node's, or released), at most `limit`, oldest first.
    fn orphaned_fires(
        &self,
        scheduler: &str,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<FireRecord>, StoreError>> + Send;

    /// Fires this incarnation has not started, scheduled and claimed before
    /// `before` (a retry or late run claimed now has an old fire time),
    /// oldest first, at most `limit` (read through the index of open fires:
    /// the ledger's size does not count).
    fn claimed_by(
        &self,
        scheduler: &str,
        node: &NodeRef,
        before: Timestamp,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<FireRecord>, StoreError>> + Send;

    /// Takes over an orphaned claimed fire, by compare-and-set on its owner.
    fn take_over(&self, fire: &FireRecord, node: &NodeRef) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// An orphaned running fire whose job requests recovery: recorded failed
    /// ("node died mid-run") and its next attempt claimed by this node, in one
    /// transaction. `Some(new fire id)` when this caller won.
    fn rerun(&self, fire: &FireRecord, node: &NodeRef) -> impl Future<Output = Result<Option<i64>, StoreError>> + Send;

    /// An orphaned running fire whose job does not request recovery: recorded
    /// abandoned. `true` when this caller won.
    fn abandon(&self, fire: &FireRecord) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Records that a running fire passed its job's timeout: `timed_out_at`
    /// and the error are set, and the fire stays running until its code
    /// returns (then [`finish`](Self::finish) records it failed). Fenced like
    /// a finish; `true` when recorded.
    fn fire_time_out(
        &self,
        fire_id: i64,
        node: &NodeRef,
        error: &str,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Records a running fire failed and, in the same transaction, its next
    /// attempt as pending, due `retry_in_ms` from now: a retry waiting out its
    /// backoff is a row, so no node's death or restart loses it.
    fn fire_fail_and_retry(
        &self,
        fire_id: i64,
        node: &NodeRef,
        error: &str,
        retry_in_ms: i64,
    ) -> impl Future<Output = Result<FollowUp, StoreError>> + Send;

    /// Records a claimed or running fire of this incarnation misfired (as
    /// [`misfire_claimed`](Self::misfire_claimed)) and, in the same
    /// transaction, the late run its policy promised as a pending next
    /// attempt, due now. With `one_per_execute` (the fire-now policies), no
    /// late run is added while one of the same execute and job is pending: it
    /// stands for them all.
    fn fire_misfire_and_run_late(
        &self,
        fire_id: i64,
        node: &NodeRef,
        reason: &str,
        one_per_execute: bool,
    ) -> impl Future<Output = Result<FollowUp, StoreError>> + Send;

    /// Pending fires due before `before`, soonest first.
    fn fires_pending(
        &self,
        scheduler: &str,
        before: Timestamp,
        limit: u32,
    ) -> impl Future<Output = Result<Vec<FireRecord>, StoreError>> + Send;

    /// Claims a pending fire for this (live) incarnation, by compare-and-set
    /// on its state. With `exclusive` (its job disallows concurrency) the
    /// job's row is locked and the claim refused while a fire of the job is
    /// claimed or running.
    fn pending_claim(
        &self,
        fire_id: i64,
        node: &NodeRef,
        exclusive: bool,
    ) -> impl Future<Output = Result<PendingClaim, StoreError>> + Send;

    /// The scheduler's change counter, which every change made through the
    /// store bumps in its own transaction (0 before the first).
    fn changes(&self, scheduler: &str) -> impl Future<Output = Result<i64, StoreError>> + Send;

    /// Waits until the change counter differs from `seen`, or `max_wait`
    /// passes, and returns it: on PostgreSQL woken by `LISTEN`/`NOTIFY`, on
    /// the others by reading the counter every few dozen milliseconds, so that
    /// every node sees a change within [`CHANGE_VISIBILITY_MS`].
    fn change_wait(
        &self,
        scheduler: &str,
        seen: i64,
        max_wait: std::time::Duration,
    ) -> impl Future<Output = Result<i64, StoreError>> + Send;

    /// Wins this scheduler's purge turn, by compare-and-set on when the last
    /// purge began: `true` for one caller per `every_ms` (database time).
    fn purge_turn(&self, scheduler: &str, every_ms: i64) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// The fire time before which succeeded fires may have been purged: the
    /// audit checks only after it.
    fn purge_horizon(&self, scheduler: &str) -> impl Future<Output = Result<Option<Timestamp>, StoreError>> + Send;

    /// Moves the purge horizon to `before` (never back).
    fn purge_horizon_advance(
        &self,
        scheduler: &str,
        before: Timestamp,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Deletes at most `limit` fires in `state` (a finished state) scheduled
    /// before `before`, keeping each job's newest `keep_last` fires; returns
    /// how many it deleted.
    fn fires_purge(
        &self,
        scheduler: &str,
        state: FireState,
        before: Timestamp,
        keep_last: u32,
        limit: u32,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Deletes the rows of nodes dead or gone whose last heartbeat is before
    /// `before`, unless a fire or an execute still names their incarnation.
    fn nodes_purge(&self, scheduler: &str, before: Timestamp) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Deletes at most `limit` complete executes last changed before `before`
    /// that no open fire names.
    fn executes_purge(
        &self,
        scheduler: &str,
        before: Timestamp,
        limit: u32,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
}
