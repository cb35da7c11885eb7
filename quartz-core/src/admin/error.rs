//! What an admin call can fail with, and how a store's errors map to it.

use crate::store::StoreError;

/// What an admin call can fail with. Each has a stable [`code`](Self::code)
/// for machines; [`Invalid`](Self::Invalid) names the field at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// Input refused; nothing was changed.
    #[error("{field}: {message}")]
    Invalid {
        /// The field at fault (`name`, `triggers[0].cron`, …).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// No such job.
    #[error("no job named {name:?}")]
    NotFound {
        /// The name asked for.
        name: String,
    },
    /// No such calendar.
    #[error("no calendar named {name:?}")]
    CalendarNotFound {
        /// The name asked for.
        name: String,
    },
    /// No fire of that id.
    #[error("no fire {id}")]
    FireNotFound {
        /// The id asked for.
        id: i64,
    },
    /// What was asked cannot be done in the state things are in (a retry
    /// of a fire that did not fail, or whose job is paused); nothing was
    /// changed.
    #[error("{reason}")]
    Refused {
        /// Why, in words.
        reason: String,
    },
    /// A calendar still in use cannot be deleted.
    #[error("calendar {name:?} is in use by {}", users.join(", "))]
    InUse {
        /// The calendar.
        name: String,
        /// Who uses it: `job NAME`, `calendar NAME`.
        users: Vec<String>,
    },
    /// A job of that name exists already.
    #[error("a job named {name:?} already exists")]
    Conflict {
        /// The name.
        name: String,
    },
    /// A calendar of that name exists already (an add, not a replace).
    #[error("a calendar named {name:?} already exists")]
    CalendarExists {
        /// The name.
        name: String,
    },
    /// A write made against a version of a job or calendar that is no
    /// longer the stored one: someone changed it (or deleted it) since it
    /// was read. Nothing was written; read it again, and decide.
    #[error("{kind} {name:?} changed since it was read: it is at version {}, not {expected}", current.map_or_else(|| "none (it was deleted)".to_owned(), |v| v.to_string()))]
    Stale {
        /// `job` or `calendar`.
        kind: &'static str,
        /// Its name.
        name: String,
        /// The version the write was made against.
        expected: i64,
        /// The stored version; `None` when it no longer exists.
        current: Option<i64>,
    },
    /// The database could not be reached; the call may be retried.
    #[error("database unavailable: {reason}")]
    Unavailable {
        /// What the driver said.
        reason: String,
    },
    /// As much of a bounded kind of work (cron previews) as the process
    /// allows is running; the call may be retried shortly.
    #[error("busy: {what}")]
    Busy {
        /// What is busy, and what to do.
        what: String,
    },
    /// A failure of the admin surface itself (a search that panicked).
    #[error("internal error: {reason}")]
    Internal {
        /// What failed.
        reason: String,
    },
    /// Any other store error.
    #[error(transparent)]
    Store(StoreError),
}

impl AdminError {
    /// An [`AdminError::Invalid`].
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> AdminError {
        AdminError::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// A stable name for machines: `invalid`, `not_found`, `conflict`,
    /// `stale`, `busy`, `unavailable`, `internal`.
    pub fn code(&self) -> &'static str {
        match self {
            AdminError::Invalid { .. } => "invalid",
            AdminError::NotFound { .. } | AdminError::CalendarNotFound { .. } | AdminError::FireNotFound { .. } => {
                "not_found"
            }
            AdminError::Conflict { .. }
            | AdminError::CalendarExists { .. }
            | AdminError::InUse { .. }
            | AdminError::Refused { .. } => "conflict",
            AdminError::Stale { .. } => "stale",
            AdminError::Busy { .. } => "busy",
            AdminError::Unavailable { .. } => "unavailable",
            AdminError::Internal { .. } | AdminError::Store(_) => "internal",
        }
    }

    /// The field at fault, for [`AdminError::Invalid`].
    pub fn field(&self) -> Option<&str> {
        match self {
            AdminError::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }
}

impl From<StoreError> for AdminError {
    fn from(e: StoreError) -> AdminError {
        match e {
            StoreError::Invalid(crate::Error::InvalidCalendar { field, reason }) => AdminError::invalid(field, reason),
            StoreError::Invalid(crate::Error::InvalidWork { field, reason }) => AdminError::invalid(field, reason),
            StoreError::Invalid(e) => AdminError::invalid("", e.to_string()),
            StoreError::UnknownCalendar { name, .. } => AdminError::CalendarNotFound { name },
            StoreError::CalendarInUse { name, users } => AdminError::InUse { name, users },
            StoreError::UnknownJob { name, .. } => AdminError::NotFound { name },
            StoreError::DuplicateJob { name, .. } => AdminError::Conflict { name },
            StoreError::DuplicateCalendar { name, .. } => AdminError::CalendarExists { name },
            StoreError::Unavailable { reason } => AdminError::Unavailable { reason },
            StoreError::Stale {
                kind,
                name,
                expected,
                current,
            } => AdminError::Stale {
                kind,
                name,
                expected,
                current,
            },
            other => AdminError::Store(other),
        }
    }
}
