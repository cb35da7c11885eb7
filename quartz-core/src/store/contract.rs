//! The store's contract: [`Store`], the whole of it, made of one trait per
//! concern. This file holds the root and the admin surface's three
//! ([`JobStore`], [`CalendarStore`], [`HistoryStore`]); the engine's four
//! ([`NodeStore`], [`ScheduleStore`], [`FireStore`], [`RetentionStore`])
//! are in `fire_path.rs`.
//!
//! Every trait is object-safe: the engine, the admin surface and the tools
//! hold a store as [`SharedStore`] (`Arc<dyn Store>`), whichever backend it
//! is. A store value is scoped to one scheduler ([`Store::scheduler`],
//! [`Store::scoped`]): no call names one. Every method is one transaction;
//! compare-and-set methods return whether this caller won.

use std::any::Any;
use std::sync::Arc;

use async_trait::async_trait;

use super::*;
use crate::calendar::CalendarDefinition;
use crate::time::Timestamp;

/// Everything the scheduler keeps, as one object: the seven traits of its
/// concerns, the database's clock, and who is acting. Implemented in
/// `quartz-store` for SQLite, PostgreSQL, MySQL/MariaDB and Redis; a new
/// store implements the seven traits and this one, and passes the
/// conformance suite (see "Writing a store" in docs/stores.md).
///
/// Implementations are cheap to clone and shared across tasks; the engine
/// and the admin surface hold one as a [`SharedStore`].
#[async_trait]
pub trait Store:
    JobStore + CalendarStore + HistoryStore + NodeStore + ScheduleStore + FireStore + RetentionStore + Any + std::fmt::Debug
{
    /// The database's clock: the only clock the cluster uses.
    async fn now(&self) -> Result<Timestamp, StoreError>;

    /// The scheduler (cluster) whose rows this store reads and writes: every
    /// call is scoped to it. A store made by a `connect` is on
    /// [`DEFAULT_SCHEDULER`] until [`scoped`](Self::scoped).
    fn scheduler(&self) -> &str;

    /// The same store (the same connections, the same actor), on another
    /// scheduler's rows. The name is checked where it is written (a job
    /// created, a node registered): at most [`MAX_NAME_BYTES`] bytes, no
    /// control characters.
    fn scoped(&self, scheduler: &str) -> SharedStore;

    /// The same store, whose changes (jobs created, edited, paused, resumed,
    /// triggered, deleted) are recorded in the change log as made by `actor`
    /// (at most 200 bytes kept), in each change's own transaction. A new
    /// store acts as [`DEFAULT_ACTOR`].
    fn acting_as(&self, actor: &str) -> SharedStore;

    /// Whether [`ScheduleStore::claim_batch`] writes consecutive claims of
    /// one execute in a batch (each expecting what the one before leaves)
    /// as one compare-and-set of the execute's row, so that a fire claimed
    /// along with the one before it costs less than a claim of its own. The
    /// engine claims an execute's next fires along with its due one only on
    /// such a store: elsewhere the runs would cost as much and come in
    /// bursts. The default: no.
    fn claims_runs_at_once(&self) -> bool {
        false
    }

    /// Closes the store's connections (a pool drains; the default does
    /// nothing). Clones share them: call it once, when nothing else will
    /// use the store.
    async fn close(&self) {}
}

/// A store as the engine, the admin surface and the tools hold it, whatever
/// its backend: cheap to clone.
pub type SharedStore = Arc<dyn Store>;

/// What [`SchedulerBuilder::start`](crate::engine::SchedulerBuilder::start)
/// and [`Admin::new`](crate::admin::Admin::new) take: any store, or a
/// [`SharedStore`] already.
pub trait IntoStore {
    /// The store, shared.
    fn into_store(self) -> SharedStore;
}

impl<S: Store> IntoStore for S {
    fn into_store(self) -> SharedStore {
        Arc::new(self)
    }
}

impl IntoStore for SharedStore {
    fn into_store(self) -> SharedStore {
        self
    }
}

impl IntoStore for &SharedStore {
    fn into_store(self) -> SharedStore {
        Arc::clone(self)
    }
}

/// Jobs: created, read, paged, edited, paused, fired or retried by hand, deleted.
///
/// Part of [`Store`]; see the [store module](crate::store).
#[async_trait]
pub trait JobStore: Send + Sync {
    /// Creates a job with its triggers, each initialised to its first fire time.
    /// Validates everything first; on any error nothing is stored.
    async fn create_job(&self, job: &JobSpec, executes: &[ExecuteSpec]) -> Result<Job, StoreError>;

