//! The store contract: everything the scheduler keeps, behind [`Store`],
//! which is one object-safe trait per concern:
//!
//! | trait | concern | used by |
//! |---|---|---|
//! | [`JobStore`] | jobs and their triggers: create, read, page, edit, pause, fire or retry by hand, delete | the admin surface |
//! | [`CalendarStore`] | calendars, and the triggers a change of one moves | the admin surface |
//! | [`HistoryStore`] | nodes, the fire ledger, the change log, health counts | the admin surface, the engine |
//! | [`NodeStore`] | membership: register, heartbeat, leave, declare dead | the engine |
//! | [`ScheduleStore`] | the executes: due ones, compare-and-set, the claim | the engine |
//! | [`FireStore`] | open fires: start, end ([`FireEnd`]), time out, take over, pending ones | the engine |
//! | [`RetentionStore`] | purges and the audit's horizon | the engine |
//!
//! The engine and the admin surface hold a store as a [`SharedStore`]
//! (`Arc<dyn Store>`). `quartz-store` implements it for SQLite, PostgreSQL,
//! MySQL/MariaDB and Redis; this crate never names a driver. Each method is
//! one short transaction. Times are epoch milliseconds of the **database's**
//! clock ([`Store::now`]), the only clock the cluster uses.
//!
//! The claim ([`ScheduleStore::claim`]) is the heart: one compare-and-set on
//! the execute row's `(state, prev_fire_time, next_fire_time,
//! calendar_stamp)` and, in the same transaction, the insert of the fire's
//! ledger row, whose unique key on `(execute_id, fire_time, attempt)` makes a
//! second claim of the same fire impossible by construction.
//!
//! The row formats shared by every backend live here too: [`TriggerColumns`]
//! (a [`Trigger`](crate::trigger::Trigger) as the execute row's columns) and the state names.

mod backfill;
mod cas;
mod codec;
mod contract;
mod decorate;
mod error;
mod fire_path;
mod history_rows;
mod limit;
mod rows;
pub mod rules;
mod spec;
mod work;

use crate::calendar::CalendarDefinition;
use crate::time::Timestamp;

pub use backfill::{
    BackfillFire, Backfilled, MAX_BACKFILL, QueuedFire, backfill_attempt, backfill_span, check_backfill,
};
pub use cas::{Claim, ClaimBusy, ExecuteCas, FullKey, SkippedRecord};
pub use codec::{ScheduleColumns, TriggerColumns};
pub use contract::{CalendarStore, HistoryStore, IntoStore, JobStore, SharedStore, Store};
pub use decorate::{ADMIN_CALLS, ADMIN_DEADLINE, AdminBound, Deadline};
pub use error::StoreError;
pub use fire_path::{FireEnd, FireStore, LateRun, NodeStore, RetentionStore, ScheduleStore};
pub use history_rows::{ChangeQuery, ChangeRecord, DEFAULT_ACTOR, FireRetry, HealthCounts};
pub use limit::{ConcurrencyLimit, DEFAULT_LIMIT_KEY, MAX_CONCURRENCY, MAX_LIMIT_KEY_BYTES};
pub use rows::{
    ChainedFire, ChangeAction, DueBatch, DueCursor, Execute, ExecuteState, FireQuery, FireRecord, FireState, FollowUp,
    HandlerSpan, Job, JobDetail, JobQuery, JobState, Node, NodeRef, NodeState, Outcome, PendingClaim, RejectedRow,
    waited_for_room,
};
pub(crate) use spec::duration_of;
pub use spec::{
    ExecuteSpec, JobSpec, MAX_ATTEMPTS, MAX_DESCRIPTION_BYTES, MAX_ERROR_BYTES, MAX_NAME_BYTES, MAX_PAYLOAD_BYTES,
    NodeRegistration, PayloadSchemas, RetryPolicy, check_name, millis_of,
};
pub use work::{
    Due, Enqueued, MAX_UNIQUE_KEY_BYTES, Unique, Work, WorkRun, valid_trace_parent, work_execute, work_of_execute,
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

/// The scheduler (cluster) a store is on until it is
/// [`scoped`](Store::scoped) to another, and the one the CLI and the
/// examples use when none is named.
pub const DEFAULT_SCHEDULER: &str = "default";

/// The execute id of a fire made by hand ([`JobStore::fire_now`]): it belongs
/// to no trigger.
pub const MANUAL_EXECUTE: i64 = 0;

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

/// The contract's traits, unnamed (`use quartz_core::store::prelude::*`), so
/// that their methods can be called on a concrete store such as `SqlStore`
/// (a [`SharedStore`] needs no import).
pub mod prelude {
    pub use super::{
        CalendarStore as _, FireStore as _, HistoryStore as _, JobStore as _, NodeStore as _, RetentionStore as _,
        ScheduleStore as _, Store as _,
    };
}
