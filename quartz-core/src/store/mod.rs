//! The store contract: everything the scheduler keeps, behind two traits:
//! [`Store`], what applications, tools and the admin surface use, and
//! [`internal::EngineStore`], the engine's own calls.
//!
//! Both are implemented in `quartz-store` for SQLite, PostgreSQL and
//! MySQL/MariaDB; this crate never names a driver. Each method is one short
//! transaction. Times are epoch milliseconds of the **database's** clock
//! ([`Store::now`]), the only clock the cluster uses.
//!
//! The claim ([`EngineStore::claim`](internal::EngineStore::claim)) is the heart: one compare-and-set on the execute
//! row's `(state, prev_fire_time, next_fire_time, calendar_stamp)` and, in the same transaction,
//! the insert of the fire's ledger row, whose unique key on
//! `(execute_id, fire_time, attempt)` makes a second claim of the same fire
//! impossible by construction.
//!
//! The row formats shared by every backend live here too: [`TriggerColumns`]
//! (a [`Trigger`](crate::trigger::Trigger) as the execute row's columns) and the state names.

mod cas;
mod codec;
mod error;
pub mod internal;
mod rows;
mod spec;

use std::future::Future;

use crate::calendar::CalendarDefinition;
use crate::time::Timestamp;

pub use cas::{Claim, ExecuteCas, SkippedRecord};
pub use codec::TriggerColumns;
pub use error::StoreError;
pub use rows::{
    ChainedFire, ChangeAction, ChangeQuery, ChangeRecord, DEFAULT_ACTOR, DueBatch, Execute, ExecuteState, FireQuery,
    FireRecord, FireRetry, FireState, FollowUp, HealthCounts, Job, JobDetail, JobQuery, JobState, Node, NodeRef,
    NodeState, Outcome, PendingClaim, RejectedRow,
};
pub(crate) use spec::duration_of;
pub use spec::{
    ExecuteSpec, JobSpec, MAX_ATTEMPTS, MAX_DESCRIPTION_BYTES, MAX_ERROR_BYTES, MAX_NAME_BYTES, MAX_PAYLOAD_BYTES,
    NodeRegistration, RetryPolicy, check_name, millis_of,
};

/// How many fires a batched statement of a store names at most where the
/// database takes no array parameter (MySQL's id lists), and how many
/// successes the engine records per call.
pub const FIRES_PER_BATCH: usize = 64;

/// How long after a change made through the store (a job added, edited,
/// paused, resumed, triggered or deleted) every live node has seen it, in
/// milliseconds. A new trigger's first fire time is never earlier than this
/// after the change (see [`Trigger::visible_from`](crate::trigger::Trigger::visible_from)).
pub const CHANGE_VISIBILITY_MS: i64 = 250;

/// How far in the past a new trigger's first fire time may be and still count
/// as "now" (moved to [`CHANGE_VISIBILITY_MS`] ahead) rather than as a start
/// in the past, which Quartz's misfire policy handles; the default misfire
/// threshold.
pub const START_NOW_GRACE_MS: i64 = 5_000;

/// The execute id of a fire made by hand ([`Store::fire_now`]): it belongs
/// to no trigger.
pub const MANUAL_EXECUTE: i64 = 0;

/// Everything the scheduler keeps, as applications, tools and the admin
/// surface use it: jobs, nodes, history, changes. See the [module
/// docs](self). The engine's own calls (claims, the fire lifecycle,
/// take-overs, reruns, membership, retention) are in
/// [`internal::EngineStore`], which every store implements too.
///
/// Every method is one transaction; compare-and-set methods return whether this
/// caller won. Implementations are cheap to clone and shared across tasks.
pub trait Store: internal::EngineStore {
    /// The database's clock.
    fn now(&self) -> impl Future<Output = Result<Timestamp, StoreError>> + Send;

    /// The same store, whose changes (jobs created, edited, paused, resumed,
    /// triggered, deleted) are recorded in the change log as made by `actor`
    /// (at most 200 bytes kept), in each change's own transaction. A new
    /// store acts as [`DEFAULT_ACTOR`].
    fn acting_as(&self, actor: &str) -> Self
    where
        Self: Sized;

    /// Every node the scheduler has seen.
    fn list_nodes(&self, scheduler: &str) -> impl Future<Output = Result<Vec<Node>, StoreError>> + Send;

    /// Creates a job with its triggers, each initialised to its first fire time.
    /// Validates everything first; on any error nothing is stored.
    fn create_job(
        &self,
        scheduler: &str,
        job: &JobSpec,
        executes: &[ExecuteSpec],
    ) -> impl Future<Output = Result<Job, StoreError>> + Send;