    /// A job and its executes, by name. Execute rows that cannot be decoded
    /// are listed apart with the reason, not as an error of the whole call.
    async fn get_job(&self, name: &str) -> Result<Option<JobDetail>, StoreError>;

    /// The jobs with these ids (those that still exist), in any order.
    async fn jobs_by_id(&self, ids: &[i64]) -> Result<Vec<Job>, StoreError>;

    /// Every job of the scheduler, by name.
    async fn list_jobs(&self) -> Result<Vec<Job>, StoreError>;

    /// One page of the scheduler's jobs, by name: filtered, searched, and
    /// paged by key (see [`JobQuery`]).
    async fn jobs_page(&self, query: &JobQuery) -> Result<Vec<Job>, StoreError>;

    /// Replaces a job's definition (its name may change); when `executes` is
    /// given, its triggers are replaced too and start afresh. With
    /// `expected_version`, only if the job is still at that version
    /// ([`StoreError::Stale`] otherwise, nothing written).
    async fn update_job(
        &self,
        name: &str,
        job: &JobSpec,
        executes: Option<&[ExecuteSpec]>,
        expected_version: Option<i64>,
    ) -> Result<Job, StoreError>;

    /// Pauses (`true`) or resumes a job and its waiting executes; with
    /// `expected_version`, only if the job is still at that version.
    async fn set_paused(&self, name: &str, paused: bool, expected_version: Option<i64>) -> Result<Job, StoreError>;

    /// Fires a job now, once, beside its schedule: a pending fire of the
    /// job (no trigger's: its execute id is [`MANUAL_EXECUTE`]) due at the
    /// database's now, which the first node with the job's handler and a
    /// free thread claims and runs, as it runs a retry. A paused job's
    /// manual fire runs too: the pause holds the job's triggers, not a fire
    /// asked for by hand. Recorded in the change log as `job.trigger`.
    /// Returns the fire's ledger id and fire time.
    async fn fire_now(&self, name: &str) -> Result<(i64, Timestamp), StoreError>;

    /// Enqueues a piece of work (see [`Work`]): a row holding its payload
    /// and unique key, and its first attempt as a pending fire of job
    /// `work.job` due at [`Work::due`] (its fire time), which the first node
    /// with the job's handler and a free thread claims and runs, as it runs
    /// a fire by hand; its retries follow the job's policy and carry the
    /// same payload. A paused job's work waits until it is resumed. With a
    /// unique key that another piece of work of the job holds (pending or
    /// running, or ended within its window), nothing is written and the
    /// answer is [`Enqueued::Duplicate`]. Counted as a change (so that
    /// every node sees work due now at once), not logged one by one.
    ///
    /// # Errors
    ///
    /// [`StoreError::UnknownJob`]; [`StoreError::Invalid`] for what
    /// [`Work::validate`] refuses.
    async fn enqueue(&self, work: &Work) -> Result<Enqueued, StoreError>;

    /// Deletes a job and its executes; its ledger rows stay as history.
    /// With `expected_version`, only if the job is still at that version.
    async fn delete_job(&self, name: &str, expected_version: Option<i64>) -> Result<(), StoreError>;

    /// Retries a finished fire by hand: a new attempt of the same fire (its
    /// trigger, job and fire time; the next attempt number), pending from
    /// the database's now, which the first node with the job's handler and
    /// a free thread runs. Only a failed, abandoned or misfired fire whose
    /// job exists and is not paused, with no attempt of it open or
    /// succeeded since. Recorded in the change log as `fire.retry`.
    async fn retry_fire(&self, fire_id: i64) -> Result<FireRetry, StoreError>;

    /// Puts the whole scheduler on standby (`true`) or takes it off
    /// (`false`). On standby no node claims a fire: none of a trigger, no
    /// retry, no late run, no fire asked for by hand; the fires already
    /// claimed or running finish. Once resumed, each trigger found overdue
    /// gets its misfire policy. Every node sees the change within
    /// [`CHANGE_VISIBILITY_MS`]. Recorded in the change log as
    /// `scheduler.pause` or `scheduler.resume` (target: the scheduler's
    /// name), even when it changes nothing. Returns since when the
    /// scheduler is on standby (database time; a second pause keeps the
    /// first's), `None` once resumed.
    async fn set_standby(&self, on: bool) -> Result<Option<Timestamp>, StoreError>;

    /// Since when the scheduler is on standby (database time), or `None`
    /// while it runs.
    async fn standby(&self) -> Result<Option<Timestamp>, StoreError>;

