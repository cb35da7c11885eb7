//! What a store call can fail with.

use crate::error::Error;

/// What a store call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Input refused at the boundary; nothing was stored.
    #[error(transparent)]
    Invalid(#[from] Error),
    /// A job of that name already exists in the scheduler.
    #[error("a job named {name:?} already exists in scheduler {scheduler:?}")]
    DuplicateJob {
        /// The scheduler (cluster) name.
        scheduler: String,
        /// The job name.
        name: String,
    },
    /// No job of that name exists in the scheduler.
    #[error("no job named {name:?} in scheduler {scheduler:?}")]
    UnknownJob {
        /// The scheduler (cluster) name.
        scheduler: String,
        /// The job name.
        name: String,
    },
    /// A calendar of that name already exists in the scheduler (an add,
    /// not a replace).
    #[error("a calendar named {name:?} already exists in scheduler {scheduler:?}")]
    DuplicateCalendar {
        /// The scheduler (cluster) name.
        scheduler: String,
        /// The calendar name.
        name: String,
    },
    /// No calendar of that name exists in the scheduler.
    #[error("no calendar named {name:?} in scheduler {scheduler:?}")]
    UnknownCalendar {
        /// The scheduler (cluster) name.
        scheduler: String,
        /// The calendar name.
        name: String,
    },
    /// A calendar that triggers or other calendars use cannot be deleted.
    #[error("calendar {name:?} is in use by {}", users.join(", "))]
    CalendarInUse {
        /// The calendar name.
        name: String,
        /// Who uses it: `job NAME` or `calendar NAME`.
        users: Vec<String>,
    },
    /// A write made against a version of a job or calendar that is no
    /// longer the stored one (it changed, or went, since the caller read
    /// it): nothing was written.
    #[error("{kind} {name:?} is at version {}, not {expected}: it changed since it was read", current.map_or_else(|| "none (deleted)".to_owned(), |v| v.to_string()))]
    Stale {
        /// `job` or `calendar`.
        kind: &'static str,
        /// Its name.
        name: String,
        /// The version the write was made against.
        expected: i64,
        /// The stored version, `None` when it no longer exists.
        current: Option<i64>,
    },
    /// A database URL that names no supported backend or cannot be parsed.
    #[error("invalid database URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL, its password hidden.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The database could not be reached, or the connection was lost; the call
    /// may be retried.
    #[error("database unavailable: {reason}")]
    Unavailable {
        /// What the driver said.
        reason: String,
    },
    /// The schema could not be created or upgraded.
    #[error("migration failed: {reason}")]
    Migration {
        /// What went wrong.
        reason: String,
    },
    /// The database rolled the transaction back to break a deadlock or a
    /// serialization conflict with another transaction; nothing of it was
    /// stored and the call may be retried.
    #[error("database conflict (the transaction was rolled back): {reason}")]
    Conflict {
        /// What the driver said.
        reason: String,
    },
    /// A database whose settings could lose the scheduler's data in normal
    /// operation (a Redis that evicts keys under memory pressure): refused
    /// at connect.
    #[error("refusing a database with {setting} = {value}: {reason}")]
    UnsafeSettings {
        /// The setting.
        setting: String,
        /// Its value.
        value: String,
        /// What it could lose, and the safe values.
        reason: String,
    },
    /// The database did not answer within the call's deadline
    /// ([`Deadline`](super::Deadline)); whether the call was done is
    /// unknown, as for an answer lost on its way.
    #[error("the database did not answer {call} within {after_ms} ms")]
    TimedOut {
        /// The call.
        call: &'static str,
        /// The deadline.
        after_ms: u64,
    },
    /// Any other database error.
    #[error("database error: {reason}")]
    Database {
        /// What the driver said.
        reason: String,
    },
}