    /// A job and its executes, by name. Execute rows that cannot be decoded
    /// are listed apart with the reason, not as an error of the whole call.
    fn get_job(
        &self,
        scheduler: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<JobDetail>, StoreError>> + Send;

    /// The jobs with these ids (those that still exist), in any order.
    fn jobs_by_id(&self, scheduler: &str, ids: &[i64]) -> impl Future<Output = Result<Vec<Job>, StoreError>> + Send;

    /// Every job of the scheduler, by name.
    fn list_jobs(&self, scheduler: &str) -> impl Future<Output = Result<Vec<Job>, StoreError>> + Send;

    /// One page of the scheduler's jobs, by name: filtered, searched, and
    /// paged by key (see [`JobQuery`]).
    fn jobs_page(&self, query: &JobQuery) -> impl Future<Output = Result<Vec<Job>, StoreError>> + Send;

    /// Replaces a job's definition (its name may change); when `executes` is
    /// given, its triggers are replaced too and start afresh. With
    /// `expected_version`, only if the job is still at that version
    /// ([`StoreError::Stale`] otherwise, nothing written).
    fn update_job(
        &self,
        scheduler: &str,
        name: &str,
        job: &JobSpec,
        executes: Option<&[ExecuteSpec]>,
        expected_version: Option<i64>,
    ) -> impl Future<Output = Result<Job, StoreError>> + Send;

    /// Pauses (`true`) or resumes a job and its waiting executes; with
    /// `expected_version`, only if the job is still at that version.
    fn set_paused(
        &self,
        scheduler: &str,
        name: &str,
        paused: bool,
        expected_version: Option<i64>,
    ) -> impl Future<Output = Result<Job, StoreError>> + Send;

    /// Fires a job now, once, beside its schedule: a pending fire of the
    /// job (no trigger's: its execute id is [`MANUAL_EXECUTE`]) due at the
    /// database's now, which the first node with the job's handler and a
    /// free thread claims and runs, as it runs a retry. A paused job's
    /// manual fire runs too: the pause holds the job's triggers, not a fire
    /// asked for by hand. Recorded in the change log as `job.trigger`.
    /// Returns the fire's ledger id and fire time.
    fn fire_now(
        &self,
        scheduler: &str,
        name: &str,
    ) -> impl Future<Output = Result<(i64, Timestamp), StoreError>> + Send;

    /// Deletes a job and its executes; its ledger rows stay as history.
    /// With `expected_version`, only if the job is still at that version.
    fn delete_job(
        &self,
        scheduler: &str,
        name: &str,
        expected_version: Option<i64>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Retries a finished fire by hand: a new attempt of the same fire (its
    /// trigger, job and fire time; the next attempt number), pending from
    /// the database's now, which the first node with the job's handler and
    /// a free thread runs. Only a failed, abandoned or misfired fire whose
    /// job exists and is not paused, with no attempt of it open or
    /// succeeded since. Recorded in the change log as `fire.retry`.
    fn retry_fire(&self, scheduler: &str, fire_id: i64) -> impl Future<Output = Result<FireRetry, StoreError>> + Send;

    /// The counts the cluster's health gauges show (see [`HealthCounts`]):
    /// waiting triggers whose next fire time is before `overdue_before`,
    /// open fires by state, pending fires due before `stranded_before`, and
    /// fires scheduled since `recent_since` by outcome. Bounded reads (on
    /// indexes), meant for every scrape.
    fn health_counts(
        &self,
        scheduler: &str,
        overdue_before: Timestamp,
        stranded_before: Timestamp,
        recent_since: Timestamp,
    ) -> impl Future<Output = Result<HealthCounts, StoreError>> + Send;

    /// Ledger rows, newest first.
    fn fires(&self, query: &FireQuery) -> impl Future<Output = Result<Vec<FireRecord>, StoreError>> + Send;

    /// The change log: changes made through the store, newest first (see
    /// [`ChangeRecord`]).
    fn change_log(&self, query: &ChangeQuery) -> impl Future<Output = Result<Vec<ChangeRecord>, StoreError>> + Send;

    /// Adds a calendar, or replaces the one of that name. Its chain of bases
    /// must resolve (no missing base, no cycle), and so must every calendar
    /// built on it. In the same transaction, the waiting and paused triggers
    /// that use it (directly or through a base) have their next fire time
    /// recomputed (from the earlier of their next fire time and the moment
    /// every node has seen the change) and their calendar stamp moved, so no
    /// node wins a fire it expanded under the calendar as it was; a complete
    /// trigger whose schedule has a time left that the calendar now includes
    /// is revived (waiting, or paused with its job). With
    /// `expected_version`, only if the calendar exists at that version
    /// ([`StoreError::Stale`] otherwise, nothing written).
    fn put_calendar(
        &self,
        scheduler: &str,
        name: &str,
        definition: &CalendarDefinition,
        expected_version: Option<i64>,
    ) -> impl Future<Output = Result<CalendarRecord, StoreError>> + Send;

    /// Adds a calendar, as [`put_calendar`](Self::put_calendar) does, only
    /// if none of that name exists: of two adds of one name at once, one
    /// stores its definition and the other gets
    /// [`StoreError::DuplicateCalendar`], the first left as it was.
    fn add_calendar(
        &self,
        scheduler: &str,
        name: &str,
        definition: &CalendarDefinition,
    ) -> impl Future<Output = Result<CalendarRecord, StoreError>> + Send;

    /// A calendar, by name.
    fn get_calendar(
        &self,
        scheduler: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<CalendarRecord>, StoreError>> + Send;

    /// Every calendar of the scheduler, by name.
    fn list_calendars(&self, scheduler: &str) -> impl Future<Output = Result<Vec<CalendarRecord>, StoreError>> + Send;

    /// Deletes a calendar that no trigger and no other calendar uses
    /// ([`StoreError::CalendarInUse`] otherwise, naming them); with
    /// `expected_version`, only if it is still at that version.
    fn delete_calendar(
        &self,
        scheduler: &str,
        name: &str,
        expected_version: Option<i64>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// A calendar as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalendarRecord {
    /// Its name, unique in the scheduler.
    pub name: String,
    /// What it excludes.
    pub definition: CalendarDefinition,
    /// When it was added (database time).
    pub created_at: Timestamp,
    /// When it was last replaced.
    pub updated_at: Timestamp,
    /// Moved on by every replacement (1 when added): what a write with an
    /// expected version compares.
    pub version: i64,
}