    /// Backfills job `name`: each of `fires` (a fire time of one of the
    /// job's triggers) is queued as a pending fire due at its `due_at`,
    /// which the first node with the job's handler and room runs, once, as
    /// it runs a retry: its first attempt, or, when every attempt of it in
    /// the ledger was misfired or skipped, the next one (see
    /// [`backfill_attempt`]). A fire time that ran, or has an attempt under
    /// way, is left alone and counted in [`Backfilled::already`]. At most
    /// [`MAX_BACKFILL`] at once. One transaction; recorded in the change
    /// log as `job.backfill`.
    ///
    /// # Errors
    ///
    /// [`StoreError::UnknownJob`]; [`StoreError::Invalid`] for a fire of
    /// an execute that is not the job's, or too many.
    async fn backfill(&self, name: &str, fires: &[BackfillFire]) -> Result<Backfilled, StoreError>;
}

/// Calendars: added, replaced (moving the triggers that use them), read, deleted.
///
/// Part of [`Store`]; see the [store module](crate::store).
#[async_trait]
pub trait CalendarStore: Send + Sync {
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
    async fn put_calendar(
        &self,
        name: &str,
        definition: &CalendarDefinition,
        expected_version: Option<i64>,
    ) -> Result<CalendarRecord, StoreError>;

    /// Adds a calendar, as [`put_calendar`](Self::put_calendar) does, only
    /// if none of that name exists: of two adds of one name at once, one
    /// stores its definition and the other gets
    /// [`StoreError::DuplicateCalendar`], the first left as it was.
    async fn add_calendar(&self, name: &str, definition: &CalendarDefinition) -> Result<CalendarRecord, StoreError>;

    /// A calendar, by name.
    async fn get_calendar(&self, name: &str) -> Result<Option<CalendarRecord>, StoreError>;

    /// Every calendar of the scheduler, by name.
    async fn list_calendars(&self) -> Result<Vec<CalendarRecord>, StoreError>;

    /// Deletes a calendar that no trigger and no other calendar uses
    /// ([`StoreError::CalendarInUse`] otherwise, naming them); with
    /// `expected_version`, only if it is still at that version.
    async fn delete_calendar(&self, name: &str, expected_version: Option<i64>) -> Result<(), StoreError>;
}

/// What happened and who is there: the nodes, the fire ledger, the change log and its counter, the health counts.
///
/// Part of [`Store`]; see the [store module](crate::store).
#[async_trait]
pub trait HistoryStore: Send + Sync {
    /// Every node the scheduler has seen.
    async fn list_nodes(&self) -> Result<Vec<Node>, StoreError>;

    /// The payload schemas the live nodes published when they registered
    /// ([`NodeRegistration::payload_schemas`]), by node id: what the admin
    /// surface checks a payload against. Nodes that published none are
    /// left out. Apart from [`list_nodes`](Self::list_nodes), which the
    /// engine reads on every heartbeat, as schemas may be large.
    async fn payload_schemas(&self) -> Result<Vec<(String, PayloadSchemas)>, StoreError>;

    /// Ledger rows, newest first.
    async fn fires(&self, query: &FireQuery) -> Result<Vec<FireRecord>, StoreError>;

    /// The change log: changes made through the store, newest first (see
    /// [`ChangeRecord`]).
    async fn change_log(&self, query: &ChangeQuery) -> Result<Vec<ChangeRecord>, StoreError>;

    /// The counts the cluster's health gauges show (see [`HealthCounts`]):
    /// waiting triggers whose next fire time is before `overdue_before`,
    /// open fires by state, pending fires due before `stranded_before`, and
    /// fires scheduled since `recent_since` by outcome. Bounded reads (on
    /// indexes), meant for every scrape.
    async fn health_counts(
        &self,
        overdue_before: Timestamp,
        stranded_before: Timestamp,
        recent_since: Timestamp,
    ) -> Result<HealthCounts, StoreError>;

    /// The scheduler's change counter, which every change made through the
    /// store bumps in its own transaction (0 before the first).
    async fn changes(&self) -> Result<i64, StoreError>;

    /// Waits until the change counter differs from `seen`, or `max_wait`
    /// passes, and returns it: on PostgreSQL woken by `LISTEN`/`NOTIFY`, on
    /// the others by reading the counter every few dozen milliseconds, so that
    /// every node sees a change within [`CHANGE_VISIBILITY_MS`].
    async fn change_wait(&self, seen: i64, max_wait: std::time::Duration) -> Result<i64, StoreError>;

    /// The schedulers this database holds jobs or nodes of, by name,
    /// whichever scheduler this handle is scoped to: what an operator who
    /// named a scheduler with nothing in it is shown.
    async fn schedulers(&self) -> Result<Vec<String>, StoreError>;
}
